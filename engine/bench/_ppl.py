"""PPL exactly as the challenge's ``ppl_endpoint``: teacher-forced over a reference set.

One request per record, as the stack's PPL wire says (``engine.stacks``: the organisers' own request
on every stack that speaks vLLM's API); PPL = exp(total NLL / target tokens), token-weighted; the mean
of per-record PPLs is reported beside it. ``measure_lengths`` asks the same request of long texts and
places each target token's NLL in the bucket of its context length (``engine.measurement``): what stock vLLM
answers it is scored the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.config import PplRecord
from engine.http import post_json
from engine.measurement import LengthBucket, by_length
from engine.stacks import ORGANISERS, PplWire


@dataclass
class PplResult:
    ppl: float
    ppl_mean_record: float
    target_tokens: int
    records: int
    per_record: list[dict[str, Any]] = field(default_factory=list)  # id, nll, tokens, ppl


def _nlls(client: httpx.Client, record: PplRecord, *, model: str, wire: PplWire) -> list[float]:
    data = post_json(client, "/v1/completions", wire.request(record, model), what=f"PPL record {record.id}")
    return wire.nlls(data, record)


def measure_ppl(client: httpx.Client, *, model: str, records: list[PplRecord], wire: PplWire = ORGANISERS) -> PplResult:
    """PPL over ``records``, each asked for as the stack's ``wire`` says (the organisers' request by default)."""
    total_nll, total_tokens = 0.0, 0
    per_record: list[dict[str, Any]] = []  # PplResult.per_record's rows
    for record in records:
        nll = sum(_nlls(client, record, model=model, wire=wire))
        tokens = len(record.target_token_ids)
        total_nll += nll
        total_tokens += tokens
        per_record.append({"id": record.id, "nll": nll, "tokens": tokens, "ppl": math.exp(nll / tokens)})
    return PplResult(
        ppl=math.exp(total_nll / total_tokens),
        ppl_mean_record=sum(r["ppl"] for r in per_record) / len(per_record),
        target_tokens=total_tokens,
        records=len(records),
        per_record=per_record,
    )


def measure_lengths(
    client: httpx.Client,
    *,
    model: str,
    records: list[PplRecord],
    ends: Sequence[int],
    wire: PplWire = ORGANISERS,
) -> list[LengthBucket]:
    """The PPL of ``records`` (long texts) in the context-length buckets ending at ``ends``, one request a text."""
    scored = [(len(r.context_token_ids), _nlls(client, r, model=model, wire=wire)) for r in records]
    return by_length(scored, ends)
