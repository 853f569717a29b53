"""How good a replayed run is, judged by the recorded truth (pure functions, tested apart).

- ``trials_to_reach``: the 1-based trial (the baseline is trial 1) at which the run first tried a
  feasible configuration whose recorded TPS is at least ``share`` of the best feasible TPS in
  the grid; None if it never did.
- ``hypervolume``: the area the feasible front dominates, TPS maximised and PPL minimised, up
  to a reference point (tps_ref, ppl_ref). Fronts use the recorded means, not the noisy values
  the sampler saw, so luck in the noise earns nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks._replay import Replayed
from benchmarks._surface import Surface
from sweep.judgement import FrontPoint, over_gate, pareto_front

__all__ = ["Reference", "best_feasible_tps", "hypervolume", "hypervolume_curve", "reference_point", "trials_to_reach"]


@dataclass(frozen=True, kw_only=True)
class Reference:
    """The hypervolume's reference point and the grid's own hypervolume (the most a run can find)."""

    tps: float
    ppl: float
    grid_hv: float


def _feasible_points(surface: Surface, gate: float) -> list[FrontPoint]:
    return [
        FrontPoint(number=i, tps=p.tps, ppl=p.ppl, feasible=not over_gate(p.ppl, gate))
        for i, p in enumerate(surface.points.values())
        if p.tps is not None and p.ppl is not None
    ]


def best_feasible_tps(surface: Surface, gate: float) -> float:
    return max(p.tps for p in _feasible_points(surface, gate) if p.feasible)


def hypervolume(points: Sequence[FrontPoint], *, tps_ref: float, ppl_ref: float) -> float:
    """Area dominated by the feasible front of ``points`` inside (tps >= tps_ref, ppl <= ppl_ref)."""
    front = pareto_front(points)  # fastest first, so PPL falls along it
    area = 0.0
    for i, p in enumerate(front):
        next_tps = front[i + 1].tps if i + 1 < len(front) else tps_ref
        width = p.tps - max(next_tps, tps_ref)
        height = ppl_ref - p.ppl
        if width > 0 and height > 0:
            area += width * height
    return area


def reference_point(surface: Surface, gate: float) -> Reference:
    """TPS: the slowest configuration of the grid; PPL: the gate. Every feasible point counts."""
    points = _feasible_points(surface, gate)
    tps_ref = min(p.tps for p in points)
    return Reference(tps=tps_ref, ppl=gate, grid_hv=hypervolume(points, tps_ref=tps_ref, ppl_ref=gate))


def trials_to_reach(run: Sequence[Replayed], *, best_tps: float, share: float = 0.99) -> int | None:
    for i, t in enumerate(run, start=1):
        if t.feasible and t.tps is not None and t.tps >= share * best_tps:
            return i
    return None


def hypervolume_curve(run: Sequence[Replayed], ref: Reference) -> list[float]:
    """The share of the grid's hypervolume found after 1, 2, ... trials."""
    curve, points = [], []
    for i, t in enumerate(run):
        if t.tps is not None and t.ppl is not None:
            points.append(FrontPoint(number=i, tps=t.tps, ppl=t.ppl, feasible=t.feasible))
        curve.append(hypervolume(points, tps_ref=ref.tps, ppl_ref=ref.ppl) / ref.grid_hv)
    return curve
