"""What the charts and tables show, computed apart from drawing them (and tested apart).

``load_study_data`` reads one study from the sweep's storage: Optuna's trials (state, knob
values, times), and the study's evidence as every reader sees it (``sweep.claims.load_evidence``:
each trial's ``TrialRecord``, the promotion's claims (a serving study's of goodput too, with the highest
load each promoted configuration holds), the latest verification verdicts, the noise). ``study_data``
builds the same thing from rows, which is what the figures and the CSV are drawn from. A row's figures
are its record's: nothing here re-derives a metric or feasibility.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import optuna

from errors import NoCompletedTrialsError
from sweep.claims import Claim, ServingClaim, StudyClaims, Verdict, held_loads, load_evidence
from sweep.judgement import MaxLoad, Noise, front_point, front_ties, pareto_front
from sweep.store import Storage, StudyRecord, TrialRecord

__all__ = ["StudyData", "TrialRow", "load_study_data", "require_measured", "study_data"]


@dataclass(frozen=True, kw_only=True)
class TrialRow:
    """One trial as the dashboards see it: Optuna's view of it, and its record (None while it has
    none: waiting or running)."""

    number: int
    state: str  # Optuna's state name: COMPLETE, FAIL, RUNNING, WAITING, PRUNED
    knobs: dict[str, Any]
    record: TrialRecord | None = None
    on_front: bool = False
    started: datetime | None = None
    finished: datetime | None = None
    verdict: Verdict | None = None
    claim: Claim | None = None  # its promotion's claim, where it was promoted
    # a serving study's: its claim of goodput (confirmed, else the screening's), and the highest load it holds
    serving_claim: ServingClaim | None = None
    held_load: MaxLoad | None = None
    tie: int | None = None  # on the front, tied with the other points of this number (``front_ties``)

    @property
    def measured(self) -> bool:
        """Measured by its own boot and told with values: to the end, or stopped at the PPL gate after a
        TPS probe (a trial closed without a boot is ``reused``, not a measurement)."""
        return self.state == "COMPLETE" and self.record is not None and self.record.measured and not self.record.reused

    @property
    def reused(self) -> bool:
        """Closed without a boot (``sweep.search``): a copy of an earlier trial, or a PPL-memo hit."""
        return self.record is not None and self.record.reused

    @property
    def trial_number(self) -> int:
        """Its number, as a trial record names it (``sweep.judgement.Judged``)."""
        return self.number

    @property
    def full(self) -> bool:
        """Measured to the end: only these can be front points."""
        return self.record is not None and self.measured and self.record.full

    @property
    def pruned(self) -> bool:
        r = self.record
        return self.state == "PRUNED" and r is not None and r.measurement is not None and not r.reused

    @property
    def stopped(self) -> str | None:
        """How multi-fidelity stopped the trial ("gate", "front"); None when it ran to the end."""
        return self.record.stopped if self.record else None

    def metric(self, name: str) -> Any:
        """A field of the trial's measurement (``tps``, ``tps_cv``, ...); None where it has none."""
        return self.record.metric(name) if self.record else None

    @property
    def tps(self) -> float | None:
        return self.metric("tps")

    @property
    def ppl(self) -> float | None:
        return self.metric("ppl")

    @property
    def feasible(self) -> bool | None:
        return self.record.feasible if self.record else None

    @property
    def is_baseline(self) -> bool:
        return bool(self.record and self.record.is_baseline)

    @property
    def identity_diff_prompts(self) -> int | None:
        return self.record.identity_diff_prompts if self.record else None

    @property
    def fail_reason(self) -> str | None:
        return self.record.reason if self.record else None


def _front_order(t: TrialRow) -> tuple[float, float, int]:
    """Lowest PPL first, then the fastest: a front point was measured to the end, so it has both."""
    assert t.ppl is not None and t.tps is not None
    return t.ppl, -t.tps, t.number


