"""The ask/tell loop: the only writer of the study, keeping one trial in flight per worker.

Call order of ``run_study``: open (or resume) the Optuna study, reconcile what a dead driver
left RUNNING (``sweep.ledger``), enqueue the baseline unless measured, start the workers, then
loop: fill idle workers with trials from Optuna, ``ray.wait`` for the next outcome, close it
(row, re-queue, tell). The baseline runs alone first: the ``ppl_max_ratio`` gate and the greedy
identity check both need it. A lost worker is replaced by a fresh actor. Ctrl-C stops the
engines, closes the in-flight trials as interrupted (re-queued for the next run) and re-raises.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
import ray
from optuna.trial import TrialState

from engine.errors import ConfigError, GemmaSweepError
from engine.measurement import TrialOutcome
from sweep import ledger
from sweep.cluster import check_capacity
from sweep.console import Progress, SweepConsole, front_records
from sweep.sampling import make_sampler, sampler_exhausted, suggest_knobs
from sweep.spec import StudySpec
from sweep.storage import MeasurementRecord, Storage
from sweep.worker import TrialWorker, actor_options

__all__ = ["BaselineFailed", "StudyResult", "SweepStopped", "WorkerSetupFailed", "run_study"]

_WAIT_S = 0.5
_STOP_ENGINES_S = 30.0
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class SweepStopped(GemmaSweepError):
    """The study cannot go on; what was measured is stored and the same command resumes."""


class BaselineFailed(SweepStopped):
    """The baseline trial failed for good, and the gate is relative to it."""


class WorkerSetupFailed(SweepStopped):
    """A worker could not even start (its constructor failed): every trial would fail the same way."""


def _error_text(exc: BaseException) -> str:
    """A Ray error in one line: its first line and its last (where Ray puts the cause)."""
    lines = [line.strip() for line in _ANSI.sub("", str(exc)).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= 400 else text[:397] + "..."


@dataclass
class StudyResult:
    progress: Progress
    records: list[MeasurementRecord]
    front: list[MeasurementRecord]


@dataclass
class _Slot:
    """One worker and the trial it runs, if any."""

    actor: Any
    number: int | None = None
    knobs: dict[str, int] = field(default_factory=dict)
    is_baseline: bool = False
    ref: Any = None
    started: float = 0.0
    node: dict[str, Any] = field(default_factory=dict)
    node_ref: Any = None


def _open_study(spec: StudySpec, storage: Storage) -> optuna.Study:
    study = optuna.create_study(
        study_name=spec.name,
        storage=storage.optuna,
        directions=["maximize", "minimize"],
        sampler=make_sampler(spec),
        load_if_exists=True,
    )
    held = len(study.get_trials(deepcopy=False))
    if held:
        study.sampler = make_sampler(spec, resumed_trials=held)
    identity = {"manifest": spec.manifest.name, "profile": asdict(spec.profile)}
    for key, value in identity.items():
        stored = study.user_attrs.get(key)
        if stored is None:
            study.set_user_attr(key, value)
        elif stored != value:
            raise ConfigError(
                f"study {spec.name!r} in {storage.url} was measured with {key} {stored!r}; this run "
                f"asks for {value!r}, which would mix incomparable measurements. Use another "
                "--storage, or rename the study (its `name` field)."
            )
    study.set_user_attr("gate", spec.gate.describe())
    study.set_user_attr("objectives", "maximize tps, minimize ppl")
    return study


class _Driver:
    def __init__(self, spec: StudySpec, storage: Storage, *, console: SweepConsole, run_dir: Path) -> None:
        self.spec = spec
        self.storage = storage
        self.console = console
        self.run_dir = run_dir
        self.study = _open_study(spec, storage)
        self.slots: list[_Slot] = []
        self.began = time.monotonic()
        self.durations: list[float] = []
        self._records: list[MeasurementRecord] | None = None
        self._counted: tuple[int, int, list[MeasurementRecord]] | None = None

    # --- state read back from the database ----------------------------------------------

    def records(self) -> list[MeasurementRecord]:
        """The study's rows without token ids; cached between writes (this driver is their only writer)."""
        if self._records is None:
            self._records = self.storage.measurements(self.spec.name, token_ids=False)
        return self._records

    def baseline_record(self, records: list[MeasurementRecord]) -> MeasurementRecord | None:
        """The measured baseline, token ids included (the identity check compares them)."""
        row = next((r for r in records if r.is_baseline and r.status == "complete"), None)
        return None if row is None else self.storage.measurement(self.spec.name, row.trial_number)

    def _trials(self, *states: TrialState) -> list[optuna.trial.FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=states)

    def _baseline_pending(self) -> bool:
        return any(t.user_attrs.get("is_baseline") for t in self._trials(TrialState.WAITING, TrialState.RUNNING))

    def ensure_baseline(self) -> None:
        records = self.records()
        if self.baseline_record(records) is not None or self._baseline_pending():
            return
        if any(r.is_baseline for r in records):
            if self.spec.gate.ppl_max_ratio is not None:
                last = [r for r in records if r.is_baseline][-1]
                raise BaselineFailed(
                    f"study {self.spec.name!r}: the baseline trial {last.trial_number} failed "
                    f"({last.reason}); the gate ppl_max_ratio needs its PPL. Fix the stack, then use "
                    "a new --storage or study name."
                )
            return  # an absolute gate needs no baseline; identity has nothing to compare with
        self.study.enqueue_trial(
            {k: v for k, v in self.spec.baseline().items() if k in self.spec.space},
            user_attrs={"is_baseline": True},
        )

    # --- progress ---------------------------------------------------------------------

    def _counts(self) -> tuple[int, int, list[MeasurementRecord]]:
        """Budget used, complete trials, the front: recomputed only after a trial closes."""
        if self._counted is None:
            records = self.records()
            complete = sum(1 for t in self._trials(TrialState.COMPLETE))
            self._counted = (ledger.budget_used(self.study), complete, front_records(records))
        return self._counted

    def progress(self) -> Progress:
        used, complete, front = self._counts()
        running = sum(1 for s in self.slots if s.ref is not None)
        eta = None
        if self.durations:
            left = max(self.spec.n_trials - used, 0)
            eta = sum(self.durations) / len(self.durations) * left / max(len(self.slots), 1)
        return Progress(
            budget=self.spec.n_trials,
            done=used,
            complete=complete,
            failed=used - complete,
            running=running,
            best_tps=max((r.tps for r in front), default=None),  # type: ignore[type-var]
            front_size=len(front),
            elapsed_s=time.monotonic() - self.began,
            eta_s=eta,
        )

    # --- workers ----------------------------------------------------------------------

    def _new_slot(self) -> _Slot:
        actor = TrialWorker.options(**actor_options(self.spec.resources)).remote()
        return _Slot(actor=actor, node_ref=actor.node.remote())

    def _more_to_start(self) -> bool:
        sampler = self.study.sampler
        if self._trials(TrialState.WAITING):
            return True
        in_flight = sum(1 for s in self.slots if s.ref is not None)
        if self._counts()[0] + in_flight >= self.spec.n_trials:
            return False
        return not sampler_exhausted(sampler, self.study)

    def place(self) -> None:
        """Note the workers Ray has placed (each answers ``node()`` first); only those get trials.

        A worker Ray cannot place yet (the cluster is full) just waits: giving it a trial
        would leave that trial pending behind workers that never let go of their resources.
        """
        for slot in self.slots:
            if slot.node or not ray.wait([slot.node_ref], timeout=0)[0]:
                continue
            try:
                slot.node = ray.get(slot.node_ref)
            except ray.exceptions.RayActorError as exc:
                if exc.actor_init_failed:
                    raise WorkerSetupFailed(
                        f"a trial worker could not start on the Ray cluster ({_error_text(exc)}); every "
                        "node needs this project importable (pip install it there, or set PYTHONPATH)"
                    ) from None
                self._replace(slot)  # its node went away before it ran anything

    def fill(self) -> None:
        for slot in self.slots:
            while slot.node and slot.ref is None:
                if any(s.is_baseline and s.ref is not None for s in self.slots):
                    return  # the baseline runs alone: the others are judged against it
                if not self._more_to_start():
                    return
                self._start(slot)

    def _start(self, slot: _Slot) -> None:
        """Ask for a trial and run it on ``slot``, or close it at once if it must not boot."""
        trial = self.study.ask()
        is_baseline = bool(trial.user_attrs.get("is_baseline"))
        knobs = suggest_knobs(trial, self.spec, baseline=is_baseline)
        skip = None if is_baseline else ledger.skip_reason(self.spec.effective(knobs), self.records())
        if skip is not None:
            self._close(
                ledger.failure_record(
                    spec=self.spec, number=trial.number, knobs=knobs, is_baseline=False, kind="skipped", reason=skip
                )
            )
            return
        workdir = (self.run_dir / self.spec.name / f"trial-{trial.number:04d}").resolve()
        slot.number, slot.knobs, slot.is_baseline = trial.number, knobs, is_baseline
        slot.ref = slot.actor.run.remote(self.spec.manifest, knobs, self.spec.profile, workdir=str(workdir))
        slot.started = time.monotonic()
        self.console.started(trial.number, self.spec.effective(knobs), baseline=is_baseline)

    def _close(self, record: MeasurementRecord) -> None:
        self._records, self._counted = None, None
        requeued = ledger.close(self.study, self.storage, record, spec=self.spec)
        self.console.finished(record, requeued=requeued)

    def collect(self, slot: _Slot) -> None:
        number, knobs, is_baseline = slot.number, slot.knobs, slot.is_baseline
        assert number is not None
        try:
            outcome = TrialOutcome.from_dict(ray.get(slot.ref))
        except ray.exceptions.RayTaskError as exc:  # the trial code itself raised: a bug, not a loss
            record = ledger.failure_record(
                spec=self.spec, number=number, knobs=knobs, is_baseline=is_baseline, kind="engine",
                reason=f"the worker raised: {_error_text(exc)}", node=slot.node,
            )  # fmt: skip
        except ray.exceptions.RayError as exc:  # actor died, node died, object lost
            node = slot.node
            where = f" on node {node['node_id']}" if node.get("node_id") else ""
            record = ledger.failure_record(
                spec=self.spec, number=number, knobs=knobs, is_baseline=is_baseline, kind="lost",
                reason=f"worker lost mid-trial{where}: {type(exc).__name__}: {_error_text(exc)}", node=node,
            )  # fmt: skip
            self._replace(slot)
        else:
            judge = ledger.Judge(self.spec, self.baseline_record(self.records()))
            record = ledger.outcome_record(
                outcome, spec=self.spec, number=number, knobs=knobs, is_baseline=is_baseline, judge=judge
            )
            self.durations.append(time.monotonic() - slot.started)
        slot.ref, slot.number, slot.knobs, slot.is_baseline = None, None, {}, False
        self._close(record)
        if is_baseline and record.status != "complete":
            self.ensure_baseline()  # re-queued, or failed for good (raises for a ratio gate)

    def _replace(self, slot: _Slot) -> None:
        ray.kill(slot.actor, no_restart=True)
        fresh = self._new_slot()
        slot.actor, slot.node, slot.node_ref = fresh.actor, {}, fresh.node_ref

    def interrupt(self, reason: str) -> int:
        """Stop the engines, close in-flight trials as interrupted (re-queued). Returns how many."""
        busy = [s for s in self.slots if s.ref is not None]
        stops = [s.actor.stop_engines.remote() for s in busy]
        if stops:
            ray.wait(stops, num_returns=len(stops), timeout=_STOP_ENGINES_S)
        for slot in self.slots:
            ray.kill(slot.actor, no_restart=True)
        for slot in busy:
            record = ledger.failure_record(
                spec=self.spec, number=slot.number, knobs=slot.knobs, is_baseline=slot.is_baseline,  # type: ignore[arg-type]
                kind="interrupted", reason=reason, node=slot.node,
            )  # fmt: skip
            slot.ref = None
            self._close(record)
        return len(busy)

    def loop(self) -> None:
        self.slots = [self._new_slot() for _ in range(self.spec.workers)]
        while True:
            self.place()
            self.fill()  # first: a worker the last collect freed gets its next trial before the progress queries
            self.console.progress(self.progress())
            busy = {s.ref: s for s in self.slots if s.ref is not None}
            unplaced = [s.node_ref for s in self.slots if not s.node]
            if not busy and not (unplaced and self._more_to_start()):
                return
            ready, _ = ray.wait([*busy, *unplaced], num_returns=1, timeout=_WAIT_S)
            for ref in ready:
                if ref in busy:
                    self.collect(busy[ref])

    def shutdown(self) -> None:
        for slot in self.slots:
            ray.kill(slot.actor, no_restart=True)
        self.slots = []


def run_study(spec: StudySpec, storage: Storage, *, console: SweepConsole, run_dir: Path) -> StudyResult:
    """Run (or resume) a study to its budget in the current Ray session.

    Raises KeyboardInterrupt after a clean stop when interrupted; ConfigError when no node can
    host a worker; BaselineFailed when a ratio gate lost its baseline.
    """
    check_capacity(spec.resources)
    driver = _Driver(spec, storage, console=console, run_dir=run_dir)
    console.begin(
        study=spec.name, manifest=spec.manifest.label, gate=spec.gate.describe(),
        budget=spec.n_trials, workers=spec.workers, db=storage.url,
    )  # fmt: skip
    try:
        for record in ledger.reconcile(driver.study, storage, spec):
            console.note(f"  trial {record.trial_number}: closed, left running by an earlier driver")
        driver.ensure_baseline()
        try:
            driver.loop()
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
    records = storage.measurements(spec.name)
    return StudyResult(progress=driver.progress(), records=records, front=front_records(records))
