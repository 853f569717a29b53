"""A study replayed on a recorded surface: the driver's Optuna setup, no server.

Each trial goes the way the driver sends it (``sweep.driver``): the baseline is enqueued first
and judged alone, the sampler comes from ``sweep.sampling.make_sampler``, knob values from
``suggest_knobs`` and ``StudySpec.effective``, the gate and feasibility from
``sweep.ledger.Judge``, the constraint values from ``sweep.ledger.constraints``, and a grid ends
when ``sampler_exhausted`` says so. Only the measurement is replaced: the recorded mean of the
configuration times ``1 + N(0, sd)``, sd the recorded relative noise, so a sampler sees
measurements as noisy as the real ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import optuna
from optuna.trial import TrialState

from benchmarks._surface import Surface
from sweep import ledger
from sweep.sampling import make_sampler, sampler_exhausted, suggest_knobs
from sweep.spec import KnobSpace, StudySpec
from sweep.storage import MeasurementRecord

__all__ = ["Replayed", "replay", "surface_spec"]


@dataclass(frozen=True, kw_only=True)
class Replayed:
    """One trial of a replay: the recorded truth about the configuration it picked."""

    knobs: dict[str, int]  # every consumed knob's value (``StudySpec.effective``)
    tps: float | None  # the configuration's recorded mean (None: it failed when recorded)
    ppl: float | None
    feasible: bool  # by the recorded means, against the gate of the recorded baseline


def _space_like(space: KnobSpace, values: list[int]) -> KnobSpace:
    """The recorded values, as the study's own kind of space (an int range stays a range)."""
    steps = {b - a for a, b in zip(values, values[1:])}
    if space.choices is None and len(steps) <= 1:
        return KnobSpace(knob=space.knob, low=values[0], high=values[-1], step=steps.pop() if steps else 1)
    return KnobSpace(knob=space.knob, choices=tuple(values))


def surface_spec(spec: StudySpec, surface: Surface) -> StudySpec:
    """``spec`` with its space narrowed to the recorded grid (the knobs must match)."""
    if set(surface.knobs) != set(spec.space):
        raise ValueError(f"the grid records knobs {sorted(surface.knobs)}, study {spec.name!r} sweeps {sorted(spec.space)}")
    space = {}
    for knob, knob_space in spec.space.items():
        values = surface.values(knob)
        outside = [v for v in values if not knob_space.contains(v)]
        if outside:
            raise ValueError(f"the grid's {knob} values {outside} are outside study {spec.name!r}'s space")
        space[knob] = _space_like(knob_space, values)
    return replace(spec, space=space)


def replay(spec: StudySpec, surface: Surface, *, seed: int, n_trials: int) -> list[Replayed]:
    """Run ``spec`` (its sampler, this seed) for ``n_trials`` against ``surface``."""
    spec = replace(spec, seed=seed, n_trials=n_trials)
    rng = random.Random(seed)
    study = optuna.create_study(
        study_name=spec.name, directions=["maximize", "minimize"], sampler=make_sampler(spec)
    )  # in memory: the driver's SQLite adds only time here
    study.enqueue_trial(
        {k: v for k, v in spec.baseline().items() if k in spec.space}, user_attrs={"is_baseline": True}
    )
    true_gate = spec.gate.resolve(surface.point(dict(zip(surface.knobs, surface.baseline))).ppl)
    baseline: MeasurementRecord | None = None
    records: list[MeasurementRecord] = []
    out: list[Replayed] = []
    while len(out) < n_trials and not sampler_exhausted(study.sampler, study):
        trial = study.ask()
        is_baseline = bool(trial.user_attrs.get("is_baseline"))
        knobs = spec.effective(suggest_knobs(trial, spec, baseline=is_baseline))
        point = surface.point(knobs)
        out.append(Replayed(knobs=knobs, tps=point.tps, ppl=point.ppl,
                            feasible=point.ppl is not None and point.ppl <= true_gate))  # fmt: skip
        record = MeasurementRecord(
            study_name=spec.name, trial_number=trial.number, status="failed", knobs=knobs, is_baseline=is_baseline
        )
        skipped = None if is_baseline else ledger.skip_reason(knobs, records)
        if point.tps is None or point.ppl is None or skipped:
            record.fail_kind = "skipped" if skipped else "engine"
            records.append(record)
            study.tell(trial, state=TrialState.FAIL)
            continue
        record.status = "complete"
        record.tps = point.tps * (1 + rng.gauss(0, surface.tps_rel_sd))
        record.ppl = point.ppl * (1 + rng.gauss(0, surface.ppl_rel_sd))
        record = ledger.Judge(spec, baseline).complete(record)
        if is_baseline:
            baseline = record
        records.append(record)
        for key, value in ledger.constraints(record, identity_required=spec.identity_required).items():
            trial.set_constraint(key, value)
        study.tell(trial, [record.tps, record.ppl])
    return out
