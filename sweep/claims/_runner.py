"""One run of fresh boots, whatever asks for it: ``FreshBoots``, and the plan it runs (``interleave``).

Promotion, the confirmation of its choice, verification and calibration all judge a configuration
over several fresh boots, never one (on a GPU one configuration's TPS moves about 10% from boot to boot).
``interleave`` lays the boots out as A B C A B C ... (never A A A B B B), so that drift and machine state hit
every configuration alike, each configuration's boots alternating which timed run comes first
(``heldout_first``). ``FreshBoots`` runs such a plan, and is the one place that knows what a run of boots
needs::

    with FreshBoots(spec, storage, kind="verification", out=out, run_dir=RUN_DIR, resume=args.resume,
                    expected=[3, 5, 3, 5], go_on="the same command with --resume {run} goes on") as run:
        if not run.boot(plan):          # False: the time limit left boots unrun; it said how to go on
            return 3
    judge(run.boots)                    # every boot of the run, the stored ones first

- **its id**: a new one, the one the caller keeps (``run_id``), or a stored run to go on with (``resume``),
  whose stored boots must be the start of ``expected`` (else ``UsageError``, nothing booted);
- **resume**: a boot whose place in the run (``order``) is stored is not booted again; each boot is stored
  the moment it ends, so an interrupted run keeps every boot it finished;
- **the Ray session** (joined, or a private local one) and one worker pinned like the sweep's, replaced if
  it is lost (a new one for every boot where the run spreads over nodes); the boot logs an earlier run did
  not see finish are scrubbed first;
- **the state a boot starts in**: an empty cache of its own, as the organisers' first boot of a folder starts
  (a stack's compile cache, say), unless the caller asks for the sweep's shared one;
- **the deadline**: no boot starts that the boots so far say would end after it;
- **SIGTERM as Ctrl-C**, and on either the line that says how many boots are stored and how to go on.
"""

from __future__ import annotations

import signal
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import ray
from rich.console import Console
from rich.markup import escape

from engine.config import BenchProfile, parse_knobs
from engine.measurement import TrialOutcome
from engine.secrets import Scrubber
from errors import UsageError
from sweep.interrupts import raise_interrupt
from sweep.search import StudySpec, TrialWorker, actor_options, check_capacity, collect, full_plan, ray_session
from sweep.store import BootKind, BootRecord, Storage, TrialRecord, boot_record, scrub_unfinished_logs

__all__ = ["FreshBoots", "PlannedBoot", "heldout_first", "interleave", "new_run_id"]


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def heldout_first(repeat: int) -> bool:
    """Which run a configuration's ``repeat``-th boot times first: public, held-out, public, ...

    A server's later runs read a little faster (seen on the H200: four successive runs 1,713 ->
    1,903 tok/s), so neither set may always go second; alternating lets the claim's estimator
    measure that effect and take it out (``sweep.claims``)."""
    return repeat % 2 == 1


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
            claimed_tps=claims.get(r.trial_number, r.tps or 0.0),  # interleave's records were measured
            profile=profile(r),
            heldout_first=heldout_first(round_),
        )
        for round_ in range(boots)
        for i, r in enumerate(records)
    ]


def boot_line(boot: BootRecord, *, total: int) -> str:
    """One boot, as the console prints it."""
    head = f"  boot {(boot.order or 0) + 1}/{total}: trial {boot.trial_number} (its boot {boot.repeat + 1}): "
    if not boot.measured:
        return f"{head}[red]FAILED[/]: {escape(boot.reason or 'no measurement')}"
    booted = boot.timings.get("boot")
    return (
        f"{head}public {boot.public_tps:.2f}, held-out {boot.tps:.2f} tok/s ({boot.first} first)  "
        f"PPL {boot.ppl:.4f}"
        + ("" if booted is None else f"  (boot {booted:.1f} s)")
        + ("" if boot.host_steal is None else f"  host steal {boot.host_steal:.0%}")
    )


