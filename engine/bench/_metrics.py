"""A stack's own counters from its Prometheus ``/metrics`` (the names its adapter gives), read around each timed run.

Read before the run's first request and after its last, never while it runs: a scrape costs the API
server's time, which is the request path. Counters, histograms' ``_sum``/``_count``, and the buckets of the
step-time histogram (``engine.bench._steps``): their differences over a run mean something; a name the stack
does not expose is left out.
"""

from __future__ import annotations

import math
import re
from typing import Any

import httpx

from engine.bench._steps import StepTimes, bucket_key, parse_bucket_key
from engine.stacks import MetricNames

_LE = re.compile(r'le="([^"]+)"')


def parse_counters(text: str, names: tuple[str, ...], *, buckets: str | None = None) -> dict[str, float]:
    """Sum of each named metric over all its label sets; names absent from the text are left out. ``buckets``:
    a histogram whose cumulative buckets are kept too (``engine.bench._steps.bucket_key``)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_and_labels, _, rest = line.partition(" ")
        name = name_and_labels.split("{", 1)[0]
        key = name
        if buckets is not None and name == f"{buckets}_bucket":
            le = _LE.search(name_and_labels)
            try:
                key = bucket_key(buckets, float(le.group(1))) if le else ""
            except ValueError:
                continue
        elif name not in names:
            continue
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        if key and math.isfinite(value):  # NaN or Inf is no count (and int() of it raises)
            totals[key] = totals.get(key, 0.0) + value
    return totals


def read_counters(client: httpx.Client, metrics: MetricNames | None) -> dict[str, float] | None:
    """The stack's counters (``metrics``) so far; None when it has no ``/metrics`` or none this project reads."""
    if metrics is None:
        return None
    try:
        response = client.get("/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return parse_counters(response.text, metrics.counters, buckets=metrics.step_seconds)


def counter_deltas(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """What each counter read both times moved by (empty without both readings)."""
    if before is None or after is None:
        return {}
    return {name: after[name] - before[name] for name in before if name in after}


def step_times(deltas: dict[str, float], metrics: MetricNames | None) -> StepTimes | None:
    """The run's step distribution from its step-time histogram's buckets; None where the stack has none."""
    name = metrics.step_seconds if metrics is not None else None
    if name is None:
        return None
    counts = {le: value for key, value in deltas.items() if (le := parse_bucket_key(key, name)) is not None}
    return StepTimes.from_counts(counts, total_s=deltas.get(f"{name}_sum", 0.0)) if counts else None


def stack_figures(
    deltas: dict[str, float], metrics: MetricNames | None, *, wall_s: float, tokens: int
) -> dict[str, Any]:
    """One run's step figures from its counters: steps (vLLM's per-step histogram's count, else the number of
    drafts, one a step at concurrency 1), ms a step, tokens a step, acceptance, the steps' distribution
    (``step_times``: None without a step-time histogram) and its non-empty buckets (upper bound, steps in
    it); plus every other delta read."""
    if metrics is None:
        return {
            "counters": {},
            "step_times": None,
            "step_buckets": [],
            "steps": None,
            "steps_from": None,
            "step_ms": None,
            "tokens_per_step": None,
            "acceptance": None,
            "accepted_per_draft": None,
        }
    step_counter, draft_counter = metrics.steps, metrics.drafts
    steps, source = (
        (deltas.get(step_counter), step_counter)
        if deltas.get(step_counter)
        else (deltas.get(draft_counter), draft_counter)
    )
    drafted, accepted, drafts = deltas.get(metrics.drafted), deltas.get(metrics.accepted), deltas.get(draft_counter)
    name = metrics.step_seconds or ""
    bounds = sorted(
        (le, value) for key, value in deltas.items() if name and (le := parse_bucket_key(key, name)) is not None
    )
    times = step_times(deltas, metrics)
    return {
        "counters": {key: round(value, 6) for key, value in deltas.items() if "_bucket|" not in key},
        "step_times": times.summary() if times else None,
        "step_buckets": [
            [None if math.isinf(le) else le, round(n - (bounds[i - 1][1] if i else 0.0))]
            for i, (le, n) in enumerate(bounds)
            if n - (bounds[i - 1][1] if i else 0.0) > 0
        ],
        "steps": int(steps) if steps else None,
        "steps_from": source if steps else None,
        "step_ms": round(1000 * wall_s / steps, 4) if steps else None,
        "tokens_per_step": round(tokens / steps, 4) if steps else None,
        "acceptance": round(accepted / drafted, 6) if drafted and accepted is not None else None,
        "accepted_per_draft": round(accepted / drafts, 4) if drafts and accepted is not None else None,
    }
