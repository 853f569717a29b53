"""PPL by context length, typed: the buckets a trial's long texts are scored in, and their one stored shape.

A sliding window costs most where the context is long, which the challenge's records (a prompt and up to 512
target tokens) barely reach. So a profile may name a set of long texts (``length_refs``) and the context
lengths that cut it into buckets (``length_buckets``, e.g. 512, 1024, 2048): each text is scored once, in one
teacher-forced request, and every scored token falls in the bucket of its position, the number of tokens
before it (its context). A bucket's PPL is exp(its tokens' total NLL / its tokens), token-weighted as the
gate's own PPL.

Buckets by position, not texts truncated to each length: one request a text scores every bucket (truncation
would score a text's beginning once per bucket), and a bucket then holds only tokens that had that much
context, so the window's effect at 2k is not averaged with the same text's first 512 tokens.

``LengthBucket`` is what a trial stores (``Measurement.ppl_lengths``) and what the console, the gate
(``sweep.judgement``'s ``Gate.length_bucket``) and the exports read; ``by_length`` is the one arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LengthBucket", "bucket_bounds", "bucket_label", "by_length"]


def _tokens(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def bucket_label(start: int, end: int) -> str:
    """``"512-1k"``: the context lengths a bucket holds, (start, end] tokens."""
    return f"{_tokens(start)}-{_tokens(end)}"


def bucket_bounds(ends: Sequence[int]) -> list[tuple[int, int]]:
    """The buckets (0, ends[0]], (ends[0], ends[1]], ... as (start, end) pairs."""
    return list(zip([0, *ends[:-1]], ends))


@dataclass(frozen=True, kw_only=True)
class LengthBucket:
    """The scored tokens whose context held more than ``start`` and at most ``end`` tokens."""

    start: int
    end: int
    tokens: int
    nll: float  # their total negative log-likelihood, nats

    @property
    def ppl(self) -> float:
        return math.exp(self.nll / self.tokens)

    @property
    def label(self) -> str:
        return bucket_label(self.start, self.end)

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "tokens": self.tokens, "nll": self.nll}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LengthBucket:
        return cls(start=int(data["start"]), end=int(data["end"]), tokens=int(data["tokens"]), nll=float(data["nll"]))


def by_length(scored: Sequence[tuple[int, Sequence[float]]], ends: Sequence[int]) -> list[LengthBucket]:
    """The buckets (0, ends[0]], (ends[0], ends[1]], ... over ``scored``: per text, the position of its first
    scored token (the tokens before it) and each scored token's NLL in order. A token past the last end is left
    out; a bucket no token reached is left out (a set of shorter texts than the buckets ask for)."""
    bounds = bucket_bounds(ends)
    totals = [[0, 0.0] for _ in bounds]
    for first, nlls in scored:
        for offset, nll in enumerate(nlls):
            position = first + offset
            for i, (start, end) in enumerate(bounds):
                if start < position <= end:
                    totals[i][0] += 1
                    totals[i][1] += nll
                    break
    return [
        LengthBucket(start=start, end=end, tokens=int(n), nll=float(total))
        for (start, end), (n, total) in zip(bounds, totals)
        if n
    ]
