"""Prompt sets and PPL reference sets: loading and validating them.

Formats are the challenge's own, so its files load unchanged:

- prompts: ShareGPT-style JSON, a list of ``{"id"?, "conversations": [{"from": "human",
  "value": <prompt>}, {"from": "gpt", "value": ...}]}``; the first human turn is the prompt
  (``conversation`` and ``"from": "user"`` are accepted too, as SGLang accepts them). With a
  shuffle seed, the set is sampled exactly as sglang 0.5.2's ``bench_serving`` samples a ShareGPT
  file (the organisers' harness: ``--seed 1``): conversations of fewer than two turns are dropped,
  then ``random.seed(seed); random.shuffle(...)`` orders the rest.
- PPL references: JSONL, one ``{"id"?, "context_token_ids": [...], "target_token_ids": [...]}``
  per line; contexts are chat-templated prompts, targets the continuation to score.

Anything else is a ``DataError`` naming the file, the record and the problem.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.files import load_json, parse_json, read_text
from errors import DataError

__all__ = ["PplRecord", "Prompt", "load_ppl_records", "load_prompts"]


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


@dataclass(frozen=True)
class PplRecord:
    id: str
    context_token_ids: tuple[int, ...]
    target_token_ids: tuple[int, ...]


def _take(items: list[Any], limit: int | None, *, path: Path, what: str) -> list[Any]:
    if limit is not None and limit > len(items):
        raise DataError(f"{path}: {limit} {what} asked for, the file has {len(items)}")
    return items if limit is None else items[:limit]


def _first_human_turn(record: Any, where: str) -> str:
    if not isinstance(record, dict):
        raise DataError(f"{where}: a prompt record must be an object, got {type(record).__name__}")
    turns = record.get("conversations", record.get("conversation"))
    if not isinstance(turns, list):
        raise DataError(f"{where}: no 'conversations' list")
    for turn in turns:
        if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
            value = turn.get("value")
            if not isinstance(value, str) or not value.strip():
                raise DataError(f"{where}: the human turn's 'value' must be a non-empty string")
            return value
    raise DataError(f"{where}: no turn from 'human'")


def load_prompts(path: Path, *, limit: int | None = None, shuffle_seed: int | None = None) -> list[Prompt]:
    """The first ``limit`` prompts (all when None) of a ShareGPT-style JSON file, in the file's
    order or in sglang bench_serving's order for ``shuffle_seed``."""
    path = Path(path)
    data = load_json(path, DataError, what="prompt set")
    if not isinstance(data, list) or not data:
        raise DataError(f"{path}: a prompt set must be a non-empty JSON list of records")
    prompts = []
    for i, record in enumerate(data):
        text = _first_human_turn(record, f"{path} record {i}")
        if shuffle_seed is not None and len(record.get("conversations", record.get("conversation", []))) < 2:
            continue  # bench_serving drops these before it shuffles
        prompts.append(Prompt(id=str(record.get("id", i)), text=text))
    if shuffle_seed is not None:
        # bench_serving seeds the module's generator and shuffles once: a Random(seed) shuffle is
        # the same permutation, without touching the process's global random state.
        random.Random(shuffle_seed).shuffle(prompts)
    return _take(prompts, limit, path=path, what="prompts")


def _token_ids(value: Any, *, field: str, where: str, vocab_size: int | None) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: '{field}' must be a non-empty list of token ids")
    for token in value:
        if not isinstance(token, int) or isinstance(token, bool) or token < 0:
            raise DataError(f"{where}: '{field}' holds {token!r}, not a token id (integer >= 0)")
        if vocab_size is not None and token >= vocab_size:
            raise DataError(f"{where}: '{field}' holds token id {token}, outside the vocabulary of {vocab_size}")
    return tuple(value)


def load_ppl_records(path: Path, *, limit: int | None = None, vocab_size: int | None = None) -> list[PplRecord]:
    """The first ``limit`` records (all when None) of a PPL reference JSONL file."""
    path = Path(path)
    lines = read_text(path, DataError, what="PPL reference set").splitlines()
    records: list[PplRecord] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        raw = parse_json(line, DataError, where=where)
        if not isinstance(raw, dict):
            raise DataError(f"{where}: a record must be a JSON object")
        records.append(
            PplRecord(
                id=str(raw.get("id", len(records))),
                context_token_ids=_token_ids(
                    raw.get("context_token_ids"), field="context_token_ids", where=where, vocab_size=vocab_size
                ),
                target_token_ids=_token_ids(
                    raw.get("target_token_ids"), field="target_token_ids", where=where, vocab_size=vocab_size
                ),
            )
        )
    if not records:
        raise DataError(f"{path}: no records")
    return _take(records, limit, path=path, what="records")
