"""Multi-fidelity trials: spend TPS time only where the front can move.

A study's ``[fidelity]`` table (``sweep.search``)::

    mode = "multi"     # or "full": every trial measured to the end. Default: multi where it is safe
    stages = [0.25]    # fractions of the first timed run after which the rule may stop a trial
    z = 2.0            # optimism: how many deviations of the noise a trial is given
    floor = 0.03       # the least relative noise assumed, however steady the trials so far
    min_trials = 2     # full-fidelity trials needed before the front rule prunes anything

The first run of a trial is timed in stages. Right after the first stage the PPL pass runs ("gate
first"), then at each stage boundary ``decide`` rules, with the trial's PPL known:

1. Gate: PPL over the gate stops the trial. Its record keeps the TPS of the prompts it timed (the
   probe, marked as such) and it is told to Optuna as infeasible.
2. Front: every trial times the same prompts in the same order, so the study's full-fidelity
   trials say how a run's TPS over its first n prompts relates to its whole: the ratio of the two
   (its median, and its spread across them). The trial's predicted TPS is its TPS so far times that
   ratio, given ``z`` deviations of optimism (the noise: that spread and the standard error of the
   trial's own per-prompt rates together, or ``floor``, whichever is larger). When a full-fidelity
   feasible trial whose PPL is no worse is faster than that optimistic prediction, the trial cannot
   reach the front: it stops, PRUNED, its partial figures kept. Until ``min_trials`` full-fidelity
   trials exist to learn the ratio from, nothing is pruned.

The front rule needs a sampler that learns from PRUNED trials. Optuna's GP and NSGA-II samplers model
COMPLETE trials only: GP would propose a pruned configuration again and again (seen on the joint
study: five trials of one pruned point). With those the front rule is off (``front_rule_for``) and
only the gate stops a trial, which they see (it is told COMPLETE, infeasible).

A stopped trial is never a front point and never verified: those are full-fidelity by construction.
Gate first is only allowed where the PPL pass cannot warm a prompt timed after it
(``gate_first_unsafe``): a stack whose manifest says ``"prefix_caching": false``, or PPL records
whose ids (a reference record made from a prompt's conversation keeps its id) are none of the
later timed prompts'. Elsewhere a study that did not choose runs at full fidelity, and says why.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from engine.config import BenchProfile, Manifest
from engine.measurement import Partial, Stages, Stop
from sweep.judgement import FRONT_STOP, GATE_STOP, front_point, over_gate, pareto_front

if TYPE_CHECKING:
    from sweep.store import TrialRecord

__all__ = [
    "FidelityPlan",
    "FidelitySpec",
    "build_plan",
    "decide",
    "front_rule_for",
    "full_plan",
    "gate_first_unsafe",
    "stage_counts",
    "stages_for",
]


@dataclass(frozen=True, kw_only=True)
class FidelitySpec:
    mode: Literal["multi", "full"] = "multi"
    stages: tuple[float, ...] = (0.25,)
    z: float = 2.0
    floor: float = 0.03
    min_trials: int = 2
    why_full: str | None = None  # set when a study that did not choose was put at full fidelity
    front_rule_off: str | None = None  # why only the gate stops trials (``front_rule_for``)

    def describe(self) -> str:
        if self.mode == "full":
            return "full fidelity" + (f" ({self.why_full})" if self.why_full else "")
        if self.front_rule_off:
            return (
                f"multi-fidelity: PPL gate first, after {self.stages[0]:.0%} of the first run; the front rule is "
                f"off ({self.front_rule_off})"
            )
        cuts = ", ".join(f"{s:.0%}" for s in self.stages)
        return (
            f"multi-fidelity: PPL gate first, then the front rule after {cuts} of the first run (z {self.z:g}, "
            f"noise floor {self.floor:.0%}, learned from {self.min_trials}+ full trials)"
        )


# Samplers whose model reads COMPLETE trials only (Optuna's GPSampler, and NSGA-II's population).
_BLIND_TO_PRUNED = ("gp", "nsga2")


def front_rule_for(sampler: str) -> str | None:
    """Why the front rule cannot work with this sampler; None when it can."""
    if sampler not in _BLIND_TO_PRUNED:
        return None
    return f"the {sampler} sampler learns from COMPLETE trials only, and would propose a pruned configuration again"


def stage_counts(spec: FidelitySpec, profile: BenchProfile) -> tuple[int, ...]:
    """The stage boundaries in prompts of the first run: each fraction rounded, inside the run (the
    first one alone when only the gate stops trials)."""
    n = profile.num_prompts
    counts = tuple(sorted({c for c in (max(1, round(f * n)) for f in spec.stages) if 0 < c < n}))
    return counts[:1] if spec.front_rule_off else counts


def gate_first_unsafe(manifest: Manifest, profile: BenchProfile, stages: tuple[int, ...]) -> str | None:
    """Why the PPL pass could serve a later timed prompt from a cache; None when it cannot."""
    if not stages:
        return f"no stage fits a run of {profile.num_prompts} prompt(s)"
    if not manifest.prefix_caching:
        return None
    prompts, records = profile.load_data()
    later = {p.id for p in prompts[stages[0] :]}
    shared = sorted(later & {r.id for r in records})
    if not shared:
        return None
    return (
        f"the PPL records share {len(shared)} prompt(s) with the timed set (e.g. {shared[0]!r}) and the stack "
        'may cache prefixes (its manifest does not say "prefix_caching": false)'
    )


@dataclass(frozen=True, kw_only=True)
class FidelityPlan:
    """What the rule knows when a trial is dispatched: travels to the worker with the trial."""

    mode: Literal["multi", "full"]
    why_full: str | None = None
    stages: tuple[int, ...] = ()
    z: float = 0.0
    floor: float = 0.0
    gate: float | None = None
    front: tuple[tuple[float, float], ...] = ()  # (tps, ppl) of the full-fidelity feasible front
    ratios: dict[int, tuple[float, float, int]] = field(
        default_factory=dict
    )  # stage -> (median full/first-n, log sd, trials)
    front_rule_off: str | None = None

    def record(self) -> dict[str, Any]:
        """The rule and its thresholds, as the trial's measurement keeps them."""
        if self.mode == "full":
            return {"mode": "full", "why": self.why_full}
        return {
            "mode": "multi",
            "stages": list(self.stages),
            "z": self.z,
            "floor": self.floor,
            "gate": self.gate,
            "front": [list(p) for p in self.front],
            "ratios": {str(k): list(v) for k, v in self.ratios.items()},
            **({"front_rule_off": self.front_rule_off} if self.front_rule_off else {}),
        }


