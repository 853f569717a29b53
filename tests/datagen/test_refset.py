"""The committed PPL reference sets are what ``python -m datagen.refset`` samples (slow: loads the model)."""

import pytest

from datagen import refset
from engine.config import load_ppl_records, load_prompts
from errors import DataError, GemmaSweepError

STEPS = 6  # a batch's first steps do not depend on how many follow, so a prefix is a fair check


@pytest.mark.slow
def test_the_first_batch_redraws_the_stored_targets_wherever_the_draw_is_decided():
    """What regenerating the file reproduces on any x86-64 CPU, and so what this asserts:

    - the contexts exactly: token ids from the tokenizer and the chat template;
    - the sampled targets where the draw is decided. The seeded draws are the same on every
      machine, but the logits they draw from are the model's bf16 arithmetic, which another
      CPU's kernels round differently: on an AVX-512 Xeon the first token of record 3 came out
      another. So the stored targets are fed back (teacher forcing), each step is redrawn with its
      record's generator, and the stored token must be the one drawn wherever no logit change of
      up to ``refset.LOGIT_TOLERANCE`` (0.75; kernels measured to differ by up to 0.55, see
      datagen/refset.py) could change the draw. About a third of the draws are decided.

    A file sampled with other seeds, from another model or other contexts fails: the seeds are
    checked below by redrawing with the next batch's seeds, which must differ somewhere.
    """
    # One set is enough: both come from the same code; a batch's prefill takes minutes on 2 cores.
    prompts_path, refs_path = refset.SETS["public"]
    prompts = load_prompts(prompts_path, limit=refset.BATCH)
    stored = load_ppl_records(refs_path, limit=refset.BATCH, vocab_size=262144)
    tokenizer, model = refset._load_model("cpu")
    contexts = [refset._context(tokenizer, p.text) for p in prompts]
    assert [list(r.context_token_ids) for r in stored] == contexts
    targets = [list(r.target_token_ids[:STEPS]) for r in stored]
    logits = list(refset.forced_logits(model, contexts, targets, pad_id=tokenizer.pad_token_id, steps=STEPS))
    seeds = [refset.SEED + i for i in range(len(contexts))]
    redrawn = refset.redraw(logits, targets, seeds)
    assert redrawn.differing == ()
    assert redrawn.decided >= sum(map(len, targets)) // 4, redrawn  # the check holds the file to something
    other_seeds = refset.redraw(logits, targets, [s + refset.BATCH for s in seeds])
    assert len(other_seeds.differing) >= 5, other_seeds  # and would tell a file drawn with other seeds


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


def test_a_draw_between_two_tied_tokens_is_never_decided():
    # Which of two tied tokens sorts first differs from machine to machine (record 63 of the public
    # set, logits 15.25 and 15.25, drew the other token on an Intel Xeon): neither draw is decided.
    import torch

    logits = torch.full((1, 100), -10.0)
    logits[0, 7] = logits[0, 42] = 15.25
    seeds = list(range(16))
    drawn = [refset._sample(logits, [torch.Generator().manual_seed(s)])[0] for s in seeds]
    assert set(drawn) == {7, 42}  # both are drawn, so the check below is not vacuous
    for seed, token in zip(seeds, drawn):
        assert refset.redraw([logits], [[token]], [seed]).decided == 0
    # a token alone at the top is decided
    logits[0, 42] = 0.0
    assert refset.redraw([logits], [[7]], [0]).decided == 1
