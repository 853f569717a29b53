"""Test kit: logs every process a Python process starts, for the no-shell check.

Put this folder first on ``PYTHONPATH`` and set ``GEMMA_AUDIT_LOG`` to a file: every Python
process started with that environment (a sweep's driver, Ray's workers, reapers, stacks) appends
one JSON line per ``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.posix_spawn`` and
``os.spawn*`` it does, through the interpreter's audit hooks (PEP 578). Argument lists only,
never the environment: the log must not hold the secrets the same test looks for.
"""

import json
import os
import sys

_LOG = os.environ.get("GEMMA_AUDIT_LOG")
_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn"}


def _hook(event, args):
    if event not in _EVENTS:
        return
    if event == "os.system":
        executable, argv = None, [args[0]]
    elif event == "os.spawn":  # (mode, path, args, env)
        executable, argv = args[1], args[2]
    else:  # (executable or path, args, ...)
        executable, argv = args[0], args[1]
    try:
        argv = [os.fsdecode(a) for a in argv] if argv is not None else []
    except TypeError:
        argv = [repr(argv)]
    record = {
        "pid": os.getpid(),
        "event": event,
        "executable": None if executable is None else os.fsdecode(executable),
        "argv": argv,
    }
    with open(_LOG, "a") as fh:
        fh.write(json.dumps(record) + "\n")


if _LOG:
    sys.addaudithook(_hook)
