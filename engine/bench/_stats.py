"""Percentile summaries of per-request timings, and the spread of repeated measurements."""

from __future__ import annotations

import statistics

import numpy as np


def coefficient_of_variation(values: list[float]) -> float | None:
    """Sample stdev / mean; None for fewer than two values or a mean that is not positive."""
    if len(values) < 2 or statistics.fmean(values) <= 0:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def summarize(values: list[float], *, prefix: str = "") -> dict[str, float]:
    """mean, min, max and p50/p90/p99 (linear interpolation, as numpy), keys ``<prefix>p50`` ..."""
    if not values:
        return {}
    array = np.asarray(values, dtype=float)
    summary = {"mean": array.mean(), "min": array.min(), "max": array.max()}
    summary.update({f"p{q}": np.percentile(array, q) for q in (50, 90, 99)})
    return {f"{prefix}{key}": float(value) for key, value in summary.items()}
