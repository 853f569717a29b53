"""The organisers' PPL request, field for field, and vLLM's answer to it: the PPL wire of every stack that
speaks vLLM's ``/v1/completions`` (``ORGANISERS``).

One ``POST /v1/completions`` per record, as their ``ppl_endpoint.py`` sends it: ``prompt`` = context + target
token ids, ``prompt_logprobs=1``, ``max_tokens=1``, ``temperature=0``, ``add_special_tokens=false``,
``return_token_ids=true``. The answer's ``choices[0].prompt_logprobs`` (vLLM's shape: ``None`` for the first
prompt token, then per position a dict keyed by token id, each ``{"logprob", "rank", "decoded_token"}``) gives
log P(token | prefix) of every target token (``target_nlls``: their NLLs in order, which the PPL sums and the
length buckets place by position: ``engine.measurement``).
"""

from __future__ import annotations

import math
from typing import Any

from engine.config import PplRecord
from engine.http import first_choice
from engine.stacks._adapter import PplWire
from errors import BenchmarkError

__all__ = ["ORGANISERS", "ppl_payload", "target_nlls"]


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


def target_nlls(data: dict[str, Any], record: PplRecord) -> list[float]:
    """The NLL of each of the record's target tokens, in order, in one ``/v1/completions`` answer."""
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
    return [-_logprob(entries[i], prompt[i], where=f"{what} position {i}") for i in range(start, len(prompt))]


ORGANISERS = PplWire(request=lambda record, model: ppl_payload(record, model=model), nlls=target_nlls)
