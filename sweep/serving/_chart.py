"""The chart of a ``transfer.json``, drawn by the dashboards' own command run as a user would, so that the sweep
imports nothing above it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from rich.console import Console

__all__ = ["CHART_MODULE", "draw_chart"]

CHART_MODULE = "dashboards.serving"  # the optional package's command that draws the chart
CHART_TIMEOUT_S = 300.0  # Chromium renders the PNG; a hung browser must not hang the command


def draw_chart(source: Path, out: Console) -> bool:
    """``python -m dashboards.serving`` on ``source``; False where it failed or is not installed, said."""
    if importlib.util.find_spec(CHART_MODULE.partition(".")[0]) is None:
        out.print(f"chart skipped: this installation has no {CHART_MODULE} (the figures are in {source})", markup=False)
        return False
    argv = [sys.executable, "-m", CHART_MODULE, str(source)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHART_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        out.print(f"chart failed: no answer in {CHART_TIMEOUT_S:g} s (the figures are in {source})", markup=False)
        return False
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no message")
        out.print(f"chart failed (exit {done.returncode}: {last}); the figures are in {source}", markup=False)
        return False
    for line in done.stdout.splitlines():
        out.print(f"chart: {line}", markup=False)
    return True
