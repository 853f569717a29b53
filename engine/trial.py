"""One trial, start to finish: ``run_trial`` boots a stack with knob values, measures, stops.

It raises only for input a user wrote (``ConfigError``: unknown knob, bad data file), before
anything boots. A stack that misbehaves (``EngineError``: fails to boot, crashes, hangs, answers
badly) becomes ``TrialOutcome(status="failed")`` with its reason and log tail; the process group
is stopped in every case.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.bench import measure
from engine.data import PplRecord, Prompt, load_ppl_records, load_prompts
from engine.knobs import KnobValues
from engine.launch import LaunchConfig, build_launch
from engine.manifest import Manifest
from engine.measurement import Measurement, TrialOutcome
from engine.process import EngineProcess
from engine.profiles import BenchProfile
from engine.secrets import redact_env, scrub_text
from errors import BenchmarkError, EngineError

__all__ = ["node_info", "run_trial"]


def node_info() -> dict[str, Any]:
    """Where the trial ran; the Ray worker adds its node id and accelerator."""
    return {"hostname": socket.gethostname(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def _boot_and_measure(engine: EngineProcess, launch: LaunchConfig, *, profile: BenchProfile, prompts: list[Prompt],
                      records: list[PplRecord], timings: dict[str, float]) -> tuple[Measurement | None, EngineError | None]:
    """Start, measure, stop; the stack's misbehaviour comes back as the error, never raised."""
    measurement: Measurement | None = None
    error: EngineError | None = None
    try:
        engine.start()
        timings["boot"] = engine.wait_ready()
        measurement = measure(launch.base_url, model=launch.served_model_name, profile=profile,
                              prompts=prompts, records=records, timings=timings)
    except BenchmarkError as exc:
        # Read before stop(), which ends the process either way; a dropped connection may
        # come a moment before the exit is visible.
        code = engine.exit_status(wait_s=0.25)
        error = exc if code is None else BenchmarkError(
            f"{exc} (the engine process had exited with status {code})", log_tail=exc.log_tail)
    except EngineError as exc:
        error = exc
    finally:
        try:
            timings["stop"] = engine.stop()
        except EngineError as exc:
            error = error or exc
    return measurement, error


def run_trial(
    manifest: Manifest,
    knobs: KnobValues,
    profile: BenchProfile,
    *,
    workdir: Path,
    host: str = "127.0.0.1",
) -> TrialOutcome:
    began = time.monotonic()
    prompts = load_prompts(profile.path(profile.prompts), limit=profile.num_prompts)
    records = load_ppl_records(profile.path(profile.refs), limit=profile.ppl_records)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    def failed(error: EngineError, *, knob_values: dict[str, Any], argv: list[str], env: dict[str, str],
               log_tail: str) -> TrialOutcome:
        timings["total"] = time.monotonic() - began
        seen = {**os.environ, **env}  # the stack's whole env: an inherited token is as secret
        return TrialOutcome(status="failed", knobs=knob_values, argv=argv, env=redact_env(env),
                            reason=scrub_text(str(error), seen), log_tail=scrub_text(error.log_tail or log_tail, seen),
                            timings_s=timings, node=node_info())

    # Created only for the engine's lifetime; mkdtemp's short /tmp path keeps a stack's UNIX
    # sockets under the 107-byte limit that a deep workdir can exceed.
    with tempfile.TemporaryDirectory(prefix="gemma-sweep-", ignore_cleanup_errors=True) as tmpdir:
        try:
            launch = build_launch(manifest, knobs, host=host, workdir=workdir, tmpdir=Path(tmpdir))
        except EngineError as exc:
            return failed(exc, knob_values=dict(knobs), argv=list(manifest.serve), env=dict(manifest.env),
                          log_tail="")
        engine = EngineProcess(launch, log_path=workdir / "engine.log", boot_timeout_s=profile.boot_timeout_s)
        measurement, error = _boot_and_measure(engine, launch, profile=profile, prompts=prompts, records=records,
                                               timings=timings)
    if error is not None:
        return failed(error, knob_values=launch.knobs, argv=launch.argv, env=launch.env,
                      log_tail=engine.log_tail())
    timings["total"] = time.monotonic() - began
    return TrialOutcome(status="complete", knobs=launch.knobs, argv=launch.argv, env=redact_env(launch.env),
                        measurement=measurement, log_tail=scrub_text(engine.log_tail(), {**os.environ, **launch.env}),
                        timings_s=timings, node=node_info())
