"""The held-out set in the organisers' formats and lengths (``python -m datagen.heldout``)."""

from __future__ import annotations

import json
import os
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from datagen import heldout
from datagen.promptset import FILES, SPREAD

REPO = Path(__file__).resolve().parents[2]


def _texts(path: Path) -> list[str]:
    return [r["conversations"][0]["value"] for r in json.loads(path.read_text())]


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return json.loads(heldout.OUTPUT.read_text())


@pytest.fixture
def challenge(challenge_data) -> Path:
    """The organisers' folder, as the README's test setting names it (tests/conftest.py)."""
    return challenge_data


@pytest.fixture(scope="module")
def tokenizer():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return heldout.load_tokenizer()


@pytest.mark.slow
def test_the_committed_set_is_what_the_generator_writes(records, challenge, tokenizer):
    assert heldout.build_set(tokenizer, heldout.target_lengths(challenge, tokenizer)) == records


def test_spread_answers_ids_and_no_overlap_with_the_other_sets(records):
    assert Counter(r["source"] for r in records) == Counter(SPREAD)
    assert [r["id"] for r in records] == [f"heldout-challenge-{i:03d}" for i in range(len(records))]
    for record in records:
        text = record["conversations"][0]["value"]
        assert [t["from"] for t in record["conversations"]] == ["human", "gpt"]
        if record["source"] == "knowledge":
            assert record["answer"] in "ABCDEFGHIJ" and "\nOptions:\nA) " in text and "\nJ) " in text
        elif record["source"] == "science":
            assert record["answer"] in "ABCD" and "\nD) " in text and "\nE) " not in text
        else:
            assert re.fullmatch(r"\d{1,3}", record["answer"]) and text.endswith("a \\boxed command.")
    texts = [r["conversations"][0]["value"] for r in records]
    assert len(set(texts)) == len(texts)
    others = {t for path in FILES.values() for t in _texts(path)}
    assert others.isdisjoint(texts)


def test_no_prompt_is_one_of_the_organisers(records, challenge):
    theirs = _texts(challenge / heldout.CHALLENGE_FILE)
    assert set(theirs).isdisjoint(r["conversations"][0]["value"] for r in records)


@pytest.mark.slow
def test_the_set_is_as_long_as_the_organisers_and_the_project_sets_are_alike(records, challenge, tokenizer):
    def median(texts: list[str]) -> float:
        return statistics.median(heldout.prompt_tokens(tokenizer, t) for t in texts)

    ours = [r["conversations"][0]["value"] for r in records]
    pairs = {
        "organisers' public vs prompts_heldout_challenge": (
            median(_texts(challenge / heldout.CHALLENGE_FILE)),
            median(ours),
        ),
        "prompts_public vs prompts_heldout": (median(_texts(FILES["public"])), median(_texts(FILES["heldout"]))),
    }
    for name, (a, b) in pairs.items():
        print(f"median prompt tokens, {name}: {a:g} vs {b:g}")
    for name, (a, b) in pairs.items():
        assert abs(a - b) / a < 0.10, name
