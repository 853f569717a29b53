"""Where this package's files lie in this checkout, for what starts them from here (the launcher) and what copies
them (a submission folder's writer): the one list of what a folder carries to start its stack, by its name there."""

from __future__ import annotations

from pathlib import Path

__all__ = ["FOLDER_FILES", "HOOKS", "STACKWRAP"]

_HERE = Path(__file__).resolve().parent
STACKWRAP = _HERE / "_stackwrap.py"  # run by its path: ``python -I STACKWRAP --listen ... -- STACK_ARGV``
HOOKS = _HERE / "stackhooks"  # put first on a stack's PYTHONPATH (``start``'s ``hooks``)
# a submission folder's name for each file -> this checkout's file
FOLDER_FILES = {
    "serve.py": _HERE / "_serve.py",
    "startup.py": _HERE / "_startup.py",
    "stackwrap.py": STACKWRAP,
    "stackhooks/sitecustomize.py": HOOKS / "sitecustomize.py",
}