class _Worker:
    """One Ray worker pinned like the sweep's; boots a configuration afresh for every boot. With ``spread``, a new
    worker for every boot, placed by Ray's SPREAD strategy: on a cluster of several nodes that host the study's
    trials, the boots land on several of them."""

    def __init__(self, spec: StudySpec, *, run_dir: Path, fresh_cache: bool, spread: bool) -> None:
        self.spec, self.run_dir, self.fresh_cache, self.spread = spec, run_dir, fresh_cache, spread
        self.actor = self._new()
        self.used = False

    def _new(self):  # noqa: ANN202 - a Ray actor handle
        options = actor_options(self.spec.resources)
        if self.spread:
            options["scheduling_strategy"] = "SPREAD"
        return TrialWorker.options(**options).remote()

    def boot(self, planned: PlannedBoot, *, folder: Path) -> TrialOutcome:
        if self.spread and self.used:
            self.stop()
            self.actor = self._new()
        self.used = True
        record = planned.record
        knobs = parse_knobs(self.spec.manifest, record.knobs, where=f"trial {record.trial_number}'s stored knobs: ")
        # the sweep's shared cache (a stack's compile cache, say), or one of the boot's own: empty, as on a machine
        # that never booted the stack
        cache = folder / "cache" if self.fresh_cache else self.run_dir / self.spec.name / "cache"
        ref = self.actor.run.remote(
            self.spec.manifest,
            knobs,
            planned.profile,
            workdir=str(folder.resolve()),
            cache_dir=str(cache.resolve()),
            plan=full_plan("a fresh boot of a run of boots: measured to the end"),
            heldout_first=planned.heldout_first,
        )
        outcome, lost = collect(ref, knobs=dict(record.knobs), manifest=self.spec.manifest)
        if lost:
            ray.kill(self.actor, no_restart=True)
            self.actor = self._new()
        return outcome

    def stop(self) -> None:
        try:
            ray.get(self.actor.stop_engines.remote(), timeout=30)
        finally:
            ray.kill(self.actor, no_restart=True)


