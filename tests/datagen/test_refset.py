"""The committed PPL reference sets are what ``python -m datagen.refset`` samples (slow: loads the model)."""

import pytest

from datagen import refset
from engine.data import load_ppl_records, load_prompts
from errors import DataError, GemmaSweepError

STEPS = 6  # a batch's first steps do not depend on how many follow, so a prefix is a fair check


@pytest.mark.slow
def test_the_first_batch_regenerates_bit_for_bit():
    # One set is enough: both come from the same code; a batch's prefill takes minutes on 2 cores.
    prompts_path, refs_path = refset.SETS["public"]
    prompts = load_prompts(prompts_path, limit=refset.BATCH)
    stored = load_ppl_records(refs_path, limit=refset.BATCH, vocab_size=262144)
    tokenizer, model = refset._load_model("cpu")
    contexts = [refset._context(tokenizer, p.text) for p in prompts]
    assert [list(r.context_token_ids) for r in stored] == contexts
    fresh = refset.sample_batch(model, contexts, [refset.SEED + i for i in range(len(contexts))],
                                stop_ids=refset._stop_ids(tokenizer), pad_id=tokenizer.pad_token_id, max_new=STEPS)
    assert fresh == [list(r.target_token_ids[:STEPS]) for r in stored]


def test_the_sets_have_128_records_on_the_prompts_in_order():
    for prompts_path, refs_path in refset.SETS.values():
        records = load_ppl_records(refs_path, vocab_size=262144)
        assert [r.id for r in records] == [p.id for p in load_prompts(prompts_path)]
        assert all(1 <= len(r.target_token_ids) <= refset.MAX_NEW for r in records)
        assert all(r.context_token_ids[:2] == (2, 105) for r in records)  # <bos><start_of_turn>


class _CharTokenizer:
    """A tokenizer that lost its merges and special tokens: every character one id."""

    bos_token_id = 2

    def apply_chat_template(self, messages, **kwargs):
        return {"input_ids": [2, *(ord(c) for c in "<start_of_turn>user\n" + messages[0]["content"])]}

    def convert_tokens_to_ids(self, token):
        return {"<start_of_turn>": 105}[token]

    def convert_ids_to_tokens(self, ids):
        return [chr(i) if i > 2 else "<bos>" for i in ids]


def test_a_tokenizer_that_splits_the_chat_template_is_refused():
    with pytest.raises(DataError, match=r"not <bos> then <start_of_turn> as single tokens"):
        refset._context(_CharTokenizer(), "What is 2 + 2?")


class _CachelessModel:
    """A model that ignores the cache it is handed, as transformers 5.17 ignored ``cache=``."""

    device = "cpu"

    def __init__(self):
        from transformers import Gemma3TextConfig

        self.config = Gemma3TextConfig(num_hidden_layers=2, vocab_size=128)

    def __call__(self, *, input_ids, **kwargs):
        import torch

        return type("Out", (), {"logits": torch.zeros(input_ids.shape[0], 1, 128)})()


def test_a_model_that_does_not_fill_the_cache_is_refused():
    with pytest.raises(GemmaSweepError, match=r"KV cache holds 0 positions after 3 tokens"):
        refset.sample_batch(_CachelessModel(), [[2, 105, 7]], [0], stop_ids={1}, pad_id=0, max_new=4)
