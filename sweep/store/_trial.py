"""One trial record, from the worker's outcome to the dashboards: ``TrialRecord`` and its judgement.

A record is what the driver stores for one trial attempt (one row of ``measurements``) and the
one source every reader derives from: the user attributes and constraints Optuna is told
(``optuna_attrs``, ``constraints``), the console's lines, the dashboards' rows and the CSV. Its
figures are the worker's typed ``Measurement``, kept whole. ``sweep.store.Judge`` adds the
judgement (``_judge``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from engine.config import KNOBS, BenchProfile, KnobValues
from engine.measurement import Measurement, TrialOutcome
from sweep.judgement import FRONT_STOP, Served, Slo, judge_serving

__all__ = [
    "GATE_CONSTRAINT",
    "IDENTITY_CONSTRAINT",
    "LENGTH_CONSTRAINT",
    "SLO_CONSTRAINT",
    "same_profile",
    "FailKind",
    "RecordStatus",
    "Reuse",
    "TrialRecord",
    "failure_record",
    "identity_comparable",
    "outcome_record",
    "reused_record",
]

GATE_CONSTRAINT = "ppl_gate"  # ppl - gate: feasible when <= 0
IDENTITY_CONSTRAINT = "greedy_identity"  # differing prompts: feasible when 0
LENGTH_CONSTRAINT = "length_gate"  # a gated length bucket's PPL - its limit: feasible when <= 0
SLO_CONSTRAINT = "serving_slo"  # a serving study's: the best level's percentile / bound - 1, feasible when <= 0

# complete: measured (to the end, or stopped by the PPL gate with its TPS probe: measurement.stopped)
# pruned:   stopped by the front rule of multi-fidelity (sweep.search); its partial figures kept
# failed:   no measurement (fail_kind says why)
RecordStatus = Literal["complete", "pruned", "failed"]
# Why a trial failed, as the retry rules of ``sweep.search`` see it:
#   engine       the stack misbehaved (boot, crash, timeout, bad answers): a result, not retried
#   lost         the worker or its node died mid-trial, or the driver died with the trial
#                RUNNING (found so at the next start): re-run once
#   interrupted  the user stopped the driver (Ctrl-C, SIGTERM): always re-run
#   skipped      not booted: the same knobs already failed because of the stack
FailKind = Literal["engine", "lost", "interrupted", "skipped"]
# How a trial stands to an earlier one (``source``), by the no-double-measurement rules of ``sweep.search``:
#   copy      not booted: the same effective knobs as ``source``, told what it was told
#   ppl_memo  not booted: the same PPL-moving (non-lossless) knobs as ``source``, whose PPL measured
#             over the gate; told infeasible with ``source``'s figures (its TPS is not this trial's own)
#   repeat    booted on purpose (the study's ``repeats = "allow"``): ``source``'s knobs measured again
Reuse = Literal["copy", "ppl_memo", "repeat"]


@dataclass(kw_only=True)
class TrialRecord:
    """One trial attempt as the driver stores it and every reader gets it back."""

    study_name: str
    trial_number: int
    status: RecordStatus
    knobs: dict[str, Any]  # every consumed knob's value, as the worker launched it
    is_baseline: bool = False
    fail_kind: FailKind | None = None
    reason: str | None = None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # redacted by the engine before it left the worker
    node: dict[str, Any] = field(default_factory=dict)  # node_id, hostname, accelerator_type, gpu ids
    profile: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    log_tail: str = ""
    measurement: Measurement | None = None  # complete trials only
    gate: float | None = None  # the PPL gate the trial was judged against
    length_gate: float | None = None  # the gated length bucket's PPL limit (sweep.judgement.Gate.length_bucket)
    feasible: bool | None = None  # Judge's verdict; None until judged (failed trials: False)
    identity_diff_prompts: int | None = None
    provenance: dict[str, Any] = field(default_factory=dict)  # engine.host.provenance; {} on rows stored before it
    reuse: Reuse | None = None
    source: int | None = None  # the earlier trial it copies or repeats
    id: int | None = None  # the row's id, once stored
    created_at: datetime | None = None

    @property
    def measured(self) -> bool:
        """Told to Optuna with its values: measured to the end, or gate-stopped (then infeasible)."""
        return self.status == "complete" and self.measurement is not None

    @property
    def reused(self) -> bool:
        """Closed without a boot, told what trial ``source`` was told: a copy or a PPL-memo hit."""
        return self.reuse in ("copy", "ppl_memo")

    @property
    def booted(self) -> bool:
        """Whether the trial started a stack (what the budget counts): neither reused nor skipped."""
        return not self.reused and self.fail_kind != "skipped"

    @property
    def full(self) -> bool:
        """Measured to the end by its own boot: what a front point, a verified point and the front
        rule's learning need (a copy would count its source twice)."""
        return self.measurement is not None and self.measured and self.measurement.full and not self.reused

    @property
    def gate_stopped(self) -> bool:
        """Stopped by the PPL gate after its own TPS probe: told with the probe's values, infeasible."""
        return self.measured and self.stopped is not None and not self.reused

    @property
    def stopped(self) -> str | None:
        """How multi-fidelity stopped the trial early ("gate", "front"), None when it did not."""
        return self.measurement.stopped if self.measurement else None

    @property
    def figures(self) -> Measurement:
        """The measurement of a measured record; raises ValueError for one that has none (a caller that did not
        check ``measured`` or ``full`` first)."""
        if self.measurement is None:
            raise ValueError(f"trial {self.trial_number} of study {self.study_name!r} has no measurement")
        return self.measurement

    @property
    def tps(self) -> float | None:
        return self.measurement.tps if self.measurement else None

    @property
    def ppl(self) -> float | None:
        return self.measurement.ppl if self.measurement else None

    def metric(self, name: str) -> Any:
        """A measurement field by name; None when the trial has no measurement."""
        return getattr(self.measurement, name) if self.measurement else None

    def optuna_attrs(self) -> dict[str, Any]:
        """The user attributes the trial is told with (what optuna-dashboard lists)."""
        attrs: dict[str, Any] = {
            "is_baseline": self.is_baseline,
            "measurement_id": self.id,
            "node_id": self.node.get("node_id"),
            "feasible": bool(self.feasible),
        }
        if self.measurement is not None:
            attrs.update(self.measurement.summary())
            attrs.update(identity_diff_prompts=self.identity_diff_prompts, gate=self.gate)
            if self.stopped:
                m = self.measurement
                attrs.update(
                    stopped=self.stopped,
                    stop_reason=m.stop_reason,
                    prompts_timed=f"{m.prompts_timed} of {m.num_prompts}",
                )
        else:
            attrs.update(fail_reason=self.reason, fail_kind=self.fail_kind)
        attrs.update(reuse=self.reuse, source_trial=self.source)
        return {key: value for key, value in attrs.items() if value is not None}

    def served(self, slo: Slo) -> Served | None:
        """A serving study's judgement of this record's load levels (sweep.judgement); None without any."""
        return judge_serving(self.measurement.load, slo) if self.measurement is not None else None

    def constraints(
        self, *, identity_required: bool, slo: Slo | None = None, length_bucket: int | None = None
    ) -> dict[str, float]:
        """The constraint values a judged, measured record is told with: feasible when all are <= 0.
        ``length_bucket``: the study gates the length bucket ending there (unmeasured, or its limit unknown: inf)."""
        values = {}
        if self.gate is not None:
            values[GATE_CONSTRAINT] = self.figures.ppl - self.gate
        if length_bucket is not None:
            bucket, limit = self.figures.length_bucket(length_bucket), self.length_gate
            values[LENGTH_CONSTRAINT] = math.inf if bucket is None or limit is None else bucket.ppl - limit
        if identity_required:
            # Every trial gets the same constraints (Optuna's GP sampler refuses a study whose trials
            # differ in count): the baseline, and a trial of a knob allowed to change the output,
            # have nothing to differ from, so 0. Without identity_required a differing trial is
            # flagged (its attribute), not excluded.
            values[IDENTITY_CONSTRAINT] = float(self.identity_diff_prompts or 0)
        if slo is not None:
            served = self.served(slo)
            values[SLO_CONSTRAINT] = served.excess if served is not None else math.inf
        return values


