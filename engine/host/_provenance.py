"""What a measurement ran on: the stack's own version, torch, the GPU and its driver.

A figure is only comparable with another taken on the same software and hardware, so every trial
and every promotion or verification boot records ``provenance(...)`` next to its numbers:

    stack          what the stack's ``GET /version`` calls itself (the reference stack answers "stack":
                   "gemma-sweep reference"), else its adapter's name (``engine.stacks``: vLLM says only its version)
    stack_version  its version, as the stack reports it
    torch          torch's version where the stack runs: from its ``/version`` when it says, else read
                   from the stack's own interpreter's installed distributions
    gpu            the name of each GPU the stack could see (``nvidia-smi``); [] on a CPU
    cuda_driver    the NVIDIA driver's version; None on a CPU
    python         the interpreter that started the trial
    machine        the kernel's boot id (``/proc/sys/kernel/random/boot_id``): every lent machine, and every
                   restart of one, reads another, so a later run can tell whether it ran on the machine of an
                   earlier one (a shift between machines is not the noise of one: ``sweep.claims``)
    host           the lease as a person reads it: {"cpu_model", "gpu_uuid" (the cards, [] on a CPU), "probe_ms"
                   (``host_probe``, read while the stack waits for its first request: the host's
                   single-thread speed, which sets a host-bound stack's)}
    packages       the manifest's ``dependencies`` and everything they require, as the stack's own interpreter
                   has them installed: {name: pip requirement} (``pins``), what a submission pins; {} for a
                   manifest without dependencies
    threads        ``OMP_NUM_THREADS`` as the stack got it (under Ray, a trial's ``num_cpus``), an int; None where
                   it was unset (torch then computes on every core): a CPU stack's speed hangs on it, so a
                   submission sets it as its claim was measured
    resolved       what the stack's own log says it settled on (``engine.stacks.resolved_settings``: vLLM's
                   CUDA-graph mode as configured and as captured), {setting: [values]}; {} where it says nothing
                   (``engine.bench.run_trial`` adds it once the stack answers)

Every key is always present; a value that could not be read is None, with the reason in ``notes``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import httpx

from engine.host._cpu import cpu_model, host_probe
from engine.host._gpu import gpu_identity, gpu_uuids, visible_gpus
from engine.secrets import redact_text

__all__ = ["KEYS", "pins", "provenance"]

KEYS = (
    "stack",
    "stack_version",
    "torch",
    "gpu",
    "cuda_driver",
    "python",
    "machine",
    "host",
    "packages",
    "threads",
    "resolved",
    "notes",
)
_PROBE_TIMEOUT_S = 30.0
_TORCH = "import importlib.metadata as m; print(m.version('torch'))"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"
# Run in the stack's own interpreter (argv: a JSON list of requirements): each named distribution and, through
# its metadata's requirements (their markers evaluated there, extras as asked), everything it requires, as
# {canonical name: [name, version, direct_url.json's text or None]}; a name not installed (or an entry that names
# no distribution) maps to None.
_CLOSURE = r"""
import importlib.metadata as md, json, re, sys
try:
    from packaging.requirements import Requirement
except ImportError:  # every virtual environment has pip, which carries its own copy
    from pip._vendor.packaging.requirements import Requirement
found, seen, todo = {}, set(), []
for text in json.loads(sys.argv[1]):
    try:
        todo.append(Requirement(text))
    except ValueError:  # a path, or a URL with no name: nothing installed answers to it
        found[text] = None
while todo:
    req = todo.pop()
    key = re.sub(r"[-_.]+", "-", req.name).lower()
    if (key, frozenset(req.extras)) in seen:
        continue
    seen.add((key, frozenset(req.extras)))
    try:
        dist = md.distribution(req.name)
    except md.PackageNotFoundError:
        found.setdefault(key, None)
        continue
    found[key] = [dist.metadata["Name"], dist.version, dist.read_text("direct_url.json")]
    for text in dist.requires or []:
        sub = Requirement(text)
        if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
            todo.append(sub)
