"""A study replayed on a recorded surface: the driver's own ask/tell core, no server.

Each trial goes the way the driver sends it, through ``sweep.search.StudyCore`` (the sampler, the
baseline first, knob values, the skip, copy, PPL-memo and budget rules, the multi-fidelity plan,
the judgement and what Optuna is told). Only the measurement is replaced: the recorded
configuration's TPS times ``1 + N(0, sd)``, sd the recorded relative noise, so a sampler sees
measurements as noisy as the real ones. On a grid with traces (``benchmarks._surface.Trace``) the
trial is replayed prompt by prompt: its recorded prompts' seconds go through the plan's own
checkpoint (``sweep.search.stages_for``), as ``engine.bench.measure`` sends them, and the trial
costs its recorded phases, with the TPS run cut where the checkpoint stopped it. Their noise is
drawn per stage (``benchmarks._surface.RunNoise``, measured on the grid's repeated
configurations): a factor every prompt of the trial shares, and one of each segment between two
stage boundaries, so a first stage does not predict the rest of its run better than the recorded
reruns did. A trial the core closes without a boot (a copy, a PPL-memo hit) costs nothing.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields, replace

from benchmarks._surface import RunNoise, Surface, Trace
from engine.config import BenchProfile, KnobValue, parse_knobs
from engine.measurement import Measurement, Partial, Stop, TrialOutcome
from sweep.judgement import over_gate
from sweep.search import (
    FidelityPlan,
    FidelitySpec,
    KnobSpace,
    MemoryRecords,
    PlannedTrial,
    StudyCore,
    StudySpec,
    stage_counts,
    stages_for,
)
from sweep.store import TrialRecord

__all__ = ["Replayed", "full_cost_s", "replay", "surface_spec"]


@dataclass(frozen=True, kw_only=True)
class Replayed:
    """One trial of a replay: the recorded truth about the configuration it picked, and the trial."""

    knobs: dict[str, KnobValue]  # every consumed knob's value
    tps: float | None  # the configuration's recorded mean (None: it failed when recorded)
    ppl: float | None
    feasible: bool  # by the recorded means, against the gate of the recorded baseline
    record: TrialRecord | None = None  # what the core stored: status, stop, the noisy figures
    cost_s: float = 0.0  # what the trial took: its recorded phases (0 on a grid without traces)


def _space_like(space: KnobSpace, values: list[int]) -> KnobSpace:
    """The recorded values, as the study's own kind of space (an int range stays a range)."""
    steps = {b - a for a, b in zip(values, values[1:])}
    if space.choices is None and len(steps) <= 1:
        return KnobSpace(knob=space.knob, low=values[0], high=values[-1], step=steps.pop() if steps else 1)
    return KnobSpace(knob=space.knob, choices=tuple(values))


def surface_spec(spec: StudySpec, surface: Surface) -> StudySpec:
    """``spec`` with its space narrowed to the recorded grid and, on a grid with traces, the grid's
    profile; at full fidelity on a grid without, which cannot stop a trial. A knob the study sweeps
    and the grid holds at one value of the study's space (a GPU grid over some of a space's knobs)
    becomes one of the study's fixed knobs, at that value."""
    unswept = sorted(set(surface.knobs) - set(spec.space))
    unrecorded = sorted(set(spec.space) - set(surface.knobs) - set(surface.held))
    if unswept or unrecorded:
        raise ValueError(
            f"the grid records knobs {sorted(surface.knobs)}, study {spec.name!r} sweeps {sorted(spec.space)}"
        )
    space, held = {}, {}
    for knob, knob_space in spec.space.items():
        if knob not in surface.knobs:
            if not knob_space.contains(surface.held[knob]):
                raise ValueError(
                    f"the grid holds {knob} at {surface.held[knob]!r}, outside study {spec.name!r}'s space"
                )
            held[knob] = surface.held[knob]
            continue
        values = surface.values(knob)
        outside = [v for v in values if not knob_space.contains(v)]
        if outside:
            raise ValueError(f"the grid's {knob} values {outside} are outside study {spec.name!r}'s space")
        space[knob] = _space_like(knob_space, values)
    fixed = parse_knobs(spec.manifest, {**spec.fixed, **held})
    if not surface.traces:
        return replace(
            spec,
            space=space,
            fixed=fixed,
            fidelity=FidelitySpec(mode="full", why_full="the grid records no prompt timings"),
        )
    # The trials' own profile: the stages are counted in its prompts
    recorded = surface.profile or {}
    profile = BenchProfile(**{f.name: recorded[f.name] for f in fields(BenchProfile) if f.name in recorded})
    return replace(spec, space=space, fixed=fixed, profile=profile)


def _measured(tps: float, ppl: float) -> Measurement:
    """A replayed measurement: the sampled TPS and PPL, nothing else observed."""
    return Measurement(
        tps=tps,
        ppl=ppl,
        ppl_mean_record=ppl,
        completion_tokens=0,
        tps_wall_s=0.0,
        ppl_target_tokens=0,
        num_prompts=0,
        num_ppl_records=0,
    )