class FreshBoots:
    """One run of fresh boots of a study's configurations (see the module's docstring)."""

    def __init__(
        self,
        spec: StudySpec,
        storage: Storage,
        *,
        kind: BootKind,
        out: Console,
        run_dir: Path,
        expected: Sequence[int],
        go_on: str,
        run_id: str | None = None,
        resume: str | None = None,
        ray_address: str | None = None,
        deadline: float | None = None,
        fresh_cache: bool = True,
        spread: bool = False,
    ) -> None:
        """``expected``: the trial of every boot of the run, in order; ``go_on``: how to go on with it once stopped
        (``{run}`` is its id); ``run_id``: the run's id where the caller keeps it (a promotion's plan), else a new
        one; ``resume``: a stored run to go on with (raises UsageError, nothing booted, where none of that id is
        stored or its boots are not the start of ``expected``); ``deadline``: ``time.monotonic()`` after which no
        boot may end; ``fresh_cache``: each boot starts with an empty cache of its own, as the organisers' first
        boot of a folder does (False: the sweep's shared one); ``spread``: a new worker for every boot, spread
        over the nodes that can host it."""
        self.spec, self.storage, self.kind, self.out, self.run_dir = spec, storage, kind, out, run_dir
        self.run_id = resume or run_id or new_run_id()
        self.expected, self.go_on, self.ray_address, self.deadline = list(expected), go_on, ray_address, deadline
        self.fresh_cache, self.spread = fresh_cache, spread
        self.boots: list[BootRecord] = [b for b in storage.boots(kind, spec.name) if b.run_id == self.run_id]
        if resume is not None and not self.boots:
            raise UsageError(f"--resume {resume}: no {kind} run of that id in study {spec.name!r}")
        if [b.trial_number for b in self.boots] != self.expected[: len(self.boots)]:
            raise UsageError(
                f"run {self.run_id}: its stored boots (trials {[b.trial_number for b in self.boots]}) are not the start "
                f"of this plan (trials {self.expected}): give the run's own options"
            )
        self._stack = ExitStack()
        self._worker: _Worker | None = None

    @property
    def total(self) -> int:
        return len(self.expected)

    @property
    def stored(self) -> int:
        return len(self.boots)

    @property
    def done(self) -> bool:
        return self.stored >= self.total

    def stopped_line(self, why: str) -> str:
        """What a stopped run says: the boots stored, and how to go on (or that nothing is to resume)."""
        hint = self.go_on.format(run=self.run_id) if self.boots else "nothing to resume: give it more time"
        return f"{why}: {self.stored} of {self.total} boot(s) stored ({self.kind} run {self.run_id}); {hint}"

    def __enter__(self) -> FreshBoots:
        previous = signal.signal(signal.SIGTERM, raise_interrupt)
        self._stack.callback(signal.signal, signal.SIGTERM, previous)
        self._stack.enter_context(ray_session(address=self.ray_address, temp_dir=self.run_dir / "ray"))
        check_capacity(self.spec.resources)
        # before any boot: what an earlier run stopped mid-boot left on disk must not keep a secret while this one runs
        manifest = self.spec.manifest
        scrubbed = scrub_unfinished_logs(
            self.run_dir, self.spec.name, self.storage, Scrubber.for_stack(manifest.env, manifest.serve)
        )
        if scrubbed:
            self.out.print(f"  scrubbed {len(scrubbed)} boot log(s) an earlier run did not see finish", markup=False)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            if self._worker is not None:
                self._worker.stop()
        finally:
            self._stack.close()
        if kind is KeyboardInterrupt:
            self.out.print(self.stopped_line("interrupted"), markup=False, soft_wrap=True)

    def boot(self, plan: Sequence[PlannedBoot]) -> bool:
        """Boot what of ``plan`` is not stored yet, storing each boot as it ends; False when the deadline left
        boots unrun (the run has said so, and how to go on)."""
        done = {b.order for b in self.boots}
        durations = [b.timings["total"] for b in self.boots if "total" in b.timings]
        for planned in plan:
            if planned.order in done:
                continue
            expected = statistics.fmean(durations) if durations else 0.0
            if self.deadline is not None and time.monotonic() + expected > self.deadline:
                self.out.print(self.stopped_line("time limit"), markup=False, soft_wrap=True)
                return False
            began = time.monotonic()
            boot = self._boot(planned)
            self.storage.insert_boots(self.kind, [boot])
            durations.append(time.monotonic() - began)
            self.boots.append(boot)
            self.out.print(boot_line(boot, total=self.total))
        return True

    def _boot(self, planned: PlannedBoot) -> BootRecord:
        if self._worker is None:
            self._worker = _Worker(self.spec, run_dir=self.run_dir, fresh_cache=self.fresh_cache, spread=self.spread)
        record = planned.record
        folder = (
            self.run_dir
            / self.kind
            / self.spec.name
            / self.run_id
            / f"boot-{planned.order:03d}-trial-{record.trial_number:04d}"
        )
        outcome = self._worker.boot(planned, folder=folder)
        gate = planned.gate
        if gate is None and record.is_baseline:
            # the baseline of a relative gate is held to its own PPL's, as the sweep holds it (sweep.store.Judge)
            m = outcome.measurement
            gate = self.spec.gate.limit([m.ppl if m else None]) or record.gate
        return boot_record(
            outcome,
            study_name=self.spec.name,
            trial_number=record.trial_number,
            run_id=self.run_id,
            repeat=planned.repeat,
            order=planned.order,
            claimed_tps=planned.claimed_tps,
            claimed_ppl=record.ppl or 0.0,  # a configuration booted again was measured
            gate=gate,
            profile=planned.profile,
        )
