"""What the stack's garbage collectors did, from the records ``engine/stackside/stackhooks/sitecustomize.py`` writes.

Each Python process of a stack started with ``STACK_GC_LOG`` appends to ``gc-<pid>.jsonl`` in that folder a
line of its collector's state (at start-up, and after a freeze) and one for every collection that took
``LOGGED_S`` (1 ms) or more, stamped by ``time.perf_counter()``: the system's monotonic clock, which
the telemetry's windows are stamped by too. So a timed run's collections are those that began inside
its window; their time is a lower bound of what collecting took (shorter ones are not written).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GcLog"]


@dataclass(frozen=True)
class _Collection:
    at: float
    seconds: float
    generation: int | None


class GcLog:
    """The records of one boot's stack under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _lines(self) -> Iterable[dict[str, Any]]:
        for path in sorted(self.folder.glob("gc-*.jsonl")):
            try:
                text = path.read_text()
            except OSError:
                continue
            for line in text.splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a killed process
                if isinstance(record, dict):
                    yield record

    def collections(self) -> list[_Collection]:
        return [
            _Collection(float(r["t"]), float(r["s"]), r.get("gen"))
            for r in self._lines()
            if isinstance(r.get("t"), (int, float)) and isinstance(r.get("s"), (int, float))
        ]

    def figures(self, spans: list[tuple[float, float]]) -> dict[str, Any]:
        """The collections that began inside ``spans`` (perf_counter pairs): how many, their seconds, the longest,
        the full (generation 2) ones."""
        inside = [c for c in self.collections() if any(a <= c.at <= b for a, b in spans)]
        return {
            "gc_collections": len(inside),
            "gc_s": round(sum(c.seconds for c in inside), 6),
            "gc_max_s": round(max((c.seconds for c in inside), default=0.0), 6),
            "gc_full": sum(1 for c in inside if c.generation == 2),
        }

    def states(self) -> list[dict[str, Any]]:
        """Each process's last state line (policy, enabled, thresholds, frozen objects, program), by pid."""
        last: dict[int, dict[str, Any]] = {}
        for r in self._lines():
            if "pid" in r:
                last[int(r["pid"])] = r
        return [last[pid] for pid in sorted(last)]
