"""Fresh boots of chosen configurations, interleaved: what promotion and verification both run.

``interleave`` lays the boots out as A B C A B C ... (never A A A B B B), so that drift and machine
state hit every configuration alike; each configuration's boots alternate which timed run comes
first (``sweep.store.heldout_first``). ``run_boots`` runs such a plan on one Ray worker pinned like
the sweep's own (``BootRunner``), one boot at a time, storing each ``BootRecord`` as soon as it ends
(an interrupted run keeps every boot it finished, and the same command goes on from the next) and
printing a line per boot. It starts no boot that the boots so far say would end after a deadline.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import ray
from rich.console import Console
from rich.markup import escape

from engine.knobs import parse_knobs
from engine.measurement import TrialOutcome
from engine.profiles import BenchProfile
from engine.secrets import Scrubber
from sweep.search import StudySpec, TrialWorker, actor_options, collect, full_plan
from sweep.store import BootRecord, Storage, TrialRecord, boot_record, heldout_first, scrub_unfinished_logs

__all__ = ["BootRunner", "PlannedBoot", "interleave", "run_boots"]


@dataclass(frozen=True, kw_only=True)
class PlannedBoot:
    record: TrialRecord  # the configuration: its trial's knobs, TPS and PPL
    repeat: int  # its boots so far in this run
    order: int  # this boot's place in the run
    claimed_tps: float  # what the boot is measured against
    gate: float | None
    profile: BenchProfile  # what it measures (BenchProfile.for_boots)
    heldout_first: bool  # which timed run comes first in the boot


def interleave(
    records: Sequence[TrialRecord],
    *,
    boots: int,
    profile: Callable[[TrialRecord], BenchProfile],
    gate: Callable[[TrialRecord], float | None],
    claims: dict[int, float] | None = None,
    start: int = 0,
) -> list[PlannedBoot]:
    """``boots`` rounds, each booting every configuration once in the same order; the first boot is the
    run's ``start``-th. A configuration is held to its claim, or its trial's TPS."""
    claims = claims or {}
    return [
        PlannedBoot(
            record=r,
            repeat=round_,
            order=start + round_ * len(records) + i,
            gate=gate(r),
            claimed_tps=_claimed_tps(r, claims),
            profile=profile(r),
            heldout_first=heldout_first(round_),
        )
        for round_ in range(boots)
        for i, r in enumerate(records)
    ]


def _claimed_tps(record: TrialRecord, claims: dict[int, float]) -> float:
    """Its claim, or its trial's TPS: a configuration booted again was measured, so it has one."""
    tps = claims.get(record.trial_number, record.tps)
    assert tps is not None
    return tps


class BootRunner:
    """One Ray worker pinned like the sweep's; boots a configuration afresh for every boot."""

    def __init__(self, spec: StudySpec, *, run_dir: Path) -> None:
        self.spec, self.run_dir = spec, run_dir
        self.worker = self._new()

    def _new(self):  # noqa: ANN202 - a Ray actor handle
        return TrialWorker.options(**actor_options(self.spec.resources)).remote()

    def boot(self, planned: PlannedBoot, *, folder: Path) -> TrialOutcome:
        record = planned.record
        knobs = parse_knobs(self.spec.manifest, record.knobs, where=f"trial {record.trial_number}'s stored knobs: ")
        ref = self.worker.run.remote(
            self.spec.manifest,
            knobs,
            planned.profile,
            workdir=str(folder.resolve()),
            cache_dir=str((self.run_dir / self.spec.name / "cache").resolve()),  # the sweep's
            plan=full_plan("a promotion or verification boot: measured to the end"),
            heldout_first=planned.heldout_first,
        )
        outcome, lost = collect(ref, knobs=dict(record.knobs), manifest=self.spec.manifest)
        if lost:
            ray.kill(self.worker, no_restart=True)
            self.worker = self._new()
        return outcome

    def stop(self) -> None:
        try:
            ray.get(self.worker.stop_engines.remote(), timeout=30)
        finally:
            ray.kill(self.worker, no_restart=True)


def boot_line(boot: BootRecord, *, total: int) -> str:
    """One boot, as the console prints it."""
    head = f"  boot {boot.order + 1}/{total}: trial {boot.trial_number} (its boot {boot.repeat + 1}): "  # type: ignore[operator]
    if not boot.measured:
        return f"{head}[red]FAILED[/]: {escape(boot.reason or 'no measurement')}"
    booted = boot.timings.get("boot")
    return (
        f"{head}public {boot.public_tps:.2f}, held-out {boot.tps:.2f} tok/s ({boot.first} first)  "
        f"PPL {boot.ppl:.4f}"
        + ("" if booted is None else f"  (boot {booted:.1f} s)")
        + ("" if boot.host_steal is None else f"  host steal {boot.host_steal:.0%}")
    )


def run_boots(
    plan: Sequence[PlannedBoot],
    *,
    runner: BootRunner,
    storage: Storage,
    kind: str,
    run_id: str,
    out: Console,
    done: int = 0,
    deadline: float | None = None,
    earlier: Sequence[float] = (),
    total: int | None = None,
) -> tuple[list[BootRecord], bool]:
    """Run ``plan[done:]``; returns the boots run here and whether the deadline (``time.monotonic()``)
    left boots unrun. ``earlier``: seconds the run's boots took before (a resumed run): what the
    first boot here is expected to take. ``total``: the run's boots, where ``plan`` is a part of it."""
    # before any boot: what an earlier run stopped mid-boot left on disk must not keep a secret while this one runs
    manifest = runner.spec.manifest
    scrubbed = scrub_unfinished_logs(
        runner.run_dir, runner.spec.name, storage, Scrubber.for_stack(manifest.env, manifest.serve)
    )
    if scrubbed:
        out.print(f"  scrubbed {len(scrubbed)} boot log(s) an earlier run did not see finish", markup=False)
    ran: list[BootRecord] = []
    durations: list[float] = list(earlier)
    for planned in plan[done:]:
        expected = statistics.fmean(durations) if durations else 0.0
        if deadline is not None and time.monotonic() + expected > deadline:
            return ran, True
        began = time.monotonic()
        folder = (
            runner.run_dir
            / kind
            / runner.spec.name
            / run_id
            / f"boot-{planned.order:03d}-trial-{planned.record.trial_number:04d}"
        )
        outcome = runner.boot(planned, folder=folder)
        gate = planned.gate
        if gate is None and planned.record.is_baseline:
            # the baseline of a relative gate is held to its own PPL's, as the sweep holds it (sweep.store.Judge)
            m = outcome.measurement
            gate = runner.spec.gate.resolve(m.ppl if m else None) or planned.record.gate
        assert planned.record.ppl is not None  # its configuration was measured (interleave's records)
        boot = boot_record(
            outcome,
            study_name=runner.spec.name,
            trial_number=planned.record.trial_number,
            run_id=run_id,
            repeat=planned.repeat,
            order=planned.order,
            claimed_tps=planned.claimed_tps,
            claimed_ppl=planned.record.ppl,
            gate=gate,
            profile=planned.profile,
        )
        storage.insert_boots(kind, [boot])
        durations.append(time.monotonic() - began)
        ran.append(boot)
        out.print(boot_line(boot, total=total or plan[-1].order + 1))
    return ran, False