def _factors(noise: RunNoise, prompts: int, rng: random.Random) -> list[float]:
    """Each prompt's speed factor for one replayed trial: the trial's own, times its segment's."""
    shared = rng.gauss(0, noise.boot_sd)
    own = [rng.gauss(0, sd) for sd in noise.segment_sds]
    return [math.exp(shared + own[sum(1 for c in noise.cuts if c <= i)]) for i in range(prompts)]


_SETUP = ("gpu_wait", "boot", "warmup", "ppl", "stop")  # a trial's phases besides its timed runs


def full_cost_s(trace: Trace) -> float:
    """What a trial of the recorded configuration measured to the end takes, noise aside: its recorded phases."""
    t = trace.timings_s
    return sum(t.get(phase, 0.0) for phase in _SETUP) + t.get("stream", 0.0) + t["tps"]


def _traced(trace: Trace, *, factors: list[float], ppl: float, plan: FidelityPlan) -> tuple[Measurement, float]:
    """The trial replayed prompt by prompt under ``plan``, and the seconds it took."""
    latencies = [s / f for s, f in zip(trace.latencies_s, factors)]
    factor = sum(trace.latencies_s) / sum(latencies)  # the whole run's, as its TPS and wall time see it
    tokens = list(trace.tokens)
    planned = len(latencies)
    stages = stages_for(plan)
    stop: Stop | None = None
    timed = planned
    for n in stages.bounds(planned)[:-1] if stages else ():  # the stops inside the run, as engine.bench makes them
        assert stages is not None  # the loop runs only over a plan's stages
        stop = stages.checkpoint(
            Partial.so_far(
                tps=sum(tokens[:n]) / sum(latencies[:n]),
                latencies_s=latencies[:n],
                tokens=tokens[:n],
                planned=planned,
                ppl=ppl,
            )
        )
        if stop is not None:
            timed = n
            break
    t = trace.timings_s
    fixed = sum(t.get(phase, 0.0) for phase in _SETUP)
    if stop is None:
        tps, wall, cost = trace.tps * factor, t["tps"] / factor, fixed + t.get("stream", 0.0) + t["tps"] / factor
    else:  # no stream pass and no later run after a stop
        wall = sum(latencies[:timed])
        tps, cost = sum(tokens[:timed]) / wall, fixed + wall
    measurement = Measurement(
        tps=tps,
        ppl=ppl,
        ppl_mean_record=ppl,
        completion_tokens=sum(tokens[:timed]),
        tps_wall_s=wall,
        ppl_target_tokens=0,
        num_prompts=planned,
        num_ppl_records=0,
        prompt_latencies_s=latencies[:timed],
        prompt_tokens=tokens[:timed],
        fidelity=plan.record(),
        stopped=stop.kind if stop else None,
        stop_reason=stop.reason if stop else None,
        prompts_timed=timed,
    )
    return measurement, cost


def _record(core: StudyCore, planned: PlannedTrial, measurement: Measurement) -> TrialRecord:
    """The replayed measurement as the driver would store it: an outcome, judged by the core."""
    outcome = TrialOutcome(status="complete", knobs=dict(planned.effective), argv=[], env={}, measurement=measurement)
    return core.outcome_record(planned, outcome)


def replay(
    spec: StudySpec, surface: Surface, *, seed: int, n_trials: int, cuts: tuple[int, ...] | None = None
) -> list[Replayed]:
    """Run ``spec`` (its sampler, fidelity and rules, this seed) for ``n_trials`` booted trials against
    ``surface``; ``cuts`` (default: the spec's own stages) are where a traced run's noise is drawn
    apart: give two replays that are compared the same ones."""
    spec = replace(spec, seed=seed, n_trials=n_trials)
    rng = random.Random(seed)
    noise = surface.run_noise(stage_counts(spec.fidelity, spec.profile) if cuts is None else cuts)
    core = StudyCore(spec, MemoryRecords())  # in memory: the driver's SQLite adds only time here
    core.ensure_baseline()
    true_gate = spec.gate.limit([surface.point(dict(zip(surface.knobs, surface.baseline))).ppl])
    assert true_gate is not None  # a ratio gate: the grid records its baseline's PPL
    out: list[Replayed] = []
    while core.has_next(in_flight=0):
        planned = core.ask()
        point = surface.point(planned.effective)
        cost = 0.0
        if planned.answer is not None:  # closed without a boot
            record = planned.answer
        elif point.tps is None or point.ppl is None:
            record = core.failed(planned, kind="engine", reason="failed when the grid was recorded")
        else:
            trace = surface.traces.get(surface.key(planned.effective))
            if trace is None:
                factor = 1 + rng.gauss(0, surface.tps_rel_sd)
                measurement = _measured(point.tps * factor, point.ppl * (1 + rng.gauss(0, surface.ppl_rel_sd)))
            else:
                factors = _factors(noise, len(trace.latencies_s), rng)
                ppl = point.ppl * (1 + rng.gauss(0, surface.ppl_rel_sd))
                measurement, cost = _traced(trace, factors=factors, ppl=ppl, plan=core.plan(planned))
            record = _record(core, planned, measurement)
        core.close(record)
        out.append(
            Replayed(
                knobs=dict(planned.effective),
                tps=point.tps,
                ppl=point.ppl,
                record=record,
                cost_s=cost,
                feasible=point.ppl is not None and not over_gate(point.ppl, true_gate),
            )
        )
    return out
