"""A dashboard-like reader: polls the sweep's SQLite file the whole time, read-only.

It opens its own connection in read-only mode (as optuna-dashboard or a second shell would),
reads the measurement rows and Optuna's trial states, and records what a reader must never
see: an error (locked, malformed), a row count that goes down, a completed trial that
disappears or whose values change.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DbReader"]


@dataclass
class ReaderStats:
    polls: int = 0
    errors: list[str] = field(default_factory=list)
    rows: int = 0  # measurement rows at the last poll
    complete: dict[int, tuple[float, float]] = field(default_factory=dict)  # trial number -> (tps, ppl)


class DbReader:
    def __init__(self, db_path: Path, *, study: str, interval_s: float = 0.2) -> None:
        self.db_path = Path(db_path)
        self.study = study
        self.interval_s = interval_s
        self.stats = ReaderStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-db-reader", daemon=True)

    def __enter__(self) -> DbReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.db_path.exists():
                continue
            try:
                self._poll()
            except sqlite3.Error as exc:
                self.stats.errors.append(f"{type(exc).__name__}: {exc}")

    def _poll(self) -> None:
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=30.0)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"measurements", "trials"} <= tables:
                return  # the driver has not created its tables yet
            rows = conn.execute(
                "SELECT trial_number, status, tps, ppl FROM measurements WHERE study_name = ?", (self.study,)
            ).fetchall()
            conn.execute("SELECT state, count(*) FROM trials GROUP BY state").fetchall()
        finally:
            conn.close()
        self._check(rows)

    def _check(self, rows: list[tuple[int, str, float | None, float | None]]) -> None:
        stats = self.stats
        stats.polls += 1
        if len(rows) < stats.rows:
            stats.errors.append(f"measurement rows went down from {stats.rows} to {len(rows)}")
        stats.rows = len(rows)
        seen = {number: (tps, ppl) for number, status, tps, ppl in rows if status == "complete"}
        for number, values in stats.complete.items():
            if seen.get(number) != values:
                stats.errors.append(f"complete trial {number} changed from {values} to {seen.get(number)}")
        stats.complete.update(seen)
