"""Running ``python -m sweep.run`` as a user does, and noting the machine's load around it.

The benchmarks measure the service, so they start it as a separate process (its own local Ray,
its own SQLite file) in a folder of their own: the trial folders, Ray's files and the exports
land there, never in the repository's ``runs/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from errors import SweepRunError

__all__ = ["REPO", "SweepRun", "load_note", "run_sweep"]

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, kw_only=True)
class SweepRun:
    argv: list[str]
    wall_s: float  # the whole command: interpreter, imports, Ray start, trials, exports
    log: Path


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["HF_HUB_OFFLINE"] = "1"  # nothing started here may fetch weights
    return env


def run_sweep(*args: str, folder: Path, log_name: str = "sweep.log") -> SweepRun:
    """``python -m sweep.run ARGS`` with ``folder`` as its working folder; raises if it fails."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "sweep.run", *args]
    log = folder / log_name
    began = time.monotonic()
    with open(log, "w") as fh:
        code = subprocess.run(argv, cwd=folder, env=_child_env(), stdout=fh, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - began
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise SweepRunError(f"{' '.join(argv[1:])} exited with status {code} (log {log}):\n{tail}")
    return SweepRun(argv=argv, wall_s=wall, log=log)


def load_note() -> str:
    """The load average right now: the 2 cores are shared, so every timing carries it."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPU(s)"
