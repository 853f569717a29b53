"""The timing client's CPUs: ``client_cpus`` chooses them, ``pinned`` holds this process to them.

The client is ``engine.bench`` running in the trial's own process (a Ray worker). A profile's
``client_cpus`` says where it runs while a boot is measured:

    none    wherever the kernel puts it (the default: the organisers' harness pins nothing, so a number
            taken with a pinned client could read better than their re-run of the same stack)
    rest    the CPUs this process may use that the stack's threads may not (their ``Cpus_allowed_list``):
            with the stack pinned (the knob ``cpu_affinity``), client and stack never share a core;
            with the stack unpinned there is no such CPU and the client stays where it was
    2-3     a CPU list: exactly these

It is a measurement setting, not a knob: a submission carries the stack's affinity (its ``serve.py``
pins the stack) but the organisers' client runs where they run it, so a study must not crown a
client placement. ``pinned`` moves every thread of this process (Ray's own included, so that none of
them runs on the stack's cores either) and puts each back afterwards.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from engine.host._proc import group_members, thread_cpus_allowed
from engine.stackside import format_cpus, parse_cpus

__all__ = ["client_cpus", "pinned"]


def client_cpus(rule: str, *, stack_pgid: int | None) -> tuple[set[int] | None, str]:
    """The CPUs the client is to run on under ``rule`` (None: leave it be), and why, in words."""
    if rule == "none":
        return None, "client_cpus = none"
    allowed = os.sched_getaffinity(0)
    if rule == "rest":
        pids = group_members(stack_pgid) if stack_pgid is not None else []
        stack = set().union(*thread_cpus_allowed(pids).values()) if pids else set()
        rest = allowed - stack
        if not rest:
            return None, f"client_cpus = rest: the stack may use every CPU of the client's ({format_cpus(allowed)})"
        return rest, f"client_cpus = rest: the stack's CPUs are {format_cpus(stack)}"
    cpus = parse_cpus(rule)
    if not cpus <= allowed:
        return None, f"client_cpus = {rule}: CPU(s) {format_cpus(cpus - allowed)} not available to the client"
    return cpus, f"client_cpus = {rule}"


def _threads() -> list[int]:
    return [int(tid) for tid in os.listdir("/proc/self/task")]


@contextmanager
def pinned(cpus: set[int] | None) -> Iterator[None]:
    """Every thread of this process on ``cpus`` for the block (nothing changes for None)."""
    if cpus is None:
        yield
        return
    before = {}
    for tid in _threads():
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
        except OSError:
            continue  # a thread that ended meanwhile
    try:
        yield
    finally:
        mine = before.get(threading.get_native_id(), os.sched_getaffinity(0))
        for tid in _threads():
            try:
                os.sched_setaffinity(tid, before.get(tid, mine))  # a thread started meanwhile: as this one was
            except OSError:
                continue
