"""Engines never outlive the worker that started them.

A trial's engine runs as a child of its Ray worker, in its own session (``engine.launch.EngineProcess``),
so a worker killed by Ray (``ray.kill``, a lost node, a driver that died) would leave the stack
running, holding memory, a port and maybe a GPU. Each worker starts one watchdog process
(``python -m engine.reaper PID``) in a session of its own, detached from the worker's process
tree (it forks and its first process exits): it remembers the worker's
session-leader children (the engines) and, once the worker is gone, stops their process groups.
``stop_engine_groups`` is the same stop, called by a live worker when the driver asks.

It polls every half second, so it may not have seen an engine started just before its worker
was killed: once the worker is gone it also stops the group of every process whose env names
the worker as its owner (``engine.launch.OWNER_ENV``). The engine's own stop
(``EngineProcess.stop``) covers every orderly exit.
"""

from __future__ import annotations

import os
import sys
import time

import psutil

from engine.host import group_members
from engine.launch import OWNER_ENV, stop_groups

__all__ = ["engine_groups", "owned_groups", "stop_engine_groups"]

_POLL_S = 0.5
_GRACE_S = 10.0


def engine_groups(parent: psutil.Process, *, exclude: set[int]) -> list[int]:
    """Children of ``parent`` that lead their own process group (the engines), by pid."""
    groups: list[int] = []
    try:
        children = parent.children(recursive=False)
    except psutil.NoSuchProcess:
        return groups
    for child in children:
        if child.pid not in exclude and _pgid(child.pid) == child.pid:
            groups.append(child.pid)
    return groups


def owned_groups(owner_pid: int, *, exclude: set[int]) -> list[int]:
    """Process groups of the processes whose env names ``owner_pid`` as their engine's owner."""
    owner = str(owner_pid)
    groups = set()
    for process in psutil.process_iter(["pid", "environ"]):
        environ = process.info.get("environ") or {}  # None where it cannot be read
        if environ.get(OWNER_ENV) == owner and (pgid := _pgid(process.info["pid"])) is not None:
            groups.add(pgid)
    return sorted(groups - exclude)


def _alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def stop_engine_groups(pgids: list[int], *, grace_s: float = _GRACE_S) -> None:
    """TERM each group, KILL what is left after the grace period (``engine.launch.stop_groups``)."""
    stop_groups(pgids, grace_s=grace_s, kill_wait_s=5.0)


def _watch(worker_pid: int) -> None:
    try:
        worker = psutil.Process(worker_pid)
    except psutil.NoSuchProcess:
        return
    me = {os.getpid(), os.getpgrp()}  # the group id is the pid of the detached-from parent
    known: set[int] = set()
    while _running(worker):
        known |= set(engine_groups(worker, exclude=me))
        # Forget groups that ended, so a reused id is never signalled.
        known = {g for g in known if _alive(g)}
        time.sleep(_POLL_S)
    stop_engine_groups(sorted(known | set(owned_groups(worker_pid, exclude=me))))


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _detach() -> None:
    """Leave the worker's process tree. A raylet kills a dying worker's direct children (Ray's
    kill_child_processes_on_worker_exit): the engine's leader, and this watchdog if it stayed
    one; the engine's own children would then outlive everyone. Their group is what it stops."""
    if os.fork() > 0:
        os._exit(0)


if __name__ == "__main__":
    _detach()
    _watch(int(sys.argv[1]))
