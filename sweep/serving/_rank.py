"""Ranks among the points measured at every level: by challenge TPS, and by output tok/s at each level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.bench import Workload
from sweep.serving._boots import PointRun

__all__ = ["Ranks", "rank"]


@dataclass(frozen=True)
class Ranks:
    """Ranks among the points measured at every level (1: the fastest): by challenge TPS, and by output tok/s at
    each level."""

    challenge: dict[int, int]
    levels: dict[str, dict[int, int]]

    def held(self, number: int) -> bool | None:
        """Whether the point's rank at every level is its challenge rank; None for a point not compared."""
        if number not in self.challenge:
            return None
        return all(ranks[number] == self.challenge[number] for ranks in self.levels.values())


def _ranked(values: dict[int, float]) -> dict[int, int]:
    order = sorted(values, key=lambda n: (-values[n], n))
    return {n: i for i, n in enumerate(order, start=1)}


def rank(runs: Sequence[PointRun], plan: Sequence[Workload]) -> Ranks:
    compared = [r for r in runs if r.complete(plan)]
    challenge = _ranked({r.point.number: r.point.challenge_tps for r in compared})
    levels = {}
    for w in plan:
        measured = {r.point.number: lv.level.output_tps for r in compared if (lv := r.level(w.name))}
        levels[w.name] = _ranked(measured)
    return Ranks(challenge=challenge, levels=levels)
