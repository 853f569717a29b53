"""The Pareto front of TPS (maximized) against PPL (minimized), feasible trials only.

Pure functions over plain points, so the console, the dashboards and the tests share one
definition of "the front".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["FrontPoint", "dominates", "pareto_front"]


@dataclass(frozen=True, kw_only=True)
class FrontPoint:
    number: int  # the trial number
    tps: float
    ppl: float
    feasible: bool


def dominates(a: FrontPoint, b: FrontPoint) -> bool:
    """``a`` is at least as fast and at least as accurate as ``b``, and strictly better in one."""
    return a.tps >= b.tps and a.ppl <= b.ppl and (a.tps > b.tps or a.ppl < b.ppl)


def pareto_front(points: Iterable[FrontPoint]) -> list[FrontPoint]:
    """Feasible points no other feasible point dominates, fastest first.

    Equal points do not dominate each other, so repeated measurements of one value all stay.
    """
    feasible = [p for p in points if p.feasible]
    front = [p for p in feasible if not any(dominates(q, p) for q in feasible)]
    return sorted(front, key=lambda p: (-p.tps, p.ppl, p.number))
