"""One trial, start to finish: ``run_trial`` boots a stack with knob values, measures, stops.

It raises only for input a user wrote (``ConfigError``: a bad data file), before anything
boots. A stack that misbehaves (``EngineError``: fails to boot, crashes, hangs, answers badly)
becomes ``TrialOutcome(status="failed")`` with its reason and log tail; the process group is
stopped in every case.

On a GPU the trial first waits, bounded, for the GPU to be free (``engine.host.wait_until_free``), and after the
stop records any memory the stack left held (``node["gpu_held_after_stop_mib"]``). The boot's
phases, where the stack's log names them, become ``boot_<phase>`` timings (``engine.stacks``).
While it measures, the client runs where the profile's ``client_cpus`` says (``engine.host.client_cpus``) and
``engine.host.Telemetry`` samples the machine and the stack's process group over every timed run
(``Measurement.telemetry``).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.bench._measure import measure
from engine.config import BenchProfile, KnobValues, Manifest, PplRecord, Prompt
from engine.host import KEYS as PROVENANCE_KEYS
from engine.host import Telemetry, client_cpus, held_after_stop, pinned, provenance, visible_gpus, wait_until_free
from engine.launch import OWNER_ENV, EngineProcess, LaunchConfig, build_launch, check_machine
from engine.measurement import Measurement, Stages, TrialOutcome
from engine.secrets import Scrubber, redact_argv, redact_env
from engine.stacks import StackAdapter, adapter_for, boot_phases, resolved_settings
from errors import BenchmarkError, EngineError

__all__ = ["node_info", "run_trial"]


def node_info() -> dict[str, Any]:
    """Where the trial ran; the Ray worker adds its node id and accelerator."""
    return {"hostname": socket.gethostname(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


# After a stop, a GPU's memory comes back within a second (seen with vLLM on an H200): this is
# long enough to tell a leak from a slow release.
_RELEASE_WAIT_S = 10.0


def _boot_and_measure(
    engine: EngineProcess,
    launch: LaunchConfig,
    *,
    stack: StackAdapter,
    profile: BenchProfile,
    prompts: list[Prompt],
    records: list[PplRecord],
    timings: dict[str, float],
    node: dict[str, Any],
    stages: Stages | None,
    heldout: list[Prompt] | None,
    heldout_first: bool,
    about: dict[str, Any],
    dependencies: list[str],
    gc_log: Path,
) -> tuple[Measurement | None, EngineError | None]:
    """Start, measure, stop; the stack's misbehaviour comes back as the error, never raised. ``dependencies``:
    the manifest's, whose installed versions the provenance records."""
    measurement: Measurement | None = None
    error: EngineError | None = None
    gpus = visible_gpus()
    try:
        timings["gpu_wait"] = wait_until_free(gpus, owner_env=OWNER_ENV, timeout_s=profile.gpu_free_timeout_s)
        started = datetime.now()
        engine.start()
        timings["boot"] = engine.wait_ready()
        log = engine.log_path.read_text(errors="replace")
        timings.update(boot_phases(log, stack, started=started))
        about.update(
            provenance(
                launch.base_url,
                argv=launch.stack_command,
                env=launch.process_env(),
                stack=stack.name,
                dependencies=dependencies,
            )
        )
        about["resolved"] = resolved_settings(log, stack)
        cpus, why = client_cpus(profile.client_cpus, stack_pgid=engine.pid)
        with pinned(cpus), Telemetry(engine.pid, gc_log=gc_log) as probe:
            measurement = measure(
                launch.base_url,
                model=launch.served_model_name,
                stack=stack,
                profile=profile,
                prompts=prompts,
                records=records,
                timings=timings,
                stages=stages,
                heldout=heldout,
                heldout_first=heldout_first,
                probe=probe,
            )
        measurement.telemetry.setdefault("affinity", {})["client_rule"] = why
    except BenchmarkError as exc:
        # Read before stop(), which ends the process either way; a dropped connection may
        # come a moment before the exit is visible.
        code = engine.exit_status(wait_s=0.25)
        error = (
            exc
            if code is None
            else BenchmarkError(f"{exc} (the engine process had exited with status {code})", log_tail=exc.log_tail)
        )
    except EngineError as exc:
        error = exc
    finally:
        try:
            timings["stop"] = engine.stop()
        except EngineError as exc:
            error = error or exc
        if gpus and engine.pid is not None:
            held = held_after_stop(gpus, wait_s=_RELEASE_WAIT_S)
            if held:
                node["gpu_held_after_stop_mib"] = held  # the stack that leaked, named by its own trial
    return measurement, error


