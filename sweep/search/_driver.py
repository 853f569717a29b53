"""The ask/tell loop: the only writer of the study, keeping one trial in flight per worker.

Call order of ``run_study``: scrub the logs of the trials an earlier driver did not see finish
(``sweep.store``), open (or resume) the study through the ask/tell core (``sweep.search``),
reconcile what a dead driver left RUNNING, enqueue the baseline unless
measured, start the workers, then loop: fill idle workers with trials the core hands out,
``ray.wait`` for the next outcome, close it (store, re-queue, tell: the core's rules). The
baseline runs alone first: the ``ppl_max_ratio`` gate and the greedy identity check both need
it. A lost worker is replaced by a fresh actor. Ctrl-C stops the engines, closes the in-flight
trials as interrupted (re-queued for the next run) and re-raises.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from engine.secrets import Scrubber
from errors import SweepStopped, WorkerSetupFailed
from sweep.judgement import front_records
from sweep.search._cluster import check_capacity
from sweep.search._console import Progress, SweepConsole
from sweep.search._core import PlannedTrial, StudyCore
from sweep.search._spec import StudySpec
from sweep.search._worker import TrialWorker, actor_options, collect, error_text
from sweep.store import Storage, StudyRecords, TrialRecord, scrub_unfinished_logs, shown_url

__all__ = ["StudyResult", "run_study"]

_WAIT_S = 0.5
_STOP_ENGINES_S = 30.0


@dataclass
class StudyResult:
    progress: Progress
    records: list[TrialRecord]
    front: list[TrialRecord]
    stopped_for_time: bool = False  # the time limit left budget unspent: the same command resumes


@dataclass
class _Slot:
    """One worker and the trial it runs, if any."""

    actor: Any
    planned: PlannedTrial | None = None
    ref: Any = None
    started: float = 0.0
    node: dict[str, Any] | None = None
    node_ref: Any = None


class _Driver:
    def __init__(
        self,
        spec: StudySpec,
        storage: Storage,
        *,
        console: SweepConsole,
        run_dir: Path,
        time_limit_s: float | None = None,
    ) -> None:
        self.spec = spec
        self.time_limit_s = time_limit_s
        self.stopped_for_time = False
        self.console = console
        self.run_dir = run_dir
        self.core = StudyCore(spec, StudyRecords(storage, spec.name), storage=storage.optuna)
        self.slots: list[_Slot] = []
        self.began = time.monotonic()
        self.durations: list[float] = []
        self._counted: tuple[int, int, int, int, int, list[TrialRecord]] | None = None

    # --- progress ---------------------------------------------------------------------

    def _counts(self) -> tuple[int, int, int, int, int, list[TrialRecord]]:
        """Budget used, complete, pruned, gate-stopped and unbooted trials, the front: recomputed only
        after a trial closes. Trials closed without a boot count apart: the budget counts boots."""
        if self._counted is None:
            records = self.core.all_records()
            complete = sum(1 for r in records if r.measured and r.booted)
            pruned = sum(1 for r in records if r.status == "pruned" and r.booted)
            gated = sum(1 for r in records if r.gate_stopped)
            unbooted = sum(1 for r in records if not r.booted)
            self._counted = (self.core.budget_used(), complete, pruned, gated, unbooted, front_records(records))
        return self._counted

    def progress(self) -> Progress:
        used, complete, pruned, gated, unbooted, front = self._counts()
        running = sum(1 for s in self.slots if s.ref is not None)
        eta = None
        if self.durations:
            left = max(self.spec.n_trials - used, 0)
            eta = sum(self.durations) / len(self.durations) * left / max(len(self.slots), 1)
        return Progress(
            budget=self.spec.n_trials,
            done=used,
            complete=complete,
            failed=used - complete - pruned,
            pruned=pruned,
            gate_stopped=gated,
            unbooted=unbooted,
            running=running,
            best_tps=max((r.figures.tps for r in front), default=None),
            front_size=len(front),
            elapsed_s=time.monotonic() - self.began,
            eta_s=eta,
        )

    # --- workers ----------------------------------------------------------------------

    def _new_slot(self) -> _Slot:
        # @ray.remote adds .options() at run time; its typing leaves the class as it was
        actor = TrialWorker.options(**actor_options(self.spec.resources)).remote()  # type: ignore[attr-defined]
        return _Slot(actor=actor, node_ref=actor.node.remote())

    def _in_flight(self) -> int:
        return sum(1 for s in self.slots if s.ref is not None)

    def place(self) -> None:
        """Note the workers Ray has placed (each answers ``node()`` first); only those get trials.

        A worker Ray cannot place yet (the cluster is full) just waits: giving it a trial
        would leave that trial pending behind workers that never let go of their resources.
        """
        for slot in self.slots:
            if slot.node is not None or not ray.wait([slot.node_ref], timeout=0)[0]:
                continue
            try:
                slot.node = ray.get(slot.node_ref)
            except ray.exceptions.RayActorError as exc:
                if exc.actor_init_failed:
                    raise WorkerSetupFailed(
                        f"a trial worker could not start on the Ray cluster ({error_text(exc, self.spec.manifest)}); every "
                        "node needs this project importable (pip install it there, or set PYTHONPATH)"
                    ) from None
                self._replace(slot)  # its node went away before it ran anything

    def _time_for_another(self) -> bool:
        """Whether a trial started now would end inside the time limit, going by the trials so far."""
        if self.time_limit_s is None:
            return True
        expected = sum(self.durations) / len(self.durations) if self.durations else 0.0
        if time.monotonic() - self.began + expected <= self.time_limit_s:
            return True
        self.stopped_for_time = True
        return False

    def fill(self) -> None:
        for slot in self.slots:
            while slot.node is not None and slot.ref is None:
                if any(s.planned is not None and s.planned.is_baseline for s in self.slots):
                    return  # the baseline runs alone: the others are judged against it
                if not self.core.has_next(in_flight=self._in_flight()) or not self._time_for_another():
                    return
                self._start(slot)

    def _start(self, slot: _Slot) -> None:
        """Run the next trial on ``slot``, or close it at once if it must not boot."""
        planned = self.core.ask()
        if planned.answer is not None:  # the core's records answer it (a known failure, a copy, the PPL memo)
            self._close(planned.answer)
            return
        folder = (self.run_dir / self.spec.name).resolve()
        slot.planned = planned
        # {cache} is the study's: a stack's compile cache is reused from trial to trial (and by sweep.verify)
        slot.ref = slot.actor.run.remote(
            self.spec.manifest,
            planned.knobs,
            self.spec.profile,
            workdir=str(folder / f"trial-{planned.number:04d}"),
            cache_dir=str(folder / "cache"),
            plan=self.core.plan(planned),
        )
        slot.started = time.monotonic()
        self.console.started(planned.number, planned.effective, baseline=planned.is_baseline)

    def _close(self, record: TrialRecord) -> None:
        self._counted = None
        requeued = self.core.close(record)
        self.console.finished(record, requeued=requeued, slo=self.core.spec.serving)

    def collect(self, slot: _Slot) -> None:
        planned, node = slot.planned, slot.node or {}
        assert planned is not None
        outcome, lost = collect(slot.ref, knobs=dict(planned.effective), manifest=self.spec.manifest, node=node)
        if lost:  # actor died, node died, object lost: run again by the core's rules
            record = self.core.failed(planned, kind="lost", reason=outcome.reason or "worker lost", node=node)
            self._replace(slot)
        else:  # a result, or the trial code raised (a bug, not a loss: a failed trial saying so)
            record = self.core.outcome_record(planned, outcome)
            if outcome.timings_s:
                self.durations.append(time.monotonic() - slot.started)
        slot.ref, slot.planned = None, None
        self._close(record)
        if planned.is_baseline and not record.measured:
            self.core.ensure_baseline()  # re-queued, or failed for good (raises for a ratio gate)

    def _replace(self, slot: _Slot) -> None:
        ray.kill(slot.actor, no_restart=True)
        fresh = self._new_slot()
        slot.actor, slot.node, slot.node_ref = fresh.actor, None, fresh.node_ref

    def interrupt(self, reason: str) -> int:
        """Stop the engines, close in-flight trials as interrupted (re-queued). Returns how many."""
        busy = [s for s in self.slots if s.ref is not None]
        stops = [s.actor.stop_engines.remote() for s in busy]
        if stops:
            ray.wait(stops, num_returns=len(stops), timeout=_STOP_ENGINES_S)
        for slot in self.slots:
            ray.kill(slot.actor, no_restart=True)
        for slot in busy:
            record = self.core.failed(slot.planned, kind="interrupted", reason=reason, node=slot.node)  # type: ignore[arg-type]
            slot.ref, slot.planned = None, None
            self._close(record)
        return len(busy)

    def loop(self) -> None:
        self.slots = [self._new_slot() for _ in range(self.spec.workers)]
        while True:
            self.place()
            self.fill()  # first: a worker the last collect freed gets its next trial before the progress queries
            self.console.progress(self.progress())
            busy = {s.ref: s for s in self.slots if s.ref is not None}
            unplaced = [s.node_ref for s in self.slots if s.node is None]
            if not busy and (self.stopped_for_time or not (unplaced and self.core.has_next(in_flight=0))):
                return
            ready, _ = ray.wait([*busy, *unplaced], num_returns=1, timeout=_WAIT_S)
            for ref in ready:
                if ref in busy:
                    self.collect(busy[ref])

    def shutdown(self) -> None:
        for slot in self.slots:
            ray.kill(slot.actor, no_restart=True)
        self.slots = []


def run_study(
    spec: StudySpec, storage: Storage, *, console: SweepConsole, run_dir: Path, time_limit_s: float | None = None
) -> StudyResult:
    """Run (or resume) a study to its budget in the current Ray session; with ``time_limit_s``, start
    no trial that the mean trial so far says would end after it (in-flight trials finish).

    Raises KeyboardInterrupt after a clean stop when interrupted; ClusterError when no node can
    host a worker; BaselineFailed when a ratio gate lost its baseline; WorkerSetupFailed when a
    worker cannot start.
    """
    # Before anything else: what a stopped driver left on disk must not keep a secret while this one runs.
    scrubbed = scrub_unfinished_logs(
        run_dir, spec.name, storage, Scrubber.for_stack(spec.manifest.env, spec.manifest.serve)
    )
    check_capacity(spec.resources)
    driver = _Driver(spec, storage, console=console, run_dir=run_dir, time_limit_s=time_limit_s)
    console.begin(
        study=spec.name,
        manifest=spec.manifest.label,
        gate=spec.gate.describe(),
        budget=spec.n_trials,
        workers=spec.workers,
        db=shown_url(storage.url),
        fidelity=spec.fidelity.describe(),
    )
    if scrubbed:
        console.note(f"  scrubbed {len(scrubbed)} boot log(s) an earlier run did not see finish")
    try:
        for record in driver.core.reconcile():
            console.note(f"  trial {record.trial_number}: closed, left running by an earlier driver")
        driver.core.ensure_baseline()
        try:
            driver.loop()
            converged = driver.core.converged()
            if converged is not None:  # budget left, but nothing new to boot
                console.note(f"stopped: {converged}")
        except KeyboardInterrupt:
            closed = driver.interrupt("interrupted by the user (Ctrl-C)")
            console.end()
            console.note(f"interrupted: {closed} in-flight trial(s) closed and re-queued, engines stopped")
            raise
        except SweepStopped as exc:
            driver.interrupt(f"the sweep stopped: {exc}")
            raise
        finally:
            driver.shutdown()
    finally:
        console.end()
    records = storage.records(spec.name)
    return StudyResult(
        progress=driver.progress(),
        records=records,
        front=front_records(records),
        stopped_for_time=driver.stopped_for_time,
    )
