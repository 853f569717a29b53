"""Speculative-decoding counters from a stack's Prometheus ``/metrics`` (vLLM's names)."""

from __future__ import annotations

import math

import httpx

DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


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


def read_spec_counters(client: httpx.Client) -> tuple[float, float] | None:
    """(drafted, accepted) so far, or None when the stack exposes no such counters."""
    try:
        response = client.get("/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    totals = parse_counters(response.text, (DRAFTED, ACCEPTED))
    if DRAFTED not in totals or ACCEPTED not in totals:
        return None
    return totals[DRAFTED], totals[ACCEPTED]
