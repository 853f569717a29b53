"""The ask/tell core: one study policy for the live driver, the dry run and the replay benchmark.

No Ray and no database of its own: an Optuna study on the caller's Optuna storage (in memory by
default) and a record book (``RecordBook``: the driver's ``sweep.store.StudyRecords``, or
``MemoryRecords``). This module is the only one that creates, enqueues into and tells the study.

Call order::

    core = StudyCore(spec, records, storage=...)  # open or resume; refuses a study stored under
                                                  # this name that was measured another way
    core.reconcile()          # close what a dead driver left RUNNING
    core.ensure_baseline()    # the manifest as it is, trial 0
    while core.has_next(in_flight=...):
        planned = core.ask()                      # PlannedTrial: number, knobs, effective knobs
        record = ...                              # run it: core.outcome_record / core.failed
        core.close(record)                        # store, re-queue by the rules, tell

``close`` writes the record before it tells Optuna, and each step can be redone from the record
alone, so ``reconcile`` at the next start heals a driver that died anywhere in between: a RUNNING
trial with a record is told from it; one without a record died with the driver and is lost.

Rules:
- A stack failure (``engine``) is a result: stored, told FAIL, never re-run. A configuration the
  sampler proposes again after it failed that way is not booted again (``skipped``).
- Nothing is measured twice by accident. A proposal whose effective knobs equal a finished trial's
  that booted is not booted: it is closed at once as a ``copy`` of it, told what it was told
  (values and constraints, so every COMPLETE trial carries the same constraints, as GP needs; PRUNED
  where it was pruned). A study with ``repeats = "allow"`` boots it again, recorded as a ``repeat``.
- The PPL memo: lossless knobs never move PPL (the registry's promise, which the identity check
  tests), so a proposal whose PPL-moving knobs equal those of a trial that measured over the gate
  (to the end, or stopped at the gate) is closed at once as a ``ppl_memo`` hit: told infeasible
  with that trial's figures (its TPS is that trial's: samplers need a value, and only GP reads an
  infeasible trial's). ``ppl_memo = false`` boots it. Identical knobs are a copy first, so under
  ``repeats = "allow"`` an infeasible configuration is a memo hit, never a repeat.
- A worker, node or driver lost mid-trial (``lost``): its knobs run once more; if the same knobs
  were lost before, the loss is their result.
- A trial the user interrupted (``interrupted``) is always re-queued.
- The budget counts trials that booted and ended for good: re-queued ones are replaced by their
  retry; those closed without a boot (skipped, copies, memo hits) cost no boot and do not count.
  A sampler that keeps proposing known points cannot loop forever on them: after ``CONVERGED_AFTER``
  proposals in a row closed without a boot, it has nothing new to try and the study ends
  (``converged`` says so).
- The baseline is judged first: a ``ppl_max_ratio`` gate and the identity check need it.
- Multi-fidelity (``sweep.search``): ``plan`` gives a trial its stopping rule, from the records
  so far (none for the baseline, or at full fidelity). A trial the front rule stopped is told
  PRUNED; one the PPL gate stopped is told its probe's values, infeasible. Both count against the
  budget; neither is ever a front point.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from engine.config import KNOBS, KnobValues
from engine.measurement import TrialOutcome
from engine.secrets import redact_manifest
from errors import BaselineFailed, StudyMismatchError
from sweep.judgement import over_gate
from sweep.search._fidelity import FidelityPlan, build_plan, full_plan
from sweep.search._sampling import make_sampler, sampler_exhausted, suggest_knobs
from sweep.search._spec import StudySpec
from sweep.store import (
    FailKind,
    Judge,
    StudyRecord,
    TrialMarks,
    TrialRecord,
    failure_record,
    outcome_record,
    read_record,
    reused_record,
    same_profile,
    trial_marks,
    write_record,
    write_trial_figures,
)

__all__ = ["CONVERGED_AFTER", "MemoryRecords", "PlannedTrial", "RecordBook", "StudyCore"]

DIRECTIONS: list[Literal["maximize", "minimize"]] = ["maximize", "minimize"]  # tps, ppl
DASHBOARD_CONSTRAINTS = "constraints"  # the system attribute optuna-dashboard reads (Optuna's old format)
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
# Proposals in a row closed without a boot after which the sampler has converged: one whose
# proposals were new one time in four would make 10 known ones in a row 6% of the time.
CONVERGED_AFTER = 10


class RecordBook(Protocol):
    """Where one study's trial records live; the core reads and appends, never rewrites."""

    def get(self, number: int) -> TrialRecord | None: ...  # with token ids (the identity check reads them)

    def add(self, record: TrialRecord) -> None: ...

    def all(self) -> list[TrialRecord]: ...  # by trial number; token ids may be left out


