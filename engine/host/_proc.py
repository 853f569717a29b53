"""A process group and its threads, read from ``/proc``: who is in a group, the CPUs each thread may use.

Read by the telemetry's samples, the client's placement and the stop of a stack's process group alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from engine.stackside import parse_cpus

__all__ = ["group_members", "read_proc", "thread_cpus_allowed", "thread_folders"]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc.

    A zombie cannot hold a port or memory, and where PID 1 does not reap orphans a killed
    group leaves zombies behind, so ``killpg(pgid, 0)`` alone would call the group alive.
    """
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def read_proc(path: str) -> str | None:
    # os.open/os.read: half the cost of Path.read_text() on a /proc file, which a sample reads per thread
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def thread_folders(proc: Path, pids: list[int]) -> Iterator[tuple[int, int, str]]:
    """(pid, tid, the thread's /proc folder) for every thread of these processes; plain strings, as a sample
    builds a path per thread."""
    for pid in pids:
        folder = f"{proc}/{pid}/task"
        try:
            tids = os.listdir(folder)
        except OSError:
            continue  # gone since the last scan
        for tid in tids:
            yield pid, int(tid), f"{folder}/{tid}"


def thread_cpus_allowed(pids: list[int], *, proc: Path = Path("/proc")) -> dict[int, set[int]]:
    """Each thread's ``Cpus_allowed_list`` (the CPUs it may run on), by thread id, for these processes."""
    allowed = {}
    for _pid, tid, task in thread_folders(proc, pids):
        for line in (read_proc(f"{task}/status") or "").splitlines():
            if line.startswith("Cpus_allowed_list:"):
                allowed[tid] = parse_cpus(line.split(":", 1)[1])
    return allowed
