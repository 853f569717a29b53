"""Where every command keeps what it runs, relative to where it is started: the boots' and trials' folders, the
exports, Ray's files and the default database (``sweep.store.DEFAULT_STORAGE_URL``). Standard library only, so a
command names it before its heavy imports."""

from pathlib import Path

__all__ = ["RUN_DIR"]

RUN_DIR = Path("runs")