print(json.dumps(found))
"""


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


def _requirement(name: str, version: str, direct: str | None) -> str:
    """A distribution as installed, as exactly as pip can name it: from the URL it came from (a direct
    reference, a local file's or folder's ``file:`` URL included; credentials redacted), else its release with
    its local label (``2.13.0+cpu``, ``0.24.0+cu130``: the build the trials ran). What an index cannot serve
    (a local file, a label of a local build) is the submission's to carry or refuse (``sweep.submission``)."""
    info = json.loads(direct) if direct else {}
    url = info.get("url", "")
    if url:
        vcs = info.get("vcs_info")
        where = f"{vcs['vcs']}+{url}@{vcs['commit_id']}" if vcs else url
        return f"{name} @ {redact_text(where)}"
    return f"{name}=={version}"


def pins(
    requirements: Sequence[str], *, python: str, env: dict[str, str] | None = None
) -> tuple[dict[str, str], str | None]:
    """Each distribution ``requirements`` name, and everything they require, as the interpreter ``python`` has
    them installed: ({canonical name: pip requirement}, None), or what is missing or unreadable as the second
    item (a name not installed there is left out of the first)."""
    if not requirements:
        return {}, None
    try:
        done = subprocess.run(
            [python, "-c", _CLOSURE, json.dumps(list(requirements))],
            env=env,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return {}, f"reading the installed packages: {type(exc).__name__}"
    if not isinstance(found, dict):
        return {}, f"reading the installed packages: exit {done.returncode}: {done.stderr.strip()[-200:]}"
    missing = sorted(redact_text(key) for key, dist in found.items() if dist is None)  # an entry may be a URL
    installed = {key: _requirement(*dist) for key, dist in sorted(found.items()) if dist is not None}
    return installed, (f"not installed where the stack runs: {', '.join(missing)}" if missing else None)


def _interpreter(argv: list[str]) -> str | None:
    """The stack's own interpreter: its argv's first item, or, where ``engine.stackside``'s wrapper starts it, the first
    item after the wrapper's ``--``; None where that is not a Python interpreter."""
    if any(item.endswith("stackwrap") or item.endswith("stackwrap.py") for item in argv) and "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    return argv[0] if argv and os.path.basename(argv[0]).startswith("python") else None


def _threads(env: dict[str, str], notes: list[str]) -> int | None:
    text = env.get("OMP_NUM_THREADS", "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        notes.append(f"OMP_NUM_THREADS={text!r} is not a count of threads: unread")
        return None
    return int(text)


def provenance(
    base_url: str, *, argv: list[str], env: dict[str, str], stack: str, dependencies: Sequence[str] = ()
) -> dict[str, Any]:
    """The provenance of a running stack started as ``argv`` with ``env``, whose manifest names ``dependencies``
    and whose adapter calls it ``stack`` where its ``GET /version`` says nothing of it (see the module's table)."""
    notes: list[str] = []
    reported, note = _stack_version(base_url)
    if note:
        notes.append(note)
    python = _interpreter(argv)
    torch = reported.get("torch")
    if torch is None and argv:
        torch, note = _torch_of(python or argv[0], env)
        if note:
            notes.append(note)
    packages: dict[str, str] = {}
    if dependencies:
        if python is None:
            notes.append("the stack is not started by a Python interpreter: its packages unread")
        else:
            packages, note = pins(dependencies, python=python, env=env)
            if note:
                notes.append(note)
    # unset, CUDA_VISIBLE_DEVICES shows a stack every GPU (engine.bench outside Ray); empty, none
    indices = visible_gpus(env) if "CUDA_VISIBLE_DEVICES" in env else None
    gpus, driver = gpu_identity(indices)
    machine, note = _boot_id()
    if note:
        notes.append(note)
    return {
        "stack": reported.get("stack", stack),
        "stack_version": reported.get("version"),
        "torch": torch,
        "gpu": gpus,
        "cuda_driver": driver,
        "python": platform.python_version(),
        "machine": machine,
        "host": {"cpu_model": cpu_model(), "gpu_uuid": gpu_uuids(indices), "probe_ms": round(host_probe(), 3)},
        "packages": packages,
        "threads": _threads(env, notes),
        "resolved": {},  # engine.bench fills it from the stack's log once the stack answers
        "notes": notes,
    }
