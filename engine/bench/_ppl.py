"""PPL exactly as the challenge's ``ppl_endpoint``: teacher-forced over a reference set.

One ``POST /v1/completions`` per record: ``prompt`` = context + target token ids,
``prompt_logprobs=1``, ``max_tokens=1``, ``temperature=0``, ``add_special_tokens=false``,
``return_token_ids=true``: the organisers' scorer's fields, every one. The
answer's ``choices[0].prompt_logprobs`` (vLLM's shape: ``None`` for the first prompt token, then
per position a dict keyed by token id, each ``{"logprob", "rank", "decoded_token"}``) gives
log P(token | prefix) of every target token. PPL = exp(total NLL / target tokens), token-weighted;
the mean of per-record PPLs is reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.bench._http import first_choice, post_json
from engine.data import PplRecord
from errors import BenchmarkError


@dataclass
class PplResult:
    ppl: float
    ppl_mean_record: float
    target_tokens: int
    records: int
    per_record: list[dict[str, Any]] = field(default_factory=list)  # id, nll, tokens, ppl


def ppl_payload(record: PplRecord, *, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": [*record.context_token_ids, *record.target_token_ids],
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": 1,
        "add_special_tokens": False,
        "return_token_ids": True,
    }


def _logprob(entry: Any, token: int, *, where: str) -> float:
    if not isinstance(entry, dict):
        raise BenchmarkError(f"{where}: prompt_logprobs entry is {type(entry).__name__}, not an object")
    item = entry.get(str(token))
    if item is None:
        raise BenchmarkError(f"{where}: the prompt token {token} is missing from its prompt_logprobs entry")
    value = item.get("logprob") if isinstance(item, dict) else item
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise BenchmarkError(f"{where}: logprob of token {token} is {value!r}, not a finite number")
    return float(value)


def record_nll(data: dict[str, Any], record: PplRecord) -> float:
    """Total NLL of the record's target tokens in one ``/v1/completions`` answer."""
    what = f"PPL record {record.id}"
    choice = first_choice(data, what=what)
    entries = choice.get("prompt_logprobs")
    prompt = [*record.context_token_ids, *record.target_token_ids]
    if not isinstance(entries, list) or len(entries) != len(prompt):
        size = len(entries) if isinstance(entries, list) else entries
        raise BenchmarkError(
            f"{what}: expected 'choices[0].prompt_logprobs' with {len(prompt)} entries "
            f"(one per prompt token), got {size!r}"
        )
    start = len(record.context_token_ids)
    return -sum(_logprob(entries[i], prompt[i], where=f"{what} position {i}") for i in range(start, len(prompt)))


def measure_ppl(client: httpx.Client, *, model: str, records: list[PplRecord]) -> PplResult:
    total_nll, total_tokens = 0.0, 0
    per_record: list[dict[str, Any]] = []  # PplResult.per_record's rows
    for record in records:
        data = post_json(client, "/v1/completions", ppl_payload(record, model=model), what=f"PPL record {record.id}")
        nll = record_nll(data, record)
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
