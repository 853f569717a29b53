"""A study replayed on a recorded surface: the driver's own ask/tell core, no server.

Each trial goes the way the driver sends it, through ``sweep.core.StudyCore`` (the sampler, the
baseline first, knob values, the skip and budget rules, the judgement and the constraints told
to Optuna). Only the measurement is replaced: the recorded mean of the configuration times
``1 + N(0, sd)``, sd the recorded relative noise, so a sampler sees measurements as noisy as the
real ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from benchmarks._surface import Surface
from engine.knobs import KnobValue
from engine.measurement import Measurement
from sweep.core import MemoryRecords, StudyCore
from sweep.record import TrialRecord
from sweep.spec import KnobSpace, StudySpec

__all__ = ["Replayed", "replay", "surface_spec"]


@dataclass(frozen=True, kw_only=True)
class Replayed:
    """One trial of a replay: the recorded truth about the configuration it picked."""

    knobs: dict[str, KnobValue]  # every consumed knob's value
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


def _measured(tps: float, ppl: float) -> Measurement:
    """A replayed measurement: the sampled TPS and PPL, nothing else observed."""
    return Measurement(tps=tps, ppl=ppl, ppl_mean_record=ppl, completion_tokens=0, tps_wall_s=0.0,
                       ppl_target_tokens=0, num_prompts=0, num_ppl_records=0)  # fmt: skip


def replay(spec: StudySpec, surface: Surface, *, seed: int, n_trials: int) -> list[Replayed]:
    """Run ``spec`` (its sampler, this seed) for ``n_trials`` against ``surface``."""
    spec = replace(spec, seed=seed, n_trials=n_trials)
    rng = random.Random(seed)
    core = StudyCore(spec, MemoryRecords())  # in memory: the driver's SQLite adds only time here
    core.ensure_baseline()
    true_gate = spec.gate.resolve(surface.point(dict(zip(surface.knobs, surface.baseline))).ppl)
    out: list[Replayed] = []
    while core.has_next(in_flight=0):
        planned = core.ask()
        point = surface.point(planned.effective)
        out.append(Replayed(knobs=dict(planned.effective), tps=point.tps, ppl=point.ppl,
                            feasible=point.ppl is not None and point.ppl <= true_gate))  # fmt: skip
        if planned.skip_reason is not None:
            core.close(core.failed(planned, kind="skipped", reason=planned.skip_reason))
        elif point.tps is None or point.ppl is None:
            core.close(core.failed(planned, kind="engine", reason="failed when the grid was recorded"))
        else:
            tps = point.tps * (1 + rng.gauss(0, surface.tps_rel_sd))
            ppl = point.ppl * (1 + rng.gauss(0, surface.ppl_rel_sd))
            record = TrialRecord(study_name=spec.name, trial_number=planned.number, status="complete",
                                 knobs=dict(planned.effective), is_baseline=planned.is_baseline,
                                 measurement=_measured(tps, ppl))  # fmt: skip
            core.close(core.judge(record))
    return out
