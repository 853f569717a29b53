"""The garbage collector of every Python process of a stack, as the manifest asks, and what it did. Standard library.

Python imports ``sitecustomize`` at start-up from its path, so a stack started with this folder first on its
``PYTHONPATH`` (``engine.stackside.start`` puts it there) runs this in every Python process it starts: the API
server, and the engine core and workers it forks or spawns, which inherit the env. A submission folder
carries a copy (``stackhooks/``). Then it hands over to the ``sitecustomize`` the interpreter would have run
without it (a distribution's own), so that nothing else changes.

``STACK_GC`` (the knob ``gc_policy``):

- ``default`` or unset: the collector as the stack leaves it;
- ``off``: ``gc.disable()`` at start-up (vLLM re-enables nothing it did not disable);
- ``freeze``: once the file ``STACK_GC_MARK`` exists (the wrapper, ``engine/stackside/_stackwrap.py``, makes it when the
  stack is warm: after the warm-up bridge, or once ``/v1/models`` answers), one full collection and
  ``gc.freeze()``: what the process holds after its warm-up is never scanned again, so a later full collection
  walks only what serving allocated (vLLM's engine core freezes its own heap after start-up; this adds what
  the warm-up made, and the API server);
- ``T0,T1,T2``: ``gc.set_threshold(T0, T1, T2)``.

``STACK_GC_LOG`` (set by this project's launcher, never by a submission's ``serve.py``): a folder where each
process appends to ``gc-<pid>.jsonl`` a line of its state (``{"pid", "program", "policy", "enabled", "threshold",
"frozen"}``; the program's file name, never its arguments, which can carry a secret) at start-up and after a freeze, and a line for every collection that took ``LOGGED_S`` or more
(``{"t": its start, time.perf_counter(), the system's monotonic clock; "s": seconds; "gen": generation}``).
The timing costs two clock reads a collection; the line is one ``os.write`` (no Python buffer, which a
collection inside a write could re-enter).
"""

from __future__ import annotations

import gc
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
import time

LOGGED_S = 0.001
_POLL_S = 0.2


def _chain() -> None:
    """Run the ``sitecustomize`` found on the path after this folder, as the interpreter would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _program() -> str:
    """The file this process runs (``-c`` for inline code), never an argument: a command line can hold a secret."""
    first = sys.argv[0] if sys.argv else ""
    return os.path.basename(first) or "python"


class _Log:
    def __init__(self, folder: str, policy: str) -> None:
        self.fd = os.open(os.path.join(folder, f"gc-{os.getpid()}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.policy = policy
        self.began = 0.0

    def line(self, record: dict[str, object]) -> None:
        try:
            os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        except OSError:
            pass  # a full disk or a closed folder loses a record, never the stack

    def state(self) -> None:
        self.line(
            {
                "pid": os.getpid(),
                "program": _program(),
                "policy": self.policy,
                "enabled": gc.isenabled(),
                "threshold": list(gc.get_threshold()),
                "frozen": gc.get_freeze_count(),
            }
        )

    def collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.began = time.perf_counter()
        elif (took := time.perf_counter() - self.began) >= LOGGED_S:
            self.line({"t": round(self.began, 6), "s": round(took, 6), "gen": info.get("generation")})


def _freeze_when_warm(mark: str, log: _Log | None) -> None:
    while not os.path.exists(mark):
        time.sleep(_POLL_S)
    gc.collect()
    gc.freeze()
    if log is not None:
        log.state()


def _apply(policy: str, log: _Log | None) -> None:
    if policy == "off":
        gc.disable()
    elif policy == "freeze":
        mark = os.environ.get("STACK_GC_MARK")
        if mark:
            threading.Thread(target=_freeze_when_warm, args=(mark, log), name="gc-freeze", daemon=True).start()
    elif policy not in ("", "default"):
        gc.set_threshold(*(int(t) for t in policy.split(",")))


def _main() -> None:
    policy = os.environ.get("STACK_GC", "default").strip()
    folder = os.environ.get("STACK_GC_LOG")
    log = None
    if folder:
        try:
            log = _Log(folder, policy)
        except OSError:
            log = None
    _apply(policy, log)
    if log is not None:
        log.state()
        gc.callbacks.append(log.collection)


_main()
_chain()
