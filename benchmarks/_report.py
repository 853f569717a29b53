"""A benchmark's printed result: plain-text tables, and the file that keeps them with their command.

Every results file starts with the exact command that produced it, so anyone can re-run it.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["RESULTS_DIR", "command_line", "emit", "table"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def command_line() -> str:
    """This process's command as a user types it: ``python -m benchmarks.<name> ARGS``."""
    module = Path(sys.argv[0]).stem
    return shlex.join(["python", "-m", f"benchmarks.{module}", *sys.argv[1:]])


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; the first column left-aligned, the rest right."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def emit(text: str, *, out: Path | None) -> None:
    """Print ``text``; with ``out``, also write it there under the command line."""
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"{command_line()}\n\n{text.rstrip()}\n")
        print(f"\nwritten: {out}")
