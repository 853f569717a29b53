"""Benchmark data files, fuzzed: a prompt set or PPL reference set either loads into well-formed
records, or is refused with a ``DataError`` that names the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from engine.config import load_ppl_records, load_prompts
from errors import DataError
from tests.fuzz.tally import record
from tests.fuzz.values import damaged, fuzz_settings, json_values, nasty_text, numbers

FUZZ = fuzz_settings(150)
VOCAB = 262144

PROMPT = {"id": "p0", "conversations": [{"from": "human", "value": "What is 2 + 3?"}, {"from": "gpt", "value": ""}]}
REF = {"id": "r0", "context_token_ids": [2, 106, 1645], "target_token_ids": [818, 5279, 236761]}
token_ids = st.one_of(
    st.lists(st.integers(0, VOCAB - 1), max_size=4),
    st.lists(numbers, max_size=4),
    st.lists(json_values, max_size=3),
    json_values,
)


@st.composite
def prompt_records(draw: st.DrawFn) -> Any:
    record_ = json.loads(json.dumps(PROMPT))
    how = draw(st.sampled_from(["value", "from", "turns", "record", "id", "key", "fine"]))
    if how == "value":
        record_["conversations"][0]["value"] = draw(st.one_of(nasty_text, json_values))
    elif how == "from":
        record_["conversations"][0]["from"] = draw(st.one_of(st.sampled_from(["user", "gpt", "system"]), json_values))
    elif how == "turns":
        record_["conversations"] = draw(st.one_of(json_values, st.lists(json_values, max_size=3)))
    elif how == "record":
        record_ = draw(json_values)
    elif how == "id":
        record_["id"] = draw(json_values)
    elif how == "key":
        record_[draw(st.sampled_from(["conversation", "messages"]))] = record_.pop("conversations")
    return record_


@st.composite
def ref_records(draw: st.DrawFn) -> Any:
    record_ = json.loads(json.dumps(REF))
    how = draw(st.sampled_from(["context", "target", "drop", "record", "id", "fine"]))
    if how in ("context", "target"):
        record_[f"{how}_token_ids"] = draw(token_ids)
    elif how == "drop":
        record_.pop(draw(st.sampled_from(sorted(REF))))
    elif how == "record":
        record_ = draw(json_values)
    elif how == "id":
        record_["id"] = draw(json_values)
    return record_


limits = st.one_of(st.none(), st.integers(1, 6))


def _prompts(path: Path, limit: int | None) -> None:
    try:
        prompts = load_prompts(path, limit=limit)
    except DataError as exc:
        assert str(path) in str(exc), str(exc)
        return
    assert prompts and (limit is None or len(prompts) == limit)
    assert all(isinstance(p.text, str) and p.text.strip() and isinstance(p.id, str) for p in prompts)


def _refs(path: Path, limit: int | None, vocab_size: int | None) -> None:
    try:
        records = load_ppl_records(path, limit=limit, vocab_size=vocab_size)
    except DataError as exc:
        assert str(path) in str(exc), str(exc)
        return
    assert records and (limit is None or len(records) == limit)
    top = vocab_size or float("inf")
    for r in records:
        for ids in (r.context_token_ids, r.target_token_ids):
            assert ids and all(type(t) is int and 0 <= t < top for t in ids)


@FUZZ
@given(records=st.one_of(st.lists(prompt_records(), max_size=4), json_values), limit=limits)
def test_a_prompt_set_loads_or_is_a_data_error(records, limit, tmp_path_factory):
    record("prompt sets", (records, limit))
    path = tmp_path_factory.mktemp("data") / "prompts.json"
    path.write_text(json.dumps(records))
    _prompts(path, limit)


@FUZZ
@given(data=damaged(json.dumps([PROMPT, PROMPT])), limit=limits)
def test_a_damaged_prompt_file_is_a_data_error(data, limit, tmp_path_factory):
    record("prompt files (damaged)", (data, limit))
    path = tmp_path_factory.mktemp("data") / "prompts.json"
    path.write_bytes(data)
    _prompts(path, limit)


@FUZZ
@given(
    lines=st.lists(st.one_of(ref_records().map(json.dumps), nasty_text), max_size=4),
    limit=limits,
    vocab_size=st.one_of(st.none(), st.sampled_from([2, 1000, VOCAB])),
)
def test_a_ppl_reference_set_loads_or_is_a_data_error(lines, limit, vocab_size, tmp_path_factory):
    record("PPL reference sets", (lines, limit, vocab_size))
    path = tmp_path_factory.mktemp("data") / "refs.jsonl"
    path.write_text("\n".join(lines) + "\n", errors="surrogatepass")
    _refs(path, limit, vocab_size)


@FUZZ
@given(data=damaged("\n".join(json.dumps(REF) for _ in range(3)) + "\n"), limit=limits)
def test_a_damaged_ppl_reference_file_is_a_data_error(data, limit, tmp_path_factory):
    record("PPL reference files (damaged)", (data, limit))
    path = tmp_path_factory.mktemp("data") / "refs.jsonl"
    path.write_bytes(data)
    _refs(path, limit, VOCAB)
