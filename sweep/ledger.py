"""The driver's bookkeeping: outcome -> stored row -> Optuna, and the rules that keep it honest.

Order for every finished trial (``close``): write the measurement row, re-queue its knobs if the
rules say so, then tell Optuna. Each step can be redone from the row alone, so ``reconcile`` at
the next start heals a driver that died anywhere in between: a RUNNING trial with a row is told
from it; one without a row died with the driver and is closed as lost. Rows are keyed by
(study, trial number), so nothing is ever stored twice.

Rules:
- A stack failure (``engine``) is a result: stored, told FAIL, never re-run. A config the
  sampler proposes again after it failed that way is not booted again (``skipped``).
- A worker, node or driver lost mid-trial (``lost``): its knobs run once more; if the same knobs
  were lost before, the loss is their result.
- A trial the user interrupted (``interrupted``) is always re-queued.
- The budget counts trials that ended for good: re-queued ones are replaced by their retry.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from engine.measurement import TrialOutcome
from sweep.identity import differing_prompts, identity_comparable
from sweep.spec import StudySpec
from sweep.storage import FailKind, MeasurementRecord, Storage

__all__ = [
    "Judge",
    "budget_used",
    "close",
    "constraints",
    "failure_record",
    "outcome_record",
    "reconcile",
    "skip_reason",
    "trial_knobs",
]

GATE_CONSTRAINT = "ppl_gate"  # ppl - gate: feasible when <= 0
IDENTITY_CONSTRAINT = "greedy_identity"  # differing prompts: feasible when 0


@dataclass(frozen=True)
class Judge:
    """What a trial is judged against: the gate's PPL and the baseline trial's row."""

    spec: StudySpec
    baseline: MeasurementRecord | None

    @property
    def gate(self) -> float | None:
        return self.spec.gate.resolve(self.baseline.ppl if self.baseline else None)

    def identity_diff(self, record: MeasurementRecord) -> int | None:
        base = self.baseline
        if (
            base is None
            or record.is_baseline
            or record.profile != base.profile  # other prompts or lengths: nothing to compare
            or not identity_comparable(record.knobs, base.knobs)
        ):
            return None
        if record.token_ids and base.token_ids:
            return differing_prompts(record.token_ids, base.token_ids)
        hashes = [(r.measurement or {}).get("output_text_sha256") for r in (record, base)]
        if all(hashes):  # a stack that returns no token ids: compare the answers' texts
            return differing_prompts(hashes[0], hashes[1])  # type: ignore[arg-type]
        return None

    def complete(self, record: MeasurementRecord) -> MeasurementRecord:
        """Fill the gate, identity and feasibility of a measured row."""
        gate = self.spec.gate.resolve(record.ppl) if record.is_baseline and self.baseline is None else self.gate
        record.gate = gate
        record.identity_diff_prompts = self.identity_diff(record)
        identity_ok = not self.spec.identity_required or not record.identity_diff_prompts
        record.feasible = gate is not None and record.ppl <= gate and identity_ok  # type: ignore[operator]
        return record


def trial_knobs(trial: FrozenTrial | optuna.Trial, spec: StudySpec) -> dict[str, int]:
    """The knobs a trial set (as ``sampling.suggest_knobs`` gave them), from its Optuna record."""
    if trial.user_attrs.get("is_baseline"):
        return {}
    return {**spec.fixed, **{k: int(v) for k, v in trial.params.items()}}


def outcome_record(
    outcome: TrialOutcome, *, spec: StudySpec, number: int, knobs: dict[str, int], is_baseline: bool, judge: Judge
) -> MeasurementRecord:
    m = outcome.measurement
    record = MeasurementRecord(
        study_name=spec.name,
        trial_number=number,
        status=outcome.status,
        knobs=spec.effective(knobs),
        argv=list(outcome.argv),
        env=dict(outcome.env),
        node=dict(outcome.node),
        profile=asdict(spec.profile),
        timings=dict(outcome.timings_s),
        log_tail=outcome.log_tail,
        is_baseline=is_baseline,
    )
    if outcome.status != "complete" or m is None:
        record.status = "failed"
        record.fail_kind = "engine"
        record.reason = outcome.reason or "the trial returned no measurement"
        return record
    metrics = m.to_dict()
    record.token_ids = metrics.pop("output_token_ids") or None
    record.measurement = metrics
    record.tps, record.ppl = m.tps, m.ppl
    record.ppl_mean_record, record.acceptance_rate = m.ppl_mean_record, m.acceptance_rate
    return judge.complete(record)


def failure_record(
    *,
    spec: StudySpec,
    number: int,
    knobs: dict[str, int],
    is_baseline: bool,
    kind: FailKind,
    reason: str,
    node: dict[str, Any] | None = None,
) -> MeasurementRecord:
    return MeasurementRecord(
        study_name=spec.name,
        trial_number=number,
        status="failed",
        fail_kind=kind,
        reason=reason,
        knobs=spec.effective(knobs),
        is_baseline=is_baseline,
        node=node or {},
        profile=asdict(spec.profile),
    )


def skip_reason(knobs: dict[str, int], records: Iterable[MeasurementRecord]) -> str | None:
    """Why these (effective) knobs must not boot again: a trial with them failed because of the stack."""
    for r in records:
        if r.fail_kind == "engine" and r.knobs == knobs:
            return f"not run again: trial {r.trial_number} with the same knobs failed: {r.reason}"
    return None


def _should_requeue(record: MeasurementRecord, records: Iterable[MeasurementRecord]) -> bool:
    if record.fail_kind == "interrupted":
        return True
    if record.fail_kind != "lost":
        return False
    return not any(
        r.fail_kind == "lost" and r.knobs == record.knobs and r.trial_number != record.trial_number
        for r in records
    )


def _retried(study: optuna.Study) -> set[int]:
    return {t.user_attrs["retry_of"] for t in study.get_trials(deepcopy=False) if "retry_of" in t.user_attrs}


def close(study: optuna.Study, storage: Storage, record: MeasurementRecord, *, spec: StudySpec) -> bool:
    """Store, re-queue if due, tell. Idempotent per trial. Returns whether it was re-queued."""
    if storage.measurement(record.study_name, record.trial_number) is None:
        storage.insert_measurement(record)
    else:  # written by a driver that died before telling: the stored row is the truth
        record = storage.measurement(record.study_name, record.trial_number)  # type: ignore[assignment]
    frozen = storage.optuna.get_trial(_trial_id(study, storage, record.trial_number))
    requeued = _should_requeue(record, storage.measurements(record.study_name, token_ids=False))
    if requeued and record.trial_number not in _retried(study):
        study.enqueue_trial(
            dict(frozen.params),
            user_attrs={"retry_of": record.trial_number, "is_baseline": record.is_baseline},
        )
    if frozen.state == TrialState.RUNNING:
        _tell(study, storage, record, identity_required=spec.identity_required)
    return requeued


def _trial_id(study: optuna.Study, storage: Storage, number: int) -> int:
    study_id = storage.optuna.get_study_id_from_name(study.study_name)
    return storage.optuna.get_trial_id_from_study_id_trial_number(study_id, number)


def _tell(study: optuna.Study, storage: Storage, record: MeasurementRecord, *, identity_required: bool) -> None:
    trial = optuna.Trial(study, _trial_id(study, storage, record.trial_number))
    attrs: dict[str, Any] = {
        "is_baseline": record.is_baseline,
        "measurement_id": record.id,
        "node_id": record.node.get("node_id"),
        "feasible": bool(record.feasible),
    }
    if record.status == "complete":
        attrs.update(
            tps=record.tps,
            ppl=record.ppl,
            ppl_mean_record=record.ppl_mean_record,
            acceptance_rate=record.acceptance_rate,
            tps_cv=(record.measurement or {}).get("tps_cv"),
            identity_diff_prompts=record.identity_diff_prompts,
            gate=record.gate,
        )
    else:
        attrs.update(fail_reason=record.reason, fail_kind=record.fail_kind)
    for key, value in attrs.items():
        if value is not None:
            trial.set_user_attr(key, value)
    if record.status != "complete":
        study.tell(trial, state=TrialState.FAIL)
        return
    for key, value in constraints(record, identity_required=identity_required).items():
        trial.set_constraint(key, value)
    study.tell(trial, [record.tps, record.ppl])


def constraints(record: MeasurementRecord, *, identity_required: bool) -> dict[str, float]:
    """The constraint values a judged, complete row is told with: feasible when all are <= 0."""
    values = {}
    if record.gate is not None:
        values[GATE_CONSTRAINT] = record.ppl - record.gate  # type: ignore[operator]
    if identity_required:
        # Every trial gets the same constraints (Optuna's GP sampler refuses a study whose trials
        # differ in count): the baseline, and a trial of a knob allowed to change the output, have
        # nothing to differ from, so 0. Without identity_required a differing trial is flagged
        # (its attribute), not excluded.
        values[IDENTITY_CONSTRAINT] = float(record.identity_diff_prompts or 0)
    return values


def reconcile(study: optuna.Study, storage: Storage, spec: StudySpec) -> list[MeasurementRecord]:
    """Close the trials a dead driver left RUNNING; returns the rows it closed."""
    closed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        record = storage.measurement(spec.name, trial.number)
        if record is None:
            complete_params = set(trial.params) == set(spec.space)
            record = failure_record(
                spec=spec,
                number=trial.number,
                knobs=trial_knobs(trial, spec) if complete_params else dict(trial.params),
                is_baseline=bool(trial.user_attrs.get("is_baseline")),
                # A trial closed before its knobs were all drawn never ran: nothing to re-run.
                kind="lost" if complete_params else "skipped",
                reason="the driver stopped before the trial finished"
                if complete_params
                else "the driver stopped before the trial was dispatched",
            )
        close(study, storage, record, spec=spec)
        closed.append(record)
    return closed


def budget_used(study: optuna.Study) -> int:
    """Trials that ended for good: finished, and not replaced by a retry."""
    retried = _retried(study)
    finished = (TrialState.COMPLETE, TrialState.FAIL)
    return sum(1 for t in study.get_trials(deepcopy=False, states=finished) if t.number not in retried)
