"""What the charts and tables show, computed apart from drawing them (and tested apart).

``load_study_data`` reads one study from the sweep's storage: Optuna's trials (knob values and
the user attrs the driver sets), the ``measurements`` rows (gate, every metric) and the latest
verification verdicts. ``study_data`` builds the same thing from plain rows, which is what the
figures and the CSV are drawn from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import optuna

from engine.errors import ConfigError
from sweep.pareto import FrontPoint, pareto_front
from sweep.storage import MeasurementRecord, Storage
from sweep.verification import Verdict, latest_verdicts

__all__ = [
    "NoCompletedTrialsError",
    "StudyData",
    "StudyNotFoundError",
    "TrialRow",
    "load_study_data",
    "require_measured",
    "study_data",
]


class StudyNotFoundError(ConfigError):
    pass


class NoCompletedTrialsError(ConfigError):
    pass


@dataclass(frozen=True, kw_only=True)
class TrialRow:
    """One trial as the dashboards see it; metrics are None where the trial has none."""

    number: int
    state: str  # Optuna's state name: COMPLETE, FAIL, RUNNING, WAITING, PRUNED
    knobs: dict[str, Any]
    tps: float | None = None
    ppl: float | None = None
    ppl_mean_record: float | None = None
    acceptance_rate: float | None = None
    tps_cv: float | None = None  # spread over the TPS repeats within the trial's boot
    feasible: bool | None = None
    is_baseline: bool = False
    on_front: bool = False
    identity_diff_prompts: int | None = None
    fail_reason: str | None = None
    node_id: str | None = None
    started: datetime | None = None
    finished: datetime | None = None
    verdict: Verdict | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # every other scalar: for the CSV

    @property
    def measured(self) -> bool:
        return self.state == "COMPLETE" and self.tps is not None and self.ppl is not None


@dataclass(frozen=True, kw_only=True)
class StudyData:
    study_name: str
    gate: float | None
    knob_names: tuple[str, ...]  # the knobs that vary between trials, in the order first seen
    trials: tuple[TrialRow, ...]

    @property
    def measured(self) -> list[TrialRow]:
        return [t for t in self.trials if t.measured]

    @property
    def failed(self) -> list[TrialRow]:
        return [t for t in self.trials if t.state == "FAIL"]

    @property
    def front(self) -> list[TrialRow]:
        """The feasible non-dominated trials, lowest PPL first (the order a step line needs)."""
        return sorted((t for t in self.trials if t.on_front), key=lambda t: (t.ppl, -t.tps, t.number))

    @property
    def baseline(self) -> TrialRow | None:
        return next((t for t in self.trials if t.is_baseline and t.measured), None)


def study_data(
    *, study_name: str, trials: list[TrialRow], gate: float | None, verdicts: Mapping[int, Verdict] | None = None
) -> StudyData:
    """Mark the front and attach verdicts; ``trials`` come in with ``on_front`` unset."""
    verdicts = verdicts or {}
    points = [
        FrontPoint(number=t.number, tps=t.tps, ppl=t.ppl, feasible=_feasible(t, gate))
        for t in trials
        if t.measured
    ]
    on_front = {p.number for p in pareto_front(points)}
    rows = tuple(
        replace(
            t,
            feasible=_feasible(t, gate) if t.measured else t.feasible,
            on_front=t.number in on_front,
            verdict=verdicts.get(t.number),
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
    return StudyData(study_name=study_name, gate=gate, knob_names=varying, trials=rows)


def load_study_data(storage: Storage, study_name: str) -> StudyData:
    try:
        study = optuna.load_study(study_name=study_name, storage=storage.optuna)
    except KeyError:
        names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage.optuna))
        raise StudyNotFoundError(
            f"study {study_name!r} not found in {storage.url}; studies there: {names or 'none'}"
        ) from None
    records = {m.trial_number: m for m in storage.measurements(study_name, token_ids=False)}
    trials = [_trial_row(t, records.get(t.number)) for t in study.get_trials(deepcopy=False)]
    return study_data(
        study_name=study_name,
        trials=trials,
        gate=_study_gate(records.values()),
        verdicts=latest_verdicts(storage, study_name),
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


def _feasible(t: TrialRow, gate: float | None) -> bool:
    if t.feasible is not None:
        return t.feasible
    return gate is None or t.ppl <= gate


def _study_gate(records: Iterable[MeasurementRecord]) -> float | None:
    """The gate the latest judged trial was held to (a ratio gate resolves at the baseline)."""
    judged = [m for m in records if m.gate is not None]
    return max(judged, key=lambda m: m.trial_number).gate if judged else None


_ATTR_FIELDS = ("tps", "ppl", "ppl_mean_record", "acceptance_rate", "tps_cv", "feasible", "identity_diff_prompts")
_SHOWN_ATTRS = frozenset((*_ATTR_FIELDS, "is_baseline", "fail_reason", "node_id"))


def _trial_row(trial: optuna.trial.FrozenTrial, record: MeasurementRecord | None) -> TrialRow:
    attrs = dict(trial.user_attrs)
    values = {name: attrs.get(name) for name in _ATTR_FIELDS}
    if record is not None:  # the driver's full record: the source it tells Optuna from
        for source in (record.measurement or {}, vars(record)):  # columns win over the JSON
            values.update({n: source[n] for n in _ATTR_FIELDS if source.get(n) is not None})
    elif trial.values is not None:
        values["tps"], values["ppl"] = trial.values[0], trial.values[1]
    metrics = {k: v for k, v in attrs.items() if _scalar(v) and k not in _SHOWN_ATTRS}
    if record is not None and record.measurement:
        metrics.update(_flatten(record.measurement, skip=set(_ATTR_FIELDS)))
    knobs = dict(record.knobs) if record is not None else {}
    knobs.update(trial.params)
    return TrialRow(
        number=trial.number,
        state=trial.state.name,
        knobs=knobs,
        **values,
        is_baseline=bool(attrs.get("is_baseline", record.is_baseline if record else False)),
        fail_reason=attrs.get("fail_reason") or (record.reason if record else None),
        node_id=attrs.get("node_id"),
        started=trial.datetime_start,
        finished=trial.datetime_complete,
        metrics=metrics,
    )


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _flatten(data: Mapping[str, Any], *, skip: set[str], prefix: str = "") -> dict[str, Any]:
    """``{"latency_s": {"p50": 1.0}}`` -> ``{"latency_s.p50": 1.0}``; lists are left out."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if name in skip:
            continue
        if isinstance(value, Mapping):
            out.update(_flatten(value, skip=skip, prefix=f"{name}."))
        elif _scalar(value):
            out[name] = value
    return out
