"""What a measurement ran on: the stack's own version, torch, the GPU and its driver.

A figure is only comparable with another taken on the same software and hardware, so every trial
and every promotion or verification boot records ``provenance(...)`` next to its numbers:

    stack          what the stack's ``GET /version`` calls itself (vLLM answers {"version": ...};
                   the reference stack adds "stack": "gemma-sweep reference")
    stack_version  its version, as the stack reports it
    torch          torch's version where the stack runs: from its ``/version`` when it says, else read
                   from the stack's own interpreter's installed distributions
    gpu            the name of each GPU the stack could see (``nvidia-smi``); [] on a CPU
    cuda_driver    the NVIDIA driver's version; None on a CPU
    python         the interpreter that started the trial
    machine        the kernel's boot id (``/proc/sys/kernel/random/boot_id``): every lent machine, and every
                   restart of one, reads another, so a later run can tell whether it ran on the machine of an
                   earlier one (a shift between machines is not the noise of one: ``sweep.estimate``)

Every key is always present; a value that could not be read is None, with the reason in ``notes``.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from typing import Any

import httpx

from engine.gpu import gpu_identity, visible_gpus

__all__ = ["KEYS", "provenance"]

KEYS = ("stack", "stack_version", "torch", "gpu", "cuda_driver", "python", "machine", "notes")
_PROBE_TIMEOUT_S = 30.0
_TORCH = "import importlib.metadata as m; print(m.version('torch'))"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _stack_version(base_url: str) -> tuple[dict[str, Any], str | None]:
    try:
        answer = httpx.get(f"{base_url}/version", timeout=10.0)
        answer.raise_for_status()
        data = answer.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {}, f"GET /version: {type(exc).__name__}: {exc}"[:200]
    return (data, None) if isinstance(data, dict) else ({}, "GET /version did not answer a JSON object")


def _torch_of(interpreter: str, env: dict[str, str]) -> tuple[str | None, str | None]:
    """torch's version in the stack's interpreter, without importing torch (metadata only)."""
    if os.path.realpath(interpreter) == os.path.realpath(sys.executable):
        try:
            return importlib.metadata.version("torch"), None
        except importlib.metadata.PackageNotFoundError:
            return None, "torch is not installed where the stack runs"
    if not os.path.basename(interpreter).startswith("python"):
        return None, f"the stack starts {os.path.basename(interpreter)!r}, not a Python interpreter: torch unread"
    try:
        done = subprocess.run(
            [interpreter, "-c", _TORCH],
            env=env,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"reading torch's version: {type(exc).__name__}"
    if done.returncode != 0:
        return None, "torch is not installed where the stack runs"
    return done.stdout.strip() or None, None


def _boot_id() -> tuple[str | None, str | None]:
    try:
        with open(_BOOT_ID, encoding="ascii") as f:
            return f.read().strip() or None, None
    except OSError as exc:
        return None, f"the machine's boot id: {type(exc).__name__}"


def provenance(base_url: str, *, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The provenance of a running stack started as ``argv`` with ``env`` (see the module's table)."""
    notes: list[str] = []
    reported, note = _stack_version(base_url)
    if note:
        notes.append(note)
    torch = reported.get("torch")
    if torch is None and argv:
        torch, note = _torch_of(argv[0], env)
        if note:
            notes.append(note)
    # unset, CUDA_VISIBLE_DEVICES shows a stack every GPU (engine.bench outside Ray); empty, none
    gpus, driver = gpu_identity(visible_gpus(env) if "CUDA_VISIBLE_DEVICES" in env else None)
    machine, note = _boot_id()
    if note:
        notes.append(note)
    return {
        "stack": reported.get("stack", "vllm" if "vllm" in " ".join(argv) else None),
        "stack_version": reported.get("version"),
        "torch": torch,
        "gpu": gpus,
        "cuda_driver": driver,
        "python": platform.python_version(),
        "machine": machine,
        "notes": notes,
    }
