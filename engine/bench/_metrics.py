"""A stack's own counters from its Prometheus ``/metrics`` (vLLM's names), read around each timed run.

Read before the run's first request and after its last, never while it runs: a scrape costs the API
server's time, which is the request path. Counters and histograms' ``_sum``/``_count`` only (their
differences over a run mean something); a name the stack does not expose is left out.
"""

from __future__ import annotations

import math
from typing import Any

import httpx

DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"  # one per request per step that drafted
STEPS = "vllm:iteration_tokens_total_count"  # vLLM observes its tokens-per-step histogram once a step
COUNTERS = (
    DRAFTS,
    DRAFTED,
    ACCEPTED,
    STEPS,
    "vllm:iteration_tokens_total_sum",
    "vllm:generation_tokens_total",
    "vllm:inter_token_latency_seconds_count",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:time_per_output_token_seconds_count",
    "vllm:time_per_output_token_seconds_sum",
    "vllm:request_decode_time_seconds_count",
    "vllm:request_decode_time_seconds_sum",
    "vllm:request_prefill_time_seconds_sum",
)


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


def read_counters(client: httpx.Client) -> dict[str, float] | None:
    """The stack's ``COUNTERS`` so far, or None when it has no ``/metrics``."""
    try:
        response = client.get("/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return parse_counters(response.text, COUNTERS)


def counter_deltas(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """What each counter read both times moved by (empty without both readings)."""
    if before is None or after is None:
        return {}
    return {name: after[name] - before[name] for name in COUNTERS if name in before and name in after}


def stack_figures(deltas: dict[str, float], *, wall_s: float, tokens: int) -> dict[str, Any]:
    """One run's step figures from its counters: steps (vLLM's per-step histogram's count, else the number of
    drafts, one a step at concurrency 1), ms a step, tokens a step, acceptance; plus every delta read."""
    steps, source = (deltas.get(STEPS), STEPS) if deltas.get(STEPS) else (deltas.get(DRAFTS), DRAFTS)
    drafted, accepted, drafts = deltas.get(DRAFTED), deltas.get(ACCEPTED), deltas.get(DRAFTS)
    return {
        "counters": {name: round(value, 6) for name, value in deltas.items()},
        "steps": int(steps) if steps else None,
        "steps_from": source if steps else None,
        "step_ms": round(1000 * wall_s / steps, 4) if steps else None,
        "tokens_per_step": round(tokens / steps, 4) if steps else None,
        "acceptance": round(accepted / drafted, 6) if drafted and accepted is not None else None,
        "accepted_per_draft": round(accepted / drafts, 4) if drafts and accepted is not None else None,
    }
