"""A stack's own counters from its Prometheus ``/metrics`` (the names its adapter gives), read around each timed run.

Read before the run's first request and after its last, never while it runs: a scrape costs the API
server's time, which is the request path. Counters and histograms' ``_sum``/``_count`` only (their
differences over a run mean something); a name the stack does not expose is left out.
"""

from __future__ import annotations

import math
from typing import Any

import httpx

from engine.stacks import MetricNames


def parse_counters(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Sum of each named metric over all its label sets; names absent from the text are left out."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_and_labels, _, rest = line.partition(" ")
        name = name_and_labels.split("{", 1)[0]
        if name in names:
            try:
                value = float(rest.split()[0])
            except (IndexError, ValueError):
                continue
            if math.isfinite(value):  # NaN or Inf is no count (and int() of it raises)
                totals[name] = totals.get(name, 0.0) + value
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
    return parse_counters(response.text, metrics.counters)


def counter_deltas(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """What each counter read both times moved by (empty without both readings)."""
    if before is None or after is None:
        return {}
    return {name: after[name] - before[name] for name in before if name in after}


def stack_figures(
    deltas: dict[str, float], metrics: MetricNames | None, *, wall_s: float, tokens: int
) -> dict[str, Any]:
    """One run's step figures from its counters: steps (vLLM's per-step histogram's count, else the number of
    drafts, one a step at concurrency 1), ms a step, tokens a step, acceptance; plus every delta read."""
    if metrics is None:
        return {
            "counters": {},
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
    return {
        "counters": {name: round(value, 6) for name, value in deltas.items()},
        "steps": int(steps) if steps else None,
        "steps_from": source if steps else None,
        "step_ms": round(1000 * wall_s / steps, 4) if steps else None,
        "tokens_per_step": round(tokens / steps, 4) if steps else None,
        "acceptance": round(accepted / drafted, 6) if drafted and accepted is not None else None,
        "accepted_per_draft": round(accepted / drafts, 4) if drafts and accepted is not None else None,
    }
