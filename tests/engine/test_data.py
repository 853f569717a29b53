import json
import re

import pytest

from engine.config import STUDIES_DIR, load_ppl_records, load_prompts
from errors import DataError

DATA = STUDIES_DIR / "data"


def test_the_project_prompt_sets_have_128_disjoint_prompts_in_the_challenge_spread():
    public, heldout = (load_prompts(DATA / f"prompts_{name}.json") for name in ("public", "heldout"))
    assert len(public) == len(heldout) == 128
    assert not {p.text for p in public} & {p.text for p in heldout}
    for name in ("public", "heldout"):
        sources = [r["source"] for r in json.loads((DATA / f"prompts_{name}.json").read_text())]
        assert {s: sources.count(s) for s in set(sources)} == {"knowledge": 57, "science": 57, "math": 14}


def test_prompts_ask_varied_questions():
    texts = [p.text for p in load_prompts(DATA / "prompts_public.json")]
    questions = {re.split(r"\n\n", t, maxsplit=1)[1].split("\n")[0] for t in texts}
    assert len(questions) == 128
    assert len({len(t) // 50 for t in texts}) > 5  # lengths spread, not one template size


def test_the_challenge_sharegpt_format_loads(tmp_path):
    path = tmp_path / "eval_prompts_sharegpt.json"
    path.write_text(
        json.dumps(
            [
                {
                    "id": "mmlu_pro-1",
                    "conversations": [{"from": "human", "value": "Q1?"}, {"from": "gpt", "value": "A"}],
                },
                {"conversation": [{"from": "user", "value": "Q2?"}, {"from": "gpt", "value": ""}]},
            ]
        )
    )
    prompts = load_prompts(path)
    assert [(p.id, p.text) for p in prompts] == [("mmlu_pro-1", "Q1?"), ("1", "Q2?")]
    assert len(load_prompts(path, limit=1)) == 1


def test_the_challenge_jsonl_format_loads(tmp_path):
    path = tmp_path / "ppl_ground_truth_tokens.jsonl"
    path.write_text(
        '{"id": 0, "context_token_ids": [2, 105, 7], "target_token_ids": [9, 10]}\n\n'
        '{"id": 1, "context_token_ids": [2], "target_token_ids": [11]}\n'
    )
    records = load_ppl_records(path, vocab_size=262144)
    assert records[0].context_token_ids == (2, 105, 7) and records[1].target_token_ids == (11,)
    assert records[0].id == "0"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"conversations": [{"from": "human", "value": "Q"}', r"not valid JSON"),
        ('{"conversations": []}', r"non-empty JSON list"),
        ("[]", r"non-empty JSON list"),
        ('["just a string"]', r"record 0: a prompt record must be an object, got str"),
        ('[{"turns": []}]', r"record 0: no 'conversations' list"),
        ('[{"conversations": [{"from": "gpt", "value": "A"}]}]', r"record 0: no turn from 'human'"),
        ('[{"conversations": [{"from": "human", "value": ""}]}]', r"record 0: the human turn's 'value'"),
    ],
)
def test_bad_prompt_files_are_data_errors_naming_file_and_record(tmp_path, content, message):
    path = tmp_path / "prompts.json"
    path.write_text(content)
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}.*{message}"):
        load_prompts(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"context_token_ids": [1, 2], "target_token_ids": [3', r"line 1: not valid JSON"),
        ('{"context_token_ids": [1], "target_token_ids": [2]}\n[1, 2]', r"line 2: a record must be a JSON object"),
        ('{"context_token_ids": [1], "target": [2]}', r"line 1: 'target_token_ids' must be a non-empty list"),
        ('{"context_token_ids": [], "target_token_ids": [2]}', r"line 1: 'context_token_ids' must be a non-empty"),
        ('{"context_token_ids": [1, "a"], "target_token_ids": [2]}', r"'context_token_ids' holds 'a', not a token id"),
        ('{"context_token_ids": [1, -4], "target_token_ids": [2]}', r"holds -4, not a token id"),
        ('{"context_token_ids": [1, 2.5], "target_token_ids": [2]}', r"holds 2.5, not a token id"),
        (
            '{"context_token_ids": [1], "target_token_ids": [262144]}',
            r"'target_token_ids' holds token id 262144, outside the vocabulary of 262144",
        ),
        ("\n\n", r"no records"),
    ],
)
def test_bad_reference_files_are_data_errors_naming_file_and_line(tmp_path, content, message):
    path = tmp_path / "refs.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}.*{message}"):
        load_ppl_records(path, vocab_size=262144)


def test_asking_for_more_than_the_file_holds_or_a_missing_file(tmp_path):
    path = tmp_path / "refs.jsonl"
    path.write_text('{"context_token_ids": [1], "target_token_ids": [2]}\n')
    with pytest.raises(DataError, match=r"8 records asked for, the file has 1"):
        load_ppl_records(path, limit=8)
    with pytest.raises(DataError, match=r"cannot read prompt set"):
        load_prompts(tmp_path / "missing.json")
