"""After a sweep: the dashboards' exports, when that package provides them.

An export is a convenience on top of the database, which already holds everything: a failing
export is reported, never a failed sweep.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from rich.console import Console

__all__ = ["export_results"]


def export_results(study_name: str, storage_url: str, *, out: Console, run_dir: Path) -> None:
    try:
        module = importlib.import_module("dashboards.export")
    except ModuleNotFoundError as exc:
        if exc.name in ("dashboards", "dashboards.export"):
            return  # this installation has no exports
        out.print(f"exports skipped: dashboards.export cannot be imported ({exc})", markup=False)
        return
    out_dir = run_dir / "exports" / study_name
    try:
        module.export_study(study_name, storage_url, out_dir)
    except Exception as exc:  # noqa: BLE001 - any failure of an export must leave the sweep's result standing
        out.print(f"exports failed ({type(exc).__name__}: {exc}); the database holds every result", markup=False)
        return
    out.print(f"exports: {out_dir}", markup=False)
