"""GPU hygiene between trials: a stack boots only on a GPU that is free, and one that leaves memory
held is named.

The GPUs a trial may use are the ones ``CUDA_VISIBLE_DEVICES`` names (Ray sets it from the GPUs it
assigned the worker). ``nvidia-smi`` reads them (the driver's own tool, present wherever a GPU is):

- ``wait_until_free`` before a boot: if an engine of this sweep (a process marked with an engine
  owner, ``OWNER_ENV``) still computes on one of them, the trial is refused at once, naming it;
  otherwise the trial waits, bounded, until the memory in use is back under a floor (what an idle
  GPU holds), and fails with the memory and processes it saw.
- ``held_after_stop`` after the stop: the memory still in use once the stack's process group is gone;
  the trial records it, so a stack that leaks memory is named by its own trial.

Without ``nvidia-smi`` or a visible GPU (a CPU trial) there is nothing to check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from errors import EngineBootError

__all__ = [
    "FREE_FLOOR_MIB",
    "GpuState",
    "gpu_identity",
    "gpu_uuids",
    "gpu_states",
    "held_after_stop",
    "visible_gpus",
    "wait_until_free",
]

FREE_FLOOR_MIB = 1024  # an idle H200 or A10G shows a few MiB; a booted 270M stack holds GiBs
_QUERY_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class GpuState:
    index: str  # as nvidia-smi and CUDA_VISIBLE_DEVICES name it
    used_mib: int
    total_mib: int
    pids: tuple[int, ...]  # compute processes on it


def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` names; none when it is unset or empty."""
    value = (env if env is not None else os.environ).get("CUDA_VISIBLE_DEVICES", "")
    return [part.strip() for part in value.split(",") if part.strip() and part.strip() != "-1"]


def _smi(*args: str) -> list[list[str]] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, *args, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_QUERY_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def gpu_identity(indices: list[str] | None) -> tuple[list[str], str | None]:
    """The names of these GPUs (None: every GPU, as a process sees them with ``CUDA_VISIBLE_DEVICES``
    unset) and the driver's version; ([], None) on a CPU or without nvidia-smi."""
    if indices is None:
        rows = _smi("--query-gpu=name,driver_version")
    else:
        rows = _smi("--query-gpu=name,driver_version", f"--id={','.join(indices)}") if indices else None
    if not rows:
        return [], None
    return [row[0] for row in rows], rows[0][1] if len(rows[0]) > 1 else None


def gpu_uuids(indices: list[str] | None) -> list[str]:
    """The UUIDs of these GPUs (None: every GPU): a card, whichever machine lends it; [] without nvidia-smi."""
    if indices is not None and not indices:
        return []
    ids = [] if indices is None else [f"--id={','.join(indices)}"]
    return [row[0] for row in _smi("--query-gpu=uuid", *ids) or [] if row]


def gpu_states(indices: list[str]) -> dict[str, GpuState] | None:
    """Memory in use and compute processes of these GPUs; None when nvidia-smi cannot tell."""
    if not indices:
        return {}
    ids = ",".join(indices)
    memory = _smi("--query-gpu=index,uuid,memory.used,memory.total", f"--id={ids}")
    if memory is None:
        return None
    apps = _smi("--query-compute-apps=gpu_uuid,pid", f"--id={ids}") or []
    pids: dict[str, list[int]] = {}
    for uuid, pid in (row[:2] for row in apps if len(row) >= 2 and row[1].isdigit()):
        pids.setdefault(uuid, []).append(int(pid))
    states = {}
    for index, uuid, used, total in (row[:4] for row in memory if len(row) >= 4):
        states[index] = GpuState(
            index=index, used_mib=int(float(used)), total_mib=int(float(total)), pids=tuple(pids.get(uuid, ()))
        )
    return states


def _owner_of(pid: int, owner_env: str) -> str | None:
    """The engine owner a process carries in its environment, if it is an engine of this project."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            entries = fh.read().split(b"\0")
    except OSError:
        return None
    prefix = f"{owner_env}=".encode()
    return next((e[len(prefix) :].decode() for e in entries if e.startswith(prefix)), None)


def wait_until_free(indices: list[str], *, owner_env: str, timeout_s: float, poll_s: float = 1.0) -> float:
    """Block until these GPUs hold no engine of ours and less than ``FREE_FLOOR_MIB``; seconds waited.

    Raises EngineBootError when another engine of this sweep computes there, or the memory is
    still held at the deadline.
    """
    began = time.monotonic()
    while True:
        states = gpu_states(indices)
        if not states:
            return time.monotonic() - began  # no GPU, or nvidia-smi cannot tell: nothing to wait for
        for state in states.values():
            ours = [(pid, owner) for pid in state.pids if (owner := _owner_of(pid, owner_env)) is not None]
            if ours:
                pid, owner = ours[0]
                raise EngineBootError(
                    f"GPU {state.index} is in use by engine pid {pid} of this sweep (started by worker pid "
                    f"{owner}): two engines on one GPU would slow each other and spoil both measurements"
                )
        busy = [s for s in states.values() if s.used_mib >= FREE_FLOOR_MIB]
        if not busy:
            return time.monotonic() - began
        if time.monotonic() - began >= timeout_s:
            held = "; ".join(
                f"GPU {s.index}: {s.used_mib} of {s.total_mib} MiB in use, processes {list(s.pids)}" for s in busy
            )
            raise EngineBootError(f"the GPU was not free after {timeout_s:g} s ({held}); not booting on it")
        time.sleep(poll_s)


def held_after_stop(indices: list[str], *, wait_s: float, poll_s: float = 0.5) -> dict[str, int]:
    """Memory (MiB) still in use per GPU after a stack stopped, once it settles or ``wait_s`` passes;
    empty when everything went back under the floor (or there is nothing to read)."""
    deadline = time.monotonic() + wait_s
    while True:
        states = gpu_states(indices) or {}
        held = {i: s.used_mib for i, s in states.items() if s.used_mib >= FREE_FLOOR_MIB}
        if not held or time.monotonic() >= deadline:
            return held
        time.sleep(poll_s)