def same_profile(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two stored profiles are one: read back, a field added since a study began reads as its default (a
    stored dict that is no whole profile, compared as it stands)."""
    try:
        return BenchProfile.from_record(a) == BenchProfile.from_record(b)
    except TypeError:
        return a == b


def identity_comparable(knobs: dict[str, Any], baseline: dict[str, Any]) -> bool:
    """True when ``knobs`` differ from the baseline's only in lossless knobs (the registry's flag).

    A knob missing from ``knobs`` keeps the manifest's value, which is the baseline's.
    """
    changed = {k for k, v in knobs.items() if k not in baseline or baseline[k] != v}
    return all(k in KNOBS and KNOBS[k].lossless for k in changed)


def outcome_record(
    outcome: TrialOutcome, *, study_name: str, number: int, is_baseline: bool, profile: dict[str, Any]
) -> TrialRecord:
    """A worker's outcome as an (unjudged) record; an outcome without a measurement is a stack failure."""
    record = TrialRecord(
        study_name=study_name,
        trial_number=number,
        status="complete",
        knobs=dict(outcome.knobs),
        is_baseline=is_baseline,
        argv=list(outcome.argv),
        env=dict(outcome.env),
        node=dict(outcome.node),
        profile=profile,
        timings=dict(outcome.timings_s),
        log_tail=outcome.log_tail,
        measurement=outcome.measurement,
        provenance=dict(outcome.provenance),
    )
    if outcome.status != "complete" or outcome.measurement is None:
        record.status, record.fail_kind, record.measurement = "failed", "engine", None
        record.reason = outcome.reason or "the trial returned no measurement"
    elif outcome.measurement.stopped is not None:
        record.reason = outcome.measurement.stop_reason
        if outcome.measurement.stopped == FRONT_STOP:
            record.status = "pruned"
    return record


