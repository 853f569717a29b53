"""One point's boot: booted fresh with its trial's knobs, warmed once as the organisers' harness warms, timed under
each workload in order, its long texts scored by context length where the study's profile names them
(``engine.measurement``), stopped; what it measured kept level by level, and a stack that misbehaves named, never
raised."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.status import Status

from engine.bench import Workload, harness_warm_up, measure_lengths, measure_load, open_client
from engine.config import Prompt
from engine.launch import EngineProcess, build_launch, check_machine
from engine.measurement import LengthBucket, LoadLevel
from engine.stacks import adapter_for
from errors import EngineError
from sweep.judgement import MaxLoad, Slo, level_goodput, max_load
from sweep.runs import RUN_DIR
from sweep.serving._maxload import probe_levels
from sweep.serving._points import Point

if TYPE_CHECKING:
    from sweep.search import StudySpec

__all__ = ["LevelRun", "PointRun", "Setup", "run_point"]


@dataclass(frozen=True, kw_only=True)
class LevelRun:
    """One workload's run on one boot, and its goodput under the SLO (None without one)."""

    level: LoadLevel
    goodput: float | None

    @classmethod
    def judged(cls, level: LoadLevel, slo: Slo | None) -> LevelRun:
        return cls(level=level, goodput=None if slo is None else level_goodput(level, slo))

    def to_dict(self) -> dict[str, Any]:
        return self.level.to_dict() | {"goodput": self.goodput}


@dataclass(kw_only=True)
class PointRun:
    """What one point's boot gave: its levels in order, as far as it got, and the error that stopped it; ``kept``:
    measured by an earlier run of the command into the same folder, not booted again."""

    point: Point
    log: Path
    levels: list[LevelRun] = field(default_factory=list)
    boot_s: float | None = None
    error: str | None = None
    kept: bool = False
    max_load: MaxLoad | None = None  # with --max-load
    lengths: list[LengthBucket] = field(default_factory=list)  # PPL by context length (the profile's length_refs)

    def complete(self, plan: Sequence[Workload]) -> bool:
        return self.error is None and [lv.level.workload for lv in self.levels] == [w.name for w in plan]

    def level(self, name: str) -> LevelRun | None:
        return next((lv for lv in self.levels if lv.level.workload == name), None)


@dataclass(frozen=True, kw_only=True)
class Setup:
    """What every point is measured with."""

    spec: StudySpec
    plan: list[Workload]
    prompts: dict[str, list[Prompt]]
    slo: Slo | None
    out: Path
    public: list[Prompt]  # every public prompt, in the profile's order
    max_load_repeats: int | None = None


def _measure(run: PointRun, engine: EngineProcess, setup: Setup, status: Status, where: str) -> None:
    """Warm the running stack once, then each workload in order; each level is kept as soon as it is measured."""
    profile, model = setup.spec.profile, engine.launch.served_model_name
    with open_client(engine.base_url, timeout_s=profile.request_timeout_s) as client:
        status.update(f"{where}: warming up")
        harness_warm_up(client, model=model, prompt=setup.prompts[setup.plan[0].name][0], profile=profile)
        for i, workload in enumerate(setup.plan, start=1):
            status.update(
                f"{where}: level {workload.name} ({i}/{len(setup.plan)}), "
                f"{workload.num_prompts} requests x {workload.output_len} tokens"
            )
            level = measure_load(client, model=model, prompts=setup.prompts[workload.name], workload=workload)
            run.levels.append(LevelRun.judged(level, setup.slo))
        if setup.max_load_repeats is not None and setup.slo is not None:
            status.update(f"{where}: the highest level it holds under {setup.slo.text()}")
            used = sum(w.num_prompts for w in setup.plan if w.prompts == "public")  # the search's runs start after
            probe = probe_levels(
                client,
                model=model,
                profile=profile,
                public=setup.public[used:] + setup.public[:used],
                repeats=setup.max_load_repeats,
                num_prompts=setup.plan[0].num_prompts,
                output_len=setup.plan[0].output_len,
            )
            run.max_load = max_load([w.concurrency for w in setup.plan if w.prompts == "public"], probe, setup.slo)
        if profile.length_refs:
            status.update(f"{where}: PPL by context length")
            run.lengths = measure_lengths(
                client,
                model=model,
                records=profile.load_lengths(),
                ends=profile.length_buckets,
                wire=adapter_for(setup.spec.manifest).ppl,
            )


def run_point(run: PointRun, setup: Setup, status: Status, where: str) -> None:
    """Boot ``run``'s point fresh, warm it, time every level into ``run``, stop it; a stack that misbehaves is the
    run's ``error`` (named, its log kept), never raised."""
    point, profile = run.point, setup.spec.profile
    run.log.parent.mkdir(parents=True, exist_ok=True)
    # a short /tmp path keeps a stack's UNIX sockets under the 107-byte limit a deep folder can exceed
    with tempfile.TemporaryDirectory(prefix="gemma-sweep-", ignore_cleanup_errors=True) as tmp:
        try:
            launch = build_launch(
                setup.spec.manifest,
                point.knobs,
                workdir=run.log.parent,
                tmpdir=Path(tmp),
                cache=RUN_DIR / setup.spec.name / "cache",  # the study's, as its trials had it
            )
            check_machine(launch)
            status.update(f"{where}: booting")
            began = time.monotonic()
            with EngineProcess.for_profile(launch, profile, log_path=run.log) as engine:
                run.boot_s = time.monotonic() - began
                _measure(run, engine, setup, status, where)
        except EngineError as exc:
            run.error = f"{type(exc).__name__}: {exc}"