@dataclass
class MemoryRecords:
    """A record book in memory: the dry run's and the replay benchmark's."""

    rows: dict[int, TrialRecord] = field(default_factory=dict)

    def get(self, number: int) -> TrialRecord | None:
        return self.rows.get(number)

    def add(self, record: TrialRecord) -> None:
        self.rows[record.trial_number] = record

    def all(self) -> list[TrialRecord]:
        return [self.rows[n] for n in sorted(self.rows)]


@dataclass(frozen=True, kw_only=True)
class PlannedTrial:
    """A trial the core handed out: what it sets, and what that means for the whole stack."""

    number: int
    knobs: KnobValues  # what the trial sets: none for the baseline, else fixed + sampled
    effective: KnobValues  # every consumed knob's value: how trials are compared
    is_baseline: bool
    answer: TrialRecord | None = None  # set: closed without a boot (skipped, copy, PPL memo): close it, boot nothing
    repeat_of: int | None = None  # set: a deliberate repeat of this trial's knobs (``repeats = "allow"``)


class StudyCore:
    def __init__(
        self, spec: StudySpec, records: RecordBook, *, storage: optuna.storages.BaseStorage | None = None
    ) -> None:
        self.spec = spec
        self.records = records
        self._storage = storage if storage is not None else optuna.storages.InMemoryStorage()
        self.study = self._open()
        self._cache: list[TrialRecord] | None = None

    # --- opening -----------------------------------------------------------------------

    def _open(self) -> optuna.Study:
        spec = self.spec
        study = optuna.create_study(
            study_name=spec.name,
            storage=self._storage,
            directions=DIRECTIONS,
            sampler=make_sampler(spec),
            load_if_exists=True,
        )
        held = len(study.get_trials(deepcopy=False))
        if held:
            study.sampler = make_sampler(spec, resumed_trials=held)
        stored = read_record(study)
        manifest, profile = spec.manifest.name, asdict(spec.profile)
        if stored.manifest is not None and stored.manifest != manifest:
            raise _mismatch(spec.name, "manifest", stored.manifest, manifest)
        if stored.profile is not None and not same_profile(stored.profile, profile):
            raise _mismatch(spec.name, "profile", stored.profile, profile)
        record = StudyRecord(
            manifest=manifest,
            profile=stored.profile or profile,  # as first stored: a field added since reads as its default
            # what dashboards.export writes best/manifest.json from: the stack its trials ran
            manifest_json=stored.manifest_json or redact_manifest(spec.manifest.to_json_dict()),
            gate=spec.gate.describe(),
            # what its claims and verdicts are judged with, for readers that have no study spec (the dashboards)
            noise_floor=spec.promotion.noise_floor,
            target=spec.promotion.target,
            objectives=f"maximize {spec.objective}, minimize ppl",
            serving_slo=spec.serving,  # what the dashboards judge the load levels with
        )
        write_record(study, record)
        return study

    # --- reading ----------------------------------------------------------------------

    def all_records(self) -> list[TrialRecord]:
        """The study's records (token ids left out), cached until the next close."""
        if self._cache is None:
            self._cache = self.records.all()
        return self._cache

    def baseline_record(self) -> TrialRecord | None:
        """The measured baseline, token ids included."""
        row = next((r for r in self.all_records() if r.is_baseline and r.measured), None)
        return None if row is None else self.records.get(row.trial_number)

    def trials(self, *states: TrialState) -> list[FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=states or None)

    def budget_used(self) -> int:
        """Trials that booted and ended for good: finished, not replaced by a retry, not closed unbooted."""
        skip = self._retried() | {r.trial_number for r in self.all_records() if not r.booted}
        return sum(1 for t in self.trials(*_FINISHED) if t.number not in skip)

    def converged(self) -> str | None:
        """Why the sampler has nothing new to try (its last proposals all closed without a boot); None
        while it has."""
        streak = 0
        for record in reversed(self.all_records()):
            if record.booted:
                break
            streak += 1
        if streak < CONVERGED_AFTER:
            return None
        return (
            f"the sampler converged: its last {streak} proposals were all configurations already measured or "
            "known to fail, closed without a boot"
        )

    def has_next(self, *, in_flight: int) -> bool:
        """Whether another trial may start now: a queued one, or budget, new proposals and grid left."""
        if self.trials(TrialState.WAITING):
            return True
        if self.budget_used() + in_flight >= self.spec.n_trials or self.converged() is not None:
            return False
        return not sampler_exhausted(self.study.sampler, self.study)

    def _retried(self) -> set[int]:
        return {n for t in self.trials() if (n := trial_marks(t).retry_of) is not None}

    # --- the baseline and asking --------------------------------------------------------

    def ensure_baseline(self) -> None:
        """Queue the baseline unless it is measured, queued or running; raises BaselineFailed when
        it failed for good and the gate is relative to it."""
        if self.baseline_record() is not None:
            return
        if any(trial_marks(t).is_baseline for t in self.trials(TrialState.WAITING, TrialState.RUNNING)):
            return
        failed = [r for r in self.all_records() if r.is_baseline]
        if failed:
            if self.spec.gate.ppl_max_ratio is not None:
                raise BaselineFailed(
                    f"study {self.spec.name!r}: the baseline trial {failed[-1].trial_number} failed "
                    f"({failed[-1].reason}); the gate ppl_max_ratio needs its PPL. Fix the stack, then use "
                    "a new --storage or study name."
                )
            return  # an absolute gate needs no baseline; identity has nothing to compare with
        baseline = self.spec.baseline()
        self.study.enqueue_trial(
            {k: baseline[k] for k in self.spec.space}, user_attrs=TrialMarks(is_baseline=True).attrs()
        )

    def ask(self) -> PlannedTrial:
        """The next trial; one with an ``answer`` is closed without a boot, by the rules above."""
        trial = self.study.ask()
        is_baseline = trial_marks(trial).is_baseline
        knobs = suggest_knobs(trial, self.spec, baseline=is_baseline)
        planned = PlannedTrial(
            number=trial.number, knobs=knobs, effective=self.spec.effective(knobs), is_baseline=is_baseline
        )
        return planned if is_baseline else self._answered(planned)

    def _answered(self, planned: PlannedTrial) -> PlannedTrial:
        """``planned`` with its answer from the records, or marked a repeat; as it is when it must boot."""
        effective = dict(planned.effective)
        booted = [r for r in self.all_records() if r.booted and (r.measured or r.status == "pruned")]
        for r in self.all_records():
            if r.fail_kind == "engine" and r.knobs == effective:
                reason = f"not run again: trial {r.trial_number} with the same knobs failed: {r.reason}"
                return replace(planned, answer=self.failed(planned, kind="skipped", reason=reason))
        same = next((r for r in booted if r.knobs == effective), None)
        if same is not None and self.spec.repeats == "copy":
            told = "PRUNED" if same.status == "pruned" else f"TPS {same.tps:.2f}, PPL {same.ppl:.4f}"
            reason = f"the same knobs as trial {same.trial_number}: told what it was told ({told})"
            return replace(
                planned, answer=reused_record(same, number=planned.number, knobs=effective, reuse="copy", reason=reason)
            )
        memo = self._ppl_memo(effective, booted) if self.spec.ppl_memo else None
        if memo is not None:
            source, gate = memo
            moving = " ".join(f"{k}={v}" for k, v in _ppl_moving(effective).items()) or "none"
            reason = (
                f"PPL memo: trial {source.trial_number}, with the same PPL-moving knobs ({moving}), measured PPL "
                f"{source.ppl:.4f} over the gate {gate:.4f}: told infeasible; TPS not measured"
            )
            return replace(
                planned,
                answer=reused_record(source, number=planned.number, knobs=effective, reuse="ppl_memo", reason=reason),
            )
        return planned if same is None else replace(planned, repeat_of=same.trial_number)

    def _ppl_memo(self, effective: dict[str, Any], booted: list[TrialRecord]) -> tuple[TrialRecord, float] | None:
        """The first trial that measured these PPL-moving knobs' PPL over the gate, and the gate."""
        gate = Judge(self.spec.gate, self.spec.identity_required, self.baseline_record()).gate_ppl
        if gate is None:
            return None
        moving = _ppl_moving(effective)
        # a measured record has its PPL: the None test only tells the type checker so
        source = next(
            (
                r
                for r in booted
                if r.measured and r.ppl is not None and _ppl_moving(r.knobs) == moving and over_gate(r.ppl, gate)
            ),
            None,
        )
        return None if source is None else (source, gate)

    def plan(self, planned: PlannedTrial) -> FidelityPlan:
        """The multi-fidelity rule the trial runs under (``sweep.search``), from the records so far."""
        fidelity = self.spec.fidelity
        if fidelity.mode == "full":
            return full_plan(fidelity.why_full or "the study's choice")
        if planned.is_baseline:
            return full_plan("the baseline: the gate and the front rule learn from it")
        judge = Judge(self.spec.gate, self.spec.identity_required, self.baseline_record())
        return build_plan(fidelity, self.spec.profile, gate=judge.gate_ppl, records=self.all_records())

    # --- records ----------------------------------------------------------------------

    def outcome_record(self, planned: PlannedTrial, outcome: TrialOutcome) -> TrialRecord:
        """A worker's outcome, judged against the gate and the baseline."""
        record = outcome_record(
            outcome,
            study_name=self.spec.name,
            number=planned.number,
            is_baseline=planned.is_baseline,
            profile=asdict(self.spec.profile),
        )
        if planned.repeat_of is not None:
            record.reuse, record.source = "repeat", planned.repeat_of
        return self.judge(record)

    def judge(self, record: TrialRecord) -> TrialRecord:
        return Judge(self.spec.gate, self.spec.identity_required, self.baseline_record()).judge(record)

    def failed(
        self, planned: PlannedTrial, *, kind: FailKind, reason: str, node: dict[str, Any] | None = None
    ) -> TrialRecord:
        record = failure_record(
            study_name=self.spec.name,
            number=planned.number,
            knobs=planned.effective,
            is_baseline=planned.is_baseline,
            kind=kind,
            reason=reason,
            profile=asdict(self.spec.profile),
            node=node,
        )
        if planned.repeat_of is not None:
            record.reuse, record.source = "repeat", planned.repeat_of
        return record

    # --- closing ----------------------------------------------------------------------

    def close(self, record: TrialRecord) -> bool:
        """Store, re-queue if due, tell. Idempotent per trial. Returns whether it was re-queued."""
        stored = self.records.get(record.trial_number)
        if stored is None:
            self.records.add(record)
        else:  # written by a driver that died before telling: the stored row is the truth
            record = stored
        self._cache = None
        frozen = self._storage.get_trial(self._trial_id(record.trial_number))
        requeued = self._should_requeue(record)
        if requeued and record.trial_number not in self._retried():
            marks = TrialMarks(is_baseline=record.is_baseline, retry_of=record.trial_number)
            self.study.enqueue_trial(dict(frozen.params), user_attrs=marks.attrs())
        if frozen.state == TrialState.RUNNING:
            self._tell(record)
        return requeued

    def _should_requeue(self, record: TrialRecord) -> bool:
        if record.fail_kind == "interrupted":
            return True
        if record.fail_kind != "lost":
            return False
        return not any(
            r.fail_kind == "lost" and r.knobs == record.knobs and r.trial_number != record.trial_number
            for r in self.all_records()
        )

    def _trial_id(self, number: int) -> int:
        study_id = self._storage.get_study_id_from_name(self.spec.name)
        return self._storage.get_trial_id_from_study_id_trial_number(study_id, number)

    def _tell(self, record: TrialRecord) -> None:
        trial = optuna.Trial(self.study, self._trial_id(record.trial_number))
        write_trial_figures(trial, record)
        if record.status == "pruned":  # the front rule stopped it: Optuna's own word for that
            self.study.tell(trial, state=TrialState.PRUNED)
            return
        if not record.measured:
            self.study.tell(trial, state=TrialState.FAIL)
            return
        constraints = record.constraints(
            identity_required=self.spec.identity_required,
            slo=self.spec.serving,
            length_bucket=self.spec.gate.length_bucket,
        )
        for key, value in constraints.items():
            trial.set_constraint(key, value)
        # optuna-dashboard 0.21 reads a trial's feasibility from the older list attribute only:
        # without it, its own Pareto view draws a trial over the gate as feasible. (Optuna reads the
        # list too, as constraints "0", "1", ...: the same values again, so the same feasibility.)
        self._storage.set_trial_system_attr(
            self._trial_id(record.trial_number), DASHBOARD_CONSTRAINTS, list(constraints.values())
        )
        assert record.tps is not None and record.ppl is not None  # measured, above
        self.study.tell(trial, [self._objective(record), record.ppl])

    def _objective(self, record: TrialRecord) -> float:
        """The value maximised beside PPL: the TPS, or a serving study's goodput (0 for a trial with no load run)."""
        if self.spec.serving is None:
            assert record.tps is not None
            return record.tps
        served = record.served(self.spec.serving)
        return served.goodput if served is not None else 0.0

    def reconcile(self) -> list[TrialRecord]:
        """Close the trials a dead driver left RUNNING; returns the records it closed."""
        closed = []
        for trial in self.trials(TrialState.RUNNING):
            record = self.records.get(trial.number)
            if record is None:
                drawn = set(trial.params) == set(self.spec.space)
                is_baseline = trial_marks(trial).is_baseline
                knobs = (
                    self.spec.baseline()
                    if is_baseline
                    else self.spec.effective(self.spec.trial_knobs(dict(trial.params)))
                )
                record = failure_record(
                    study_name=self.spec.name,
                    number=trial.number,
                    knobs=knobs,
                    is_baseline=is_baseline,
                    # A trial closed before its knobs were all drawn never ran: nothing to re-run.
                    kind="lost" if drawn else "skipped",
                    reason="the driver stopped before the trial finished"
                    if drawn
                    else "the driver stopped before the trial was dispatched",
                    profile=asdict(self.spec.profile),
                )
            self.close(record)
            closed.append(record)
        return closed


def _mismatch(study: str, key: str, stored: Any, value: Any) -> StudyMismatchError:
    return StudyMismatchError(
        f"study {study!r} was measured with {key} {stored!r}; this run asks for {value!r}, which would mix "
        "incomparable measurements. Use another --storage, or rename the study (its `name` field)."
    )


def _ppl_moving(knobs: dict[str, Any]) -> dict[str, Any]:
    """The values of the knobs that may move PPL: every knob the registry does not call lossless."""
    return {k: v for k, v in sorted(knobs.items()) if not (k in KNOBS and KNOBS[k].lossless)}
