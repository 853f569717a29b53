"""From a manifest and knob values to the exact process to start: ``LaunchConfig``.

The port rule: a manifest that says where its port goes (a ``{port}`` placeholder anywhere, or
a ``PORT`` key in its env) gets a free port per trial, so several engines share a host. A
manifest that does neither listens where its ``port`` field says (the challenge's 8000). Either
way the chosen port is exported as ``PORT``, which the challenge's ``serve.py`` stacks read.

The env of a ``LaunchConfig`` is what is laid over the starting process's own environment
(``os.environ``, which carries ``CUDA_VISIBLE_DEVICES`` from Ray): the manifest's env after knobs
and placeholders, ``PORT``, and ``HF_HUB_OFFLINE=1`` so that no stack downloads weights at run time.

The stability knobs (``studies/knobs.toml``): a manifest whose env asks for CPU affinity
(``CPU_AFFINITY`` other than ``none``) or the warm-up bridge (``WARMUP_NUM_PROMPTS`` above 0) is started
through ``engine/stackwrap.py``, which pins itself and then execs the stack, or runs the bridge. With the
bridge, the stack gets a port of its own on 127.0.0.1 (its ``{port}``, ``{host}`` and ``PORT``) and the
wrapper listens on the launch's host and port once the warm-up is done. A manifest with
``WARMUP_BRIDGE=1`` (the winning entry's convention) runs a bridge of its own: the launcher adds none.
``check_machine`` says, on the machine that boots, whether it can honour the CPU list (``engine.trial``
calls it before anything starts; a dry run plans without it).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engine import stackwrap
from engine.knobs import KnobValue, KnobValues, apply_knobs, baseline_knobs
from engine.manifest import REPO_ROOT, Manifest
from errors import EngineBootError, ManifestError

__all__ = ["LaunchConfig", "build_launch", "check_machine", "free_port"]

# Ports handed out by this process and not yet seen in use: the kernel may offer one again
# between our probe and the engine's bind, so we never hand the same one out twice.
_handed_out: set[int] = set()


@dataclass(frozen=True, kw_only=True)
class LaunchConfig:
    argv: list[str]
    env: dict[str, str]  # laid over os.environ when the process starts
    cwd: Path
    host: str
    port: int
    served_model_name: str
    manifest_name: str
    knobs: dict[str, KnobValue] = field(default_factory=dict)  # every consumed knob's value, as launched
    # what ``env`` is laid over: None, this process's own environment; a dict, that alone (the clean
    # environment the organisers' harness starts a submission in)
    base_env: dict[str, str] | None = None
    # the stack's own argv: ``argv`` itself, or what follows ``--`` where engine/stackwrap.py starts it
    stack_argv: list[str] = field(default_factory=list)

    @property
    def stack_command(self) -> list[str]:
        """The stack's own argv, without the wrapper that pins or bridges it."""
        return self.stack_argv or self.argv

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def process_env(self) -> dict[str, str]:
        # A stack started from a Ray worker must not find that worker's cluster: a stack that uses
        # Ray itself (vLLM across GPUs) would join it and take its resources.
        base = os.environ if self.base_env is None else self.base_env
        inherited = {k: v for k, v in base.items() if k != "RAY_ADDRESS"}
        return {**inherited, **self.env}


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, and that this process has not handed out before."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(100):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise EngineBootError(f"no free port found on {host}")


def _reference_checkpoint() -> str:
    # Imported here: preparing the reference model pulls in torch and can take a minute, and
    # only manifests that name {reference_checkpoint} need it.
    from engine.reference.prepare import prepare_model

    try:
        return str(prepare_model().checkpoint_dir)
    except Exception as exc:  # any failure of the preparation is a boot failure of this trial
        raise EngineBootError(f"preparing the reference checkpoint failed: {exc}") from exc


def _fill(text: str, values: Mapping[str, str]) -> str:
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


def _env_int(env: Mapping[str, str], name: str, default: int, *, manifest: str) -> int:
    text = env.get(name, str(default)).strip()
    if not text.isdigit():
        raise ManifestError(f"manifest {manifest!r}: {name}={text!r} is not a whole number")
    return int(text)


