"""How a timed run's engine steps were spread in time: ``StepTimes``, from the stack's step-time histogram.

A run's TPS follows the stack's time per engine step, and two runs of one boot can differ by a third with the
same steps (a GPU run of ~1,150 steps, 1.4 s apart). A mean ms a step cannot say whether a few steps froze (a
garbage collection, a compile in the timed window) or every step ran slower. At one request at a time, vLLM's
``vllm:inter_token_latency_seconds`` observes one value per engine step that emitted tokens (the time since
the request's last tokens, stamped in the engine core); the reference stack serves the same histogram. Its
bucket counts, read before and after a run as the counters are (``engine.bench._metrics``), give the run's
step distribution to the resolution of its buckets: vLLM's defaults start at 10 ms, so the manifests that can
ask for finer ones do (``engine.stacks.STEP_BUCKETS``, vLLM's ``--custom-histogram-buckets``).

A **stall** is a step slower than ``STALL_FACTOR`` times the run's median step. With buckets, what is known
for certain is counted: the median lies in one bucket, so a step is a stall for certain when its bucket starts
at or above ``STALL_FACTOR`` times that bucket's upper bound, and it took at least its bucket's lower bound.
``stall_s`` is therefore a lower bound of the time the run's stalls took, never more than the truth; a run
**stalled** when that is at least ``STALLED_SHARE`` of its step time. A run whose steps all ran slower has a
higher median and no stall: the two are told apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "STALLED_SHARE",
    "STALL_FACTOR",
    "StepTimes",
    "bucket_key",
    "parse_bucket_key",
]

STALL_FACTOR = 3.0
STALLED_SHARE = 0.02


def bucket_key(name: str, le: float) -> str:
    """How one cumulative bucket of histogram ``name`` is kept beside the counters (a counter itself)."""
    return f"{name}_bucket|{'+Inf' if math.isinf(le) else repr(le)}"


def parse_bucket_key(key: str, name: str) -> float | None:
    """The upper bound of ``key`` when it is one of ``name``'s buckets; None otherwise."""
    prefix = f"{name}_bucket|"
    if not key.startswith(prefix):
        return None
    text = key[len(prefix) :]
    return math.inf if text == "+Inf" else float(text)


@dataclass(frozen=True)
class StepTimes:
    """One run's steps as its histogram tells them. Times in seconds; ``p50``/``p99`` interpolated within
    their bucket (``p50_bucket``, ``p99_bucket``: the buckets' bounds), ``max_bucket`` the slowest step's bucket."""

    steps: int
    total_s: float
    p50: float
    p99: float
    p50_bucket: tuple[float, float]
    p99_bucket: tuple[float, float]
    max_bucket: tuple[float, float]
    stall_steps: int  # steps slower than STALL_FACTOR x the median, for certain
    stall_s: float  # at least this much of total_s was in them

    @property
    def stall_share(self) -> float:
        return self.stall_s / self.total_s if self.total_s > 0 else 0.0

    @property
    def stalled(self) -> bool:
        return self.stall_share >= STALLED_SHARE

    @classmethod
    def from_counts(cls, counts: Mapping[float, float], *, total_s: float) -> StepTimes | None:
        """From cumulative bucket counts over the run (upper bound -> steps at or below it, ``inf`` for all)
        and the histogram's sum over the run; None where the run observed no step."""
        bounds = sorted(counts)
        cumulative = [max(0.0, counts[b]) for b in bounds]
        if not bounds or cumulative[-1] < 1:
            return None
        # each bucket on its own: (lower, upper, steps)
        buckets = [
            (bounds[i - 1] if i else 0.0, bounds[i], cumulative[i] - (cumulative[i - 1] if i else 0.0))
            for i in range(len(bounds))
        ]
        steps = cumulative[-1]
        median, tail = _bucket_of(buckets, 0.5 * steps), _bucket_of(buckets, 0.99 * steps)
        threshold = STALL_FACTOR * buckets[median][1]
        stall = [(low, n) for low, _, n in buckets if low >= threshold and n > 0]
        slowest = max(i for i, (_, _, n) in enumerate(buckets) if n > 0)
        return cls(
            steps=round(steps),
            total_s=total_s,
            p50=_quantile(buckets, 0.5, steps),
            p99=_quantile(buckets, 0.99, steps),
            p50_bucket=buckets[median][:2],
            p99_bucket=buckets[tail][:2],
            max_bucket=buckets[slowest][:2],
            stall_steps=round(sum(n for _, n in stall)),
            stall_s=min(total_s, sum(low * n for low, n in stall)),
        )

    def summary(self) -> dict[str, Any]:
        """As a run's entry keeps it (JSON: an open bucket's bound as None)."""

        def bound(value: float) -> float | None:
            return None if math.isinf(value) else round(value, 6)

        return {
            "steps": self.steps,
            "total_s": round(self.total_s, 4),
            # a percentile in a bucket that starts at 0 is only "under its bound": None rather than a guess
            "p50_ms": None if self.p50_bucket[0] == 0 else round(1000 * self.p50, 3),
            "p99_ms": None if self.p99_bucket[0] == 0 else round(1000 * self.p99, 3),
            "p50_bucket_s": [bound(v) for v in self.p50_bucket],
            "p99_bucket_s": [bound(v) for v in self.p99_bucket],
            "max_bucket_s": [bound(v) for v in self.max_bucket],
            "stall_steps": self.stall_steps,
            "stall_s": round(self.stall_s, 4),
            "stall_share": round(self.stall_share, 5),
            "stalled": self.stalled,
        }


def _bucket_of(buckets: list[tuple[float, float, float]], rank: float) -> int:
    seen = 0.0
    for i, (_, _, n) in enumerate(buckets):
        seen += n
        if seen >= rank and n > 0:
            return i
    return len(buckets) - 1


def _quantile(buckets: list[tuple[float, float, float]], q: float, steps: float) -> float:
    """As Prometheus's ``histogram_quantile``: linear within the bucket; an open last bucket gives its lower bound."""
    rank = q * steps
    i = _bucket_of(buckets, rank)
    low, high, n = buckets[i]
    if math.isinf(high):
        return low
    below = sum(b[2] for b in buckets[:i])
    return low + (high - low) * min(1.0, max(0.0, (rank - below) / n))