@dataclass(frozen=True, kw_only=True)
class StudyData:
    study_name: str
    gate: float | None
    knob_names: tuple[str, ...]  # the knobs that vary between trials, in the order first seen
    trials: tuple[TrialRow, ...]
    stored: StudyRecord = field(default_factory=StudyRecord)  # what the study stores: manifest, profile, gate, ...
    claims: StudyClaims | None = None  # the latest promotion's
    noise: Noise | None = None  # how much one boot moves: what the front's ties are judged by

    @property
    def promoted(self) -> list[TrialRow]:
        return [t for t in self.trials if t.claim is not None]

    @property
    def measured(self) -> list[TrialRow]:
        return [t for t in self.trials if t.measured]

    @property
    def failed(self) -> list[TrialRow]:
        return [t for t in self.trials if t.state == "FAIL"]

    @property
    def pruned(self) -> list[TrialRow]:
        """Stopped by multi-fidelity's front rule, with the partial figures they had."""
        return [t for t in self.trials if t.pruned]

    @property
    def reused(self) -> list[TrialRow]:
        """Closed without a boot, told an earlier trial's figures: copies and PPL-memo hits."""
        return [t for t in self.trials if t.reused]

    @property
    def gate_stopped(self) -> list[TrialRow]:
        """Stopped at the PPL gate: their TPS is a probe over the first prompts."""
        return [t for t in self.trials if t.record is not None and t.measured and t.record.gate_stopped]

    @property
    def front(self) -> list[TrialRow]:
        """The feasible non-dominated trials, lowest PPL first (the order a step line needs)."""
        return sorted((t for t in self.trials if t.on_front), key=_front_order)

    @property
    def baseline(self) -> TrialRow | None:
        return next((t for t in self.trials if t.is_baseline and t.measured), None)


def study_data(
    *,
    study_name: str,
    trials: list[TrialRow],
    gate: float | None,
    verdicts: Mapping[int, Verdict] | None = None,
    stored: StudyRecord | None = None,
    claims: StudyClaims | None = None,
    noise: Noise | None = None,
) -> StudyData:
    """Mark the front (noise-aware with ``noise``: ties numbered) and attach verdicts and claims;
    ``trials`` come in with ``on_front`` unset."""
    verdicts = verdicts or {}
    by_claim = claims.best_claims() if claims else {}
    by_serving = claims.best_serving() if claims else {}
    held = held_loads(claims) if claims else {}
    exact = Noise(tps_sd=0.0, ppl_sd=0.0, basis="exact")
    points = [front_point(t, noise or exact) for t in trials if t.full]
    front = pareto_front(points)
    ties = {p.number: i for i, g in enumerate((g for g in front_ties(front) if len(g) > 1), start=1) for p in g}
    on_front = {p.number for p in front}
    rows = tuple(
        replace(
            t,
            on_front=t.number in on_front,
            verdict=verdicts.get(t.number),
            claim=by_claim.get(t.number),
            serving_claim=by_serving.get(t.number),
            held_load=held.get(t.number),
            tie=ties.get(t.number),
        )
        for t in sorted(trials, key=lambda t: t.number)
    )
    knob_names: list[str] = []
    for t in rows:
        knob_names.extend(k for k in t.knobs if k not in knob_names)
    varying = tuple(sorted(k for k in knob_names if len({repr(t.knobs.get(k)) for t in rows}) > 1))
    # The swept knobs first, in one order for every trial: hover texts and tables line up.
    order = [*varying, *(k for k in knob_names if k not in varying)]
    rows = tuple(replace(t, knobs={k: t.knobs[k] for k in order if k in t.knobs}) for t in rows)
    return StudyData(
        study_name=study_name,
        gate=gate,
        knob_names=varying,
        trials=rows,
        stored=stored or StudyRecord(),
        claims=claims,
        noise=noise,
    )


def load_study_data(storage: Storage, study_name: str) -> StudyData:
    evidence = load_evidence(storage, study_name)
    study = optuna.load_study(study_name=study_name, storage=storage.optuna)
    records = {r.trial_number: r for r in evidence.records}
    trials = [_row(t, records.get(t.number)) for t in study.get_trials(deepcopy=False)]
    return study_data(
        study_name=study_name,
        trials=trials,
        gate=_study_gate(records.values()),
        verdicts=evidence.verdicts,
        stored=evidence.stored,
        claims=evidence.claims,
        noise=evidence.noise,
    )


def _row(trial: optuna.trial.FrozenTrial, record: TrialRecord | None) -> TrialRow:
    knobs = {**(record.knobs if record else {}), **trial.params}  # the record's are the whole stack's
    return TrialRow(
        number=trial.number,
        state=trial.state.name,
        knobs=knobs,
        record=record,
        started=trial.datetime_start,
        finished=trial.datetime_complete,
    )


def require_measured(data: StudyData) -> StudyData:
    """The study, or a clear error when it has nothing to chart."""
    if not data.measured:
        states = sorted({t.state for t in data.trials})
        raise NoCompletedTrialsError(
            f"study {data.study_name!r} has no completed trials to chart "
            f"({len(data.trials)} trial(s), states: {states or 'none'})"
        )
    return data


def _study_gate(records: Iterable[TrialRecord]) -> float | None:
    """The gate the latest judged trial was held to (a ratio gate resolves at the baseline)."""
    judged = [r for r in records if r.gate is not None]
    return max(judged, key=lambda r: r.trial_number).gate if judged else None
