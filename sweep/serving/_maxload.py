"""The highest load a configuration holds under an SLO: a bisection over concurrency levels, each level decided
over repeated runs with the noise in the decision.

A level **holds** when the SLO's bounded figures at its percentile (``p99 TTFT`` and the rest) stay under their
bounds with margin over the noise: each run gives the largest ratio of a figure to its bound; over the level's
``repeats`` runs, the one-sided Student-t upper confidence bound of their mean (``confidence``, 90% by default)
must be at most 1. A level whose runs scatter across the bound is not held: what one lucky run met, a re-run may
miss (GuideLLM's users measured run-to-run spread 1.8-3.2x what one run's own interval says).

The search assumes a level that holds lets every lower one hold (latency grows with load), and bisects the sorted
levels: the lowest first (none held if it fails), then the middle of what is still open, until the highest level
that holds sits next to the lowest that fails. It measures about log2 of the number of levels, not all of them.

``probe_levels`` measures a level on a running stack: a warm-up sized to it (as many warm-up requests as it puts
in flight, so that the stack has met that batch before it is timed), then ``repeats`` runs, each on its own slice
of the public prompts, taken in order around the set (a prompt is timed again only once the whole set has been).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from engine.bench import Workload, harness_warm_up, measure_load
from engine.config import BenchProfile, Prompt
from engine.measurement import LoadLevel
from sweep.judgement import Slo

__all__ = ["DEFAULT_CONFIDENCE", "LevelVerdict", "MaxLoad", "max_load", "probe_levels", "verdict"]

DEFAULT_CONFIDENCE = 0.9


@dataclass(frozen=True, kw_only=True)
class LevelVerdict:
    """One level's decision: each run's largest figure-to-bound ratio, their mean's upper confidence bound, and
    whether that bound is at most 1."""

    concurrency: int
    ratios: tuple[float, ...]
    upper: float
    holds: bool


@dataclass(frozen=True, kw_only=True)
class MaxLoad:
    """The highest level that held (None: not even the lowest did), and every level's verdict in the order tested."""

    concurrency: int | None
    verdicts: tuple[LevelVerdict, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "verdicts": [asdict(v) for v in self.verdicts]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MaxLoad:
        verdicts = tuple(
            LevelVerdict(
                concurrency=int(v["concurrency"]),
                ratios=tuple(float(r) for r in v["ratios"]),
                upper=float(v["upper"]),
                holds=bool(v["holds"]),
            )
            for v in data["verdicts"]
        )
        return cls(concurrency=data["concurrency"], verdicts=verdicts)


def verdict(
    concurrency: int, runs: Sequence[LoadLevel], slo: Slo, *, confidence: float = DEFAULT_CONFIDENCE
) -> LevelVerdict:
    """The decision on one level from its repeated runs (see the module's docstring); raises ValueError for fewer
    than two runs (one run has no spread to decide with)."""
    if len(runs) < 2:
        raise ValueError(f"a level is decided over at least 2 runs, got {len(runs)}")
    ratios = tuple(max(lv.latency(k).at(slo.percentile) / b for k, b in slo.bounds().items()) for lv in runs)
    from scipy import stats  # imported here: the rest of the package needs no scipy

    n = len(ratios)
    upper = statistics.fmean(ratios) + float(stats.t.ppf(confidence, n - 1)) * statistics.stdev(ratios) / math.sqrt(n)
    return LevelVerdict(concurrency=concurrency, ratios=ratios, upper=upper, holds=upper <= 1.0)


def max_load(
    levels: Sequence[int],
    measure: Callable[[int], Sequence[LoadLevel]],
    slo: Slo,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
) -> MaxLoad:
    """The bisection over ``levels`` (concurrencies, any order); ``measure(c)`` runs level ``c`` its repeats."""
    ordered = sorted(set(levels))
    if not ordered:
        raise ValueError("the max-load search needs at least one level")
    tested: list[LevelVerdict] = []

    def holds(i: int) -> bool:
        tested.append(verdict(ordered[i], measure(ordered[i]), slo, confidence=confidence))
        return tested[-1].holds

    if not holds(0):
        return MaxLoad(concurrency=None, verdicts=tuple(tested))
    held, failed = 0, len(ordered)  # the highest index known to hold; the lowest known to fail (none: past the end)
    while failed - held > 1:
        middle = (held + failed) // 2
        if holds(middle):
            held = middle
        else:
            failed = middle
    return MaxLoad(concurrency=ordered[held], verdicts=tuple(tested))


@dataclass(kw_only=True)
class _Slices:
    """The public prompts handed out in order, a slice a run, around the set when it runs out."""

    public: list[Prompt]
    next: int = 0

    def take(self, count: int) -> list[Prompt]:
        taken = [self.public[(self.next + i) % len(self.public)] for i in range(count)]
        self.next = (self.next + count) % len(self.public)
        return taken


def probe_levels(
    client: httpx.Client,
    *,
    model: str,
    profile: BenchProfile,
    public: list[Prompt],
    repeats: int,
    num_prompts: int,
    output_len: int,
) -> Callable[[int], list[LoadLevel]]:
    """``measure`` for ``max_load`` on the stack ``client`` reaches (see the module's docstring): each run sends
    ``num_prompts`` requests, or the level's concurrency where that is more, of ``output_len`` tokens."""
    if repeats < 2 or not public:
        raise ValueError(f"a level needs at least 2 runs and some public prompts, got {repeats} and {len(public)}")
    slices = _Slices(public=public)

    def measure(concurrency: int) -> list[LoadLevel]:
        workload = Workload(
            name=f"c{concurrency}",
            concurrency=concurrency,
            num_prompts=max(num_prompts, concurrency),
            output_len=output_len,
        )
        harness_warm_up(client, model=model, prompt=public[0], profile=profile, requests=concurrency)
        return [
            measure_load(client, model=model, prompts=slices.take(workload.num_prompts), workload=workload)
            for _ in range(repeats)
        ]

    return measure
