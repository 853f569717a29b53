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
through ``engine/stackside/_stackwrap.py``, which pins itself and then execs the stack, or runs the bridge. With the
bridge, the stack gets a port of its own on 127.0.0.1 (its ``{port}``, ``{host}`` and ``PORT``) and the
wrapper listens on the launch's host and port once the warm-up is done. A manifest with
``WARMUP_BRIDGE=1`` (the winning entry's convention) runs a bridge of its own: the launcher adds none.
``check_machine`` says, on the machine that boots, whether it can honour the CPU list (``engine.bench.run_trial``
calls it before anything starts; a dry run plans without it).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import REPO_ROOT, KnobValue, KnobValues, Manifest, apply_knobs, baseline_knobs
from engine.stackside import HOOKS, STACKWRAP, SpecError, StartError, bridged, fill, free_port, resolve_cpus, start
from errors import EngineBootError, ManifestError

__all__ = ["LaunchConfig", "build_launch", "check_machine"]


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
    # the stack's own argv: ``argv`` itself, or what follows ``--`` where engine/stackside/_stackwrap.py starts it
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


def _reference_checkpoint() -> str:
    # Imported here: preparing the reference model pulls in torch and can take a minute, and
    # only manifests that name {reference_checkpoint} need it.
    from engine.reference.prepare import prepare_model

    try:
        return str(prepare_model().checkpoint_dir)
    except Exception as exc:  # any failure of the preparation is a boot failure of this trial
        raise EngineBootError(f"preparing the reference checkpoint failed: {exc}") from exc


def check_machine(launch: LaunchConfig) -> None:
    """What ``build_launch`` leaves to the machine that boots (a dry run may plan on another): that this one
    can honour the launch's ``CPU_AFFINITY``. Raises EngineBootError naming the CPUs it lacks."""
    affinity = launch.env.get("CPU_AFFINITY", "none").strip()
    try:
        resolve_cpus(affinity)
    except SpecError as exc:
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
    gc_log: Path | None = None,
) -> LaunchConfig:
    """Apply knobs, choose the port, fill placeholders; wrap the stack where the manifest asks for CPU
    affinity, the warm-up bridge or a frozen collector (``engine.stackside``, the rule a submission's serve.py
    starts it by too). ``gc_log``: a folder where the stack's Python processes record their garbage
    collections (``STACK_GC_LOG``, ``engine.host.GcLog``; never part of a submission)."""
    baseline = baseline_knobs(manifest)
    knobs = baseline if knobs is None else knobs
    patched = apply_knobs(manifest, knobs)
    wants_free = patched.uses_placeholder("port") or "PORT" in patched.env
    if port is None:
        port = free_port(host) if wants_free else patched.port
    try:
        if bridged(patched.env) and not wants_free:
            raise ManifestError(
                f"manifest {patched.name!r}: the warm-up bridge (WARMUP_NUM_PROMPTS > 0) moves the stack to a port of "
                "its own, but the manifest says nowhere where its port goes (a {port} placeholder or a PORT env entry)"
            )
        values = {"python": sys.executable, "repo": str(REPO_ROOT)}
        if patched.uses_placeholder("reference_checkpoint"):
            values["reference_checkpoint"] = _reference_checkpoint()
        for name, folder in (("workdir", workdir), ("tmpdir", tmpdir), ("cache", cache)):
            if folder is not None:
                values[name] = str(Path(folder).resolve()) if name != "tmpdir" else str(folder)
        plan = start(
            patched.serve,
            patched.env if gc_log is None else {**patched.env, "STACK_GC_LOG": str(gc_log)},
            host=host,
            port=port,
            model=patched.served_model_name,
            values=values,
            python=sys.executable,
            stackwrap=str(STACKWRAP),
            hooks=str(HOOKS),
            pythonpath=os.environ.get("PYTHONPATH"),
        )
    except StartError as exc:
        raise ManifestError(f"manifest {patched.name!r}: {exc}") from None
    except OSError as exc:
        raise EngineBootError(str(exc)) from None
    env = {**plan.env, "HF_HUB_OFFLINE": "1"}
    home = manifest.source.parent if manifest.source else REPO_ROOT
    cwd = home / fill(patched.cwd, plan.values) if patched.cwd else home
    return LaunchConfig(
        argv=plan.argv,
        stack_argv=plan.stack_argv,
        env=env,
        cwd=cwd,
        host=host,
        port=port,
        served_model_name=patched.served_model_name,
        manifest_name=patched.name,
        knobs=dict(baseline | knobs),
    )