def failure_record(
    *,
    study_name: str,
    number: int,
    knobs: KnobValues | dict[str, Any],
    is_baseline: bool,
    kind: FailKind,
    reason: str,
    profile: dict[str, Any],
    node: dict[str, Any] | None = None,
) -> TrialRecord:
    """A trial that ended without an outcome (lost, interrupted, skipped, or the worker raised)."""
    return TrialRecord(
        study_name=study_name,
        trial_number=number,
        status="failed",
        fail_kind=kind,
        reason=reason,
        knobs=dict(knobs),
        is_baseline=is_baseline,
        node=node or {},
        profile=profile,
        feasible=False,
    )


def reused_record(
    source: TrialRecord,
    *,
    number: int,
    knobs: KnobValues | dict[str, Any],
    reuse: Literal["copy", "ppl_memo"],
    reason: str,
) -> TrialRecord:
    """A trial closed without a boot, told what ``source`` (a trial that booted) was told: its status,
    figures and judgement; a PPL-memo hit is infeasible whatever its source's identity check said."""
    memo = reuse == "ppl_memo"
    measurement = None if source.measurement is None else replace(source.measurement)
    return TrialRecord(
        study_name=source.study_name,
        trial_number=number,
        status=source.status,
        knobs=dict(knobs),
        reason=reason,
        profile=dict(source.profile),
        measurement=measurement,
        gate=source.gate,
        length_gate=source.length_gate,
        feasible=False if memo else source.feasible,
        identity_diff_prompts=None if memo else source.identity_diff_prompts,
        reuse=reuse,
        source=source.trial_number,
    )
