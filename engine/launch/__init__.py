"""A stack's process, from its manifest to its stop: the exact process to start (``build_launch`` ->
``LaunchConfig``), that process in its own group (``EngineProcess``: start, ready, stop; booted for a measurement
by ``EngineProcess.for_profile``, the one way every boot is built), its log scrubbed line by line (``LogPipe``), and
the stop of process groups.

The rule a stack is started by (placeholders, the port, the wrapper, the hooks) is ``engine.stackside``'s, which a
submission folder's ``serve.py`` calls too; the watchdog that stops the stacks of a dead worker is
``engine.reaper``.
"""

from engine.launch._config import LaunchConfig, build_launch, check_machine
from engine.launch._logpipe import MAX_LINE, LogPipe
from engine.launch._process import OWNER_ENV, EngineProcess, read_log_tail, stop_groups

__all__ = [
    "MAX_LINE",
    "OWNER_ENV",
    "EngineProcess",
    "LaunchConfig",
    "LogPipe",
    "build_launch",
    "check_machine",
    "read_log_tail",
    "stop_groups",
]
