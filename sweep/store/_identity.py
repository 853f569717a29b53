"""Greedy identity: generated token ids, stored compactly, compared with the baseline's.

A knob that only changes how fast tokens are produced (one marked ``lossless`` in the knob
registry: the drafter's ``centroid_top_k``, the number of speculative tokens) must not change
greedy output. Every trial keeps the token ids of its TPS run; a trial whose knobs differ from
the baseline's only in such knobs is compared prompt by prompt with the baseline trial
(``sweep.store.Judge``), and the number of prompts whose output differs is the trial's
``identity_diff_prompts``. A stack that returns no token ids is compared by the sha256 of each
answer's text, which the benchmark records for every prompt.

Packed form: zlib over little-endian int32 ``[n_prompts, len_0 .. len_n-1, ids ...]``: about
a fifth of the JSON size for the challenge's 128 x 512 tokens.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["differing_prompts", "pack_token_ids", "unpack_token_ids"]

_DTYPE = np.dtype("<i4")


def pack_token_ids(ids: Sequence[Sequence[int]]) -> bytes:
    lengths = [len(seq) for seq in ids]
    flat = [token for seq in ids for token in seq]
    array = np.array([len(ids), *lengths, *flat], dtype=_DTYPE)
    return zlib.compress(array.tobytes(), level=6)


def unpack_token_ids(blob: bytes) -> list[list[int]]:
    array = np.frombuffer(zlib.decompress(blob), dtype=_DTYPE)
    n = int(array[0])
    lengths = array[1 : n + 1]
    out, start = [], n + 1
    for length in lengths:
        out.append(array[start : start + length].tolist())
        start += int(length)
    return out


def differing_prompts(trial: Sequence[Any], baseline: Sequence[Any]) -> int:
    """How many prompts' outputs differ (per prompt: its token ids, or its text's hash); a
    prompt present in only one of the two counts."""
    common = min(len(trial), len(baseline))
    differ = sum(1 for a, b in zip(trial[:common], baseline[:common]) if a != b)
    return differ + abs(len(trial) - len(baseline))
