"""After a sweep: the dashboards' exports, run as their own command, ``python -m dashboards.export``.

The sweep does not import the dashboards (its flow runs study -> driver -> worker -> engine ->
bench -> store -> dashboards, never back up): it runs their command as a user would. An export is
a convenience on top of the database, which already holds everything, so a failing export is
reported, never a failed sweep. An installation without the ``dashboards`` package is told so
before anything runs: the check locates the package (``importlib.util.find_spec``) without
importing it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from sweep.store import shown_url

__all__ = ["EXPORT_TIMEOUT_S", "export_results"]

EXPORT_TIMEOUT_S = 300.0  # Chromium renders the PNG and SVG; a hung browser must not hang the sweep
DASHBOARDS = "dashboards"  # the optional package whose command writes the exports


def export_results(study_name: str, storage_url: str, *, out: Console, run_dir: Path) -> None:
    if importlib.util.find_spec(DASHBOARDS) is None:
        note = f"exports skipped: this installation has no {DASHBOARDS} package; the database holds every result"
        out.print(note, markup=False)
        return
    out_dir = run_dir / "exports" / study_name
    argv = [
        sys.executable,
        "-m",
        f"{DASHBOARDS}.export",
        "--study",
        study_name,
        "--storage",
        storage_url,
        "--out",
        str(out_dir),
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        out.print(f"exports failed: no answer in {EXPORT_TIMEOUT_S:g} s; the database holds every result", markup=False)
        return
    if done.returncode == 0:
        out.print(f"exports: {out_dir}", markup=False)
        return
    last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no message")
    out.print(
        f"exports failed (exit {done.returncode}: {shown_url(last)}); the database holds every result", markup=False
    )