def run_trial(
    manifest: Manifest,
    knobs: KnobValues,
    profile: BenchProfile,
    *,
    workdir: Path,
    host: str = "127.0.0.1",
    cache_dir: Path | None = None,
    stages: Stages | None = None,
    heldout_first: bool | None = None,
) -> TrialOutcome:
    """Boot, measure, stop. ``cache_dir`` fills ``{cache}`` (default: ``cache`` beside ``workdir``);
    ``stages`` times the first run in stages that may end the measurement early (``engine.bench``);
    ``heldout_first`` (True or False; None: no held-out run) adds a timed run of the profile's held-out
    prompts to the boot, before or after the public one (a promotion or verification boot)."""
    began = time.monotonic()
    prompts, records = profile.load_data()
    heldout = None if heldout_first is None else profile.load_heldout()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    gc_log = workdir / "gc"  # this boot's collections alone: a folder reused by a later boot starts empty
    shutil.rmtree(gc_log, ignore_errors=True)
    gc_log.mkdir()
    timings: dict[str, float] = {}
    node = node_info()
    about: dict[str, Any] = {}  # the stack's provenance, once it answers

    # Created only for the engine's lifetime; mkdtemp's short /tmp path keeps a stack's UNIX
    # sockets under the 107-byte limit that a deep workdir can exceed.
    with tempfile.TemporaryDirectory(prefix="gemma-sweep-", ignore_cleanup_errors=True) as tmpdir:
        try:
            launch = build_launch(
                manifest,
                knobs,
                host=host,
                workdir=workdir,
                tmpdir=Path(tmpdir),
                cache=cache_dir or workdir.parent / "cache",
                gc_log=gc_log,
            )
            check_machine(launch)
        except EngineError as exc:
            return _outcome(
                _Ran(knobs=dict(knobs), argv=list(manifest.serve), env=dict(manifest.env), log_tail=""),
                timings=timings,
                began=began,
                node=node,
                about=about,
                error=exc,
            )
        engine = EngineProcess.for_profile(launch, profile, log_path=workdir / "engine.log")
        measurement, error = _boot_and_measure(
            engine,
            launch,
            stack=adapter_for(manifest),
            profile=profile,
            prompts=prompts,
            records=records,
            timings=timings,
            node=node,
            stages=stages,
            heldout=heldout,
            heldout_first=bool(heldout_first),
            about=about,
            dependencies=manifest.dependencies,
            gc_log=gc_log,
        )
    ran = _Ran(knobs=launch.knobs, argv=launch.argv, env=launch.env, log_tail=engine.log_tail())
    return _outcome(ran, timings=timings, began=began, node=node, about=about, measurement=measurement, error=error)


@dataclass(frozen=True, kw_only=True)
class _Ran:
    """What a trial started (or would have): its knobs, argv and env, and its log's tail."""

    knobs: dict[str, Any]
    argv: list[str]
    env: dict[str, str]
    log_tail: str


def _outcome(
    ran: _Ran,
    *,
    timings: dict[str, float],
    began: float,
    node: dict[str, Any],
    about: dict[str, Any],
    measurement: Measurement | None = None,
    error: EngineError | None = None,
) -> TrialOutcome:
    """The outcome with no secret in it: the stack's whole env counts (an inherited token is as secret)."""
    timings["total"] = time.monotonic() - began
    scrub = Scrubber.for_stack(ran.env, ran.argv)  # the log itself went to disk scrubbed (engine.launch.LogPipe)
    return TrialOutcome(
        status="complete" if error is None else "failed",
        knobs=ran.knobs,
        argv=redact_argv(ran.argv),
        env=redact_env(ran.env),
        measurement=measurement,
        reason=None if error is None else scrub(str(error)),
        log_tail=scrub((error.log_tail if error else "") or ran.log_tail),
        timings_s=timings,
        node=node,
        provenance={**dict.fromkeys(PROVENANCE_KEYS), **about},
    )
