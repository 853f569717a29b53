"""Greedy identity: every speculative configuration emits exactly plain greedy decoding's tokens."""

from __future__ import annotations

import pytest

from engine.reference.runtime import SpecConfig
from tests.reference.conftest import GEN_TOKENS

pytestmark = pytest.mark.slow


def _generate(runtime, prompt_ids, *, spec, top_k=32):
    decoder = runtime.decoder(spec=spec, centroid_top_k=top_k)
    outs, drafted, accepted = [], 0, 0
    for ids in prompt_ids:
        gen = decoder.generate(ids, max_new_tokens=GEN_TOKENS)
        outs.append(gen.token_ids)
        drafted += gen.stats.draft_tokens
        accepted += gen.stats.accepted_tokens
    return outs, drafted, accepted


def _assert_same(outs, plain, label):
    for i, (got, want) in enumerate(zip(outs, plain, strict=True)):
        assert len(got) == GEN_TOKENS
        first = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
        assert got == want, f"{label}, prompt {i}: first difference at generated token {first}"


# The drafter's smallest block and the challenge's k=7; the fewest clusters, the winning entry's 49 and
# every one of the 2,048: the ends of both ranges and the point the challenge runs at. Each
# configuration decodes the first 4 prompts (prose, a list, code, a repeating text) x 64 tokens: the
# other four repeat those kinds, and 8 took twice the CPU time for no other path through the code.
@pytest.mark.parametrize("k", [1, 7])
def test_draft_equals_plain_greedy_at_every_centroid_budget(runtime, prompt_ids, plain_outputs, k):
    acceptance = {}
    for top_k in (1, 49, 2048):
        spec = SpecConfig(method="draft", num_speculative_tokens=k)
        outs, drafted, accepted = _generate(runtime, prompt_ids[:4], spec=spec, top_k=top_k)
        _assert_same(outs, plain_outputs[:4], f"draft k={k} CENTROID_TOP_K={top_k}")
        acceptance[top_k] = accepted / drafted
    # A smaller candidate budget really drafts worse; with every cluster the drafter's choice is
    # the verifier's own (the same hidden state, the same decision), so nothing is rejected. On
    # CUDA (the graph path) the drafter takes the plain argmax of bf16 logits where the verifier
    # refines near-ties exactly (_static.draft_token): there, rejections are those near-ties.
    assert acceptance[1] < acceptance[49], acceptance
    if runtime.model.device.type == "cpu":
        assert acceptance[2048] == 1.0, acceptance
    else:
        assert acceptance[2048] >= max(acceptance[49], 0.9), acceptance


def test_draft_with_partial_drafter_layers_equals_plain_greedy(runtime, prompt_ids, plain_outputs):
    spec = SpecConfig(method="draft", num_speculative_tokens=2, draft_layers=12)
    outs, drafted, accepted = _generate(runtime, prompt_ids[:4], spec=spec)
    _assert_same(outs, plain_outputs[:4], "draft k=2 draft_layers=12")
    assert drafted > 0 and accepted < drafted  # the verifier did reject some of a 12-layer drafter's tokens


def test_ngram_equals_plain_greedy(runtime, prompt_ids, plain_outputs):
    spec = SpecConfig(method="ngram", num_speculative_tokens=5, prompt_lookup_min=2, prompt_lookup_max=4)
    outs, drafted, accepted = _generate(runtime, prompt_ids, spec=spec)
    _assert_same(outs, plain_outputs, "ngram k=5 lookup 2..4")
    assert 0 < accepted <= drafted  # the repetitive prompts give the lookup something to find


def test_all_clusters_drafter_equals_full_head_everywhere(runtime, prompt_ids):
    """At CENTROID_TOP_K = 2,048 the drafter's choice is the full head's on every position."""
    import torch

    heads, model = runtime.heads, runtime.model
    checked = 0
    for ids in prompt_ids[:4]:
        cache = model.new_cache(len(ids))
        hidden = model.prefill(torch.tensor(ids), cache)
        for h in hidden.split(1):
            # the centroid path itself (scores, top-K, gather), not draft()'s shortcut to the full head
            full = heads.greedy_one(h)
            assert heads.draft_from_clusters(h, top_k=heads.num_clusters) == full == heads.draft(h, top_k=2048)
            checked += 1
    assert checked >= 60


def test_batched_verification_head_equals_one_row_head(runtime, prompt_ids):
    """greedy_many over many rows at once == greedy_one row by row (the verifier's exactness)."""
    import torch

    heads, model = runtime.heads, runtime.model
    rows = []
    for ids in prompt_ids:
        rows.extend(model.prefill(torch.tensor(ids), model.new_cache(len(ids))).split(1))
    batched = [t for i in range(0, len(rows), 8) for t in heads.greedy_many(rows[i : i + 8])]
    assert batched == [heads.greedy_one(h) for h in rows]
