"""PPL exactly as the challenge's ``ppl_endpoint``: teacher-forced over a reference set.

One request per record, as the stack's PPL wire says (``engine.stacks``: the organisers' own request
on every stack that speaks vLLM's API); PPL = exp(total NLL / target tokens), token-weighted; the mean
of per-record PPLs is reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.config import PplRecord
from engine.http import post_json
from engine.stacks import ORGANISERS, PplWire


@dataclass
class PplResult:
    ppl: float
    ppl_mean_record: float
    target_tokens: int
    records: int
    per_record: list[dict[str, Any]] = field(default_factory=list)  # id, nll, tokens, ppl


def measure_ppl(client: httpx.Client, *, model: str, records: list[PplRecord], wire: PplWire = ORGANISERS) -> PplResult:
    """PPL over ``records``, each asked for as the stack's ``wire`` says (the organisers' request by default)."""
    total_nll, total_tokens = 0.0, 0
    per_record: list[dict[str, Any]] = []  # PplResult.per_record's rows
    for record in records:
        data = post_json(client, "/v1/completions", wire.request(record, model), what=f"PPL record {record.id}")
        nll = wire.nll(data, record)
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