def _wrapped(
    argv: list[str], env: Mapping[str, str], *, manifest: Manifest, listen: str, upstream: int | None
) -> list[str]:
    """``argv`` started through engine/stackwrap.py with the manifest's affinity and bridge settings."""
    wrapper = [sys.executable, "-I", str(Path(stackwrap.__file__).resolve()), "--listen", listen]
    wrapper += ["--cpus", env.get("CPU_AFFINITY", "none").strip()]
    if upstream is not None:
        wrapper += ["--upstream-port", str(upstream), "--model", manifest.served_model_name]
        for flag, name, default in (
            ("--warmup-prompts", "WARMUP_NUM_PROMPTS", 0),
            ("--warmup-max-tokens", "WARMUP_MAX_TOKENS", 1),
            ("--warmup-seed", "WARMUP_SEED", 42),
        ):
            wrapper += [flag, str(_env_int(env, name, default, manifest=manifest.name))]
    return [*wrapper, "--", *argv]


def check_machine(launch: LaunchConfig) -> None:
    """What ``build_launch`` leaves to the machine that boots (a dry run may plan on another): that this one
    can honour the launch's ``CPU_AFFINITY``. Raises EngineBootError naming the CPUs it lacks."""
    affinity = launch.env.get("CPU_AFFINITY", "none").strip()
    try:
        stackwrap.resolve_cpus(affinity)
    except stackwrap.SpecError as exc:
        raise EngineBootError(f"manifest {launch.manifest_name!r}: CPU_AFFINITY={affinity!r}: {exc}") from None


def build_launch(
    manifest: Manifest,
    knobs: KnobValues | None = None,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    workdir: Path | None = None,
    tmpdir: Path | None = None,
    cache: Path | None = None,
) -> LaunchConfig:
    """Apply knobs, choose the port, fill placeholders; wrap the stack where the manifest asks for CPU
    affinity or the warm-up bridge."""
    baseline = baseline_knobs(manifest)
    knobs = baseline if knobs is None else knobs
    patched = apply_knobs(manifest, knobs)
    wants_free = patched.uses_placeholder("port") or "PORT" in patched.env
    if port is None:
        port = free_port(host) if wants_free else patched.port
    affinity = patched.env.get("CPU_AFFINITY", "none").strip()
    bridge = (
        _env_int(patched.env, "WARMUP_NUM_PROMPTS", 0, manifest=patched.name) > 0
        and patched.env.get("WARMUP_BRIDGE") != "1"
    )
    if bridge and not wants_free:
        raise ManifestError(
            f"manifest {patched.name!r}: the warm-up bridge (WARMUP_NUM_PROMPTS > 0) moves the stack to a port of "
            "its own, but the manifest says nowhere where its port goes (a {port} placeholder or a PORT env entry)"
        )
    # With the bridge, the stack listens on a port of its own on the loopback, the wrapper on ``port``.
    inner_host, inner_port = ("127.0.0.1", free_port("127.0.0.1")) if bridge else (host, port)
    values = {"port": str(inner_port), "host": inner_host, "python": sys.executable, "repo": str(REPO_ROOT)}
    if patched.uses_placeholder("reference_checkpoint"):
        values["reference_checkpoint"] = _reference_checkpoint()
    if workdir is not None:
        values["workdir"] = str(Path(workdir).resolve())
    if tmpdir is not None:
        values["tmpdir"] = str(tmpdir)
    if cache is not None:
        values["cache"] = str(Path(cache).resolve())
    env = {key: _fill(value, values) for key, value in patched.env.items()}
    env["PORT"] = str(inner_port)
    env["HF_HUB_OFFLINE"] = "1"
    home = manifest.source.parent if manifest.source else REPO_ROOT
    cwd = home / _fill(patched.cwd, values) if patched.cwd else home
    stack_argv = [_fill(item, values) for item in patched.serve]
    argv = stack_argv
    if bridge or affinity != "none":
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        argv = _wrapped(
            stack_argv, patched.env, manifest=patched, listen=listen, upstream=inner_port if bridge else None
        )
    return LaunchConfig(
        argv=argv,
        stack_argv=stack_argv,
        env=env,
        cwd=cwd,
        host=host,
        port=port,
        served_model_name=patched.served_model_name,
        manifest_name=patched.name,
        knobs=dict(baseline | knobs),
    )