def full_plan(why: str) -> FidelityPlan:
    return FidelityPlan(mode="full", why_full=why)


def _rate(tokens: Iterable[int], latencies_s: Iterable[float]) -> float | None:
    """Tokens per second of request time: a full run and a staged one's first prompts compare alike."""
    seconds = sum(latencies_s)
    return sum(tokens) / seconds if seconds > 0 else None


def _rate_first(record: TrialRecord, n: int) -> float | None:
    m = record.measurement
    if m is None or len(m.prompt_latencies_s) < n:
        return None
    return _rate(m.prompt_tokens[:n], m.prompt_latencies_s[:n])


def build_plan(
    spec: FidelitySpec, profile: BenchProfile, *, gate: float | None, records: Iterable[TrialRecord]
) -> FidelityPlan:
    """The rule for the next trial, from the study's records so far."""
    stages = stage_counts(spec, profile)
    full = [r for r in records if r.full]
    points = [front_point(r) for r in full]
    ratios = {}
    for n in () if spec.front_rule_off else stages:
        seen = [r.figures.tps / first for r in full if (first := _rate_first(r, n))]
        if len(seen) >= max(spec.min_trials, 2):
            logs = [math.log(x) for x in seen]
            ratios[n] = (math.exp(statistics.median(logs)), statistics.stdev(logs), len(seen))
    return FidelityPlan(
        mode="multi",
        stages=stages,
        z=spec.z,
        floor=spec.floor,
        gate=gate,
        front_rule_off=spec.front_rule_off,
        front=tuple((p.tps, p.ppl) for p in pareto_front(points)),
        ratios=ratios,
    )


def _own_spread(partial: Partial) -> float:
    """The standard error of the trial's own per-prompt rate (log scale): a trial that ran unsteadily
    (a busy host, a stack warming up) is given more room than the study's spread alone."""
    logs = [math.log(t / s) for t, s in zip(partial.tokens, partial.latencies_s) if t > 0 and s > 0]
    return statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) >= 2 else 0.0


def decide(plan: FidelityPlan, partial: Partial) -> Stop | None:
    """Whether to stop a trial at this checkpoint, and why; None to measure on."""
    if partial.ppl is not None and plan.gate is not None and over_gate(partial.ppl, plan.gate):
        return Stop(
            GATE_STOP,
            f"PPL {partial.ppl:.4f} is over the gate {plan.gate:.4f}: stopped after a TPS "
            f"probe of {partial.prompts_timed} of {partial.prompts_planned} prompts",
        )
    ratio = plan.ratios.get(partial.prompts_timed)
    rate = _rate(partial.tokens, partial.latencies_s)
    if ratio is None or partial.ppl is None or rate is None:
        return None
    median, spread, trials = ratio
    noise = max(math.hypot(spread, _own_spread(partial)), plan.floor)
    predicted = rate * median
    optimistic = predicted * math.exp(plan.z * noise)
    beaten = [(tps, ppl) for tps, ppl in plan.front if ppl <= partial.ppl and tps > optimistic]
    if not beaten:
        return None
    tps, ppl = max(beaten)
    return Stop(
        FRONT_STOP,
        (
            f"cannot reach the front: {partial.tps:.2f} tok/s over {partial.prompts_timed} of {partial.prompts_planned} "
            f"prompts predicts {predicted:.2f} for the run (at most {optimistic:.2f}: z {plan.z:g} x noise {noise:.1%}, "
            f"learned from {trials} full trials), and front point {tps:.2f} tok/s has PPL {ppl:.4f} <= {partial.ppl:.4f}"
        ),
    )


def stages_for(plan: FidelityPlan) -> Stages | None:
    """The engine's side of the plan: where to stop and ask, the PPL first, ``decide`` at each stop."""
    if plan.mode == "full":
        return None
    return Stages(after=plan.stages, ppl_first=True, checkpoint=functools.partial(decide, plan))
