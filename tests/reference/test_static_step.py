"""The fixed-shape step and the graph decoder (engine/reference/_static.py, _graphs.py).

On the CPU the programs run eagerly, so these tests check everything the CUDA path does except
the capture itself; with REFERENCE_TEST_DEVICE=cuda (run on the GPU machine) they also check that
captured graphs replay to the very tokens of the uncaptured programs.
"""

from __future__ import annotations

import pytest
import torch

from engine.reference._graphs import PLAIN_STEPS, GraphDecoder, GraphEngine
from engine.reference._static import StaticStep, buckets, decide_rows, draft_token, hidden_error_scale
from engine.reference.runtime import Decoder, SpecConfig

pytestmark = pytest.mark.slow

TOKENS = 40  # generated per prompt: from ~20-token prompts this crosses the 32- and 64-key buckets
SMALL_BUCKET = 32
SPECS = {
    "draft k=3": (SpecConfig(method="draft", num_speculative_tokens=3), 8),
    "draft k=5, 6 drafter layers": (SpecConfig(method="draft", num_speculative_tokens=5, draft_layers=6), 32),
    "draft k=2, all clusters": (SpecConfig(method="draft", num_speculative_tokens=2), 2048),
    "ngram k=4": (SpecConfig(method="ngram", num_speculative_tokens=4, prompt_lookup_min=1, prompt_lookup_max=3), 32),
}


@pytest.fixture(scope="module")
def prompts(prompt_ids) -> list[list[int]]:
    return [prompt_ids[i] for i in (0, 3, 4)]  # prose, a repeating list, a question


@pytest.fixture(scope="module")
def engine(runtime) -> GraphEngine:
    return GraphEngine(runtime.model, runtime.heads, capacity=256, smallest_bucket=SMALL_BUCKET)


def _ids(model, values: list[int]) -> torch.Tensor:
    return torch.tensor(values, device=model.device)


def _decode(decoder: Decoder, prompts: list[list[int]]) -> tuple[list[list[int]], int]:
    outs, accepted = [], 0
    for ids in prompts:
        gen = decoder.generate(ids, max_new_tokens=TOKENS)
        outs.append(gen.token_ids)
        accepted += gen.stats.accepted_tokens
    return outs, accepted


def _graph_decoder(runtime, engine, spec=None, top_k=32) -> GraphDecoder:
    return GraphDecoder(runtime.model, runtime.heads, spec=spec, centroid_top_k=top_k, engine=engine)


def test_buckets_double_up_to_the_capacity():
    assert buckets(1000, smallest=256) == [256, 512, 1000]
    assert buckets(512, smallest=256) == [256, 512]
    assert buckets(100, smallest=256) == [100]


@pytest.mark.parametrize("window", [None, 16], ids=["window 512", "window 16"])
def test_static_step_matches_model_step(runtime, runtime_fp32, prompts, monkeypatch, window):
    """Position by position, in and across buckets, through the window's gather when it is narrower.

    The fixed-shape step sums in another order than the model's step (padded keys, other kernels on the GPU),
    so the two differ by bf16's rounding as this machine's kernels do it (an AVX-512-BF16 CPU rounds otherwise
    than one without). The bound is measured here: the model step's own distance from the same step in float32.
    Two results that each round within it are at most twice it apart; a wrong key, mask or position is not."""
    model, heads, exact = runtime.model, runtime.heads, runtime_fp32.model
    if window:
        monkeypatch.setattr(model, "window", window)
        monkeypatch.setattr(exact, "window", window)
    ids = prompts[0]
    ref_cache, cache, exact_cache = model.new_cache(128), model.new_cache(128), exact.new_cache(128)
    cache.k.zero_()
    cache.v.zero_()
    model.prefill(_ids(model, ids[:-1]), ref_cache)
    model.prefill(_ids(model, ids[:-1]), cache)
    exact.prefill(_ids(exact, ids[:-1]), exact_cache)
    step = StaticStep(model, cache, smallest_bucket=SMALL_BUCKET)
    token, worst, rounding = ids[-1], 0.0, 0.0
    for position in range(len(ids) - 1, len(ids) + 30):
        want = model.final(
            model.step(model.embed(_ids(model, [token])), ref_cache, layers=model.all_layers(), position=position)
        )
        pos = step.position(_ids(model, [position]), step.bucket(position + 1))
        got = step.final(step.run(step.embed(_ids(model, [token])), pos, layers=model.all_layers()))
        unrounded = exact.final(
            exact.step(exact.embed(_ids(exact, [token])), exact_cache, layers=exact.all_layers(), position=position)
        )
        worst = max(worst, _relative(got, want))
        rounding = max(rounding, _relative(want, unrounded))
        token = heads.greedy_one(want)
        if model.device.type == "cpu":  # on CUDA other kernels round differently: closeness only
            assert heads.greedy_one(got) == token, f"position {position}"
    assert 0 < rounding and worst <= 2 * rounding, (worst, rounding)


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def test_decide_rows_is_heads_decide(runtime, prompts):
    """The device decision equals Heads.greedy_one wherever it claims a single candidate."""
    model, heads = runtime.model, runtime.heads
    hidden = torch.cat([model.prefill(_ids(model, ids), model.new_cache(len(ids))) for ids in prompts])
    tokens, near = decide_rows(heads, hidden, heads.logits(hidden), error_scale=hidden_error_scale(heads))
    assert (near >= 1).all()
    assert (near == 1).sum() >= len(hidden) * 0.75  # most rows need no host refinement
    for h, token, n in zip(hidden.split(1), tokens.tolist(), near.tolist()):
        if n == 1:
            assert token == heads.greedy_one(h)
    tied = torch.cat([hidden[:1], hidden[:1]])  # a row whose logits hold a forced exact tie
    logits = heads.logits(tied)
    logits[1, 7] = logits[1, 8] = logits[1].max()
    assert decide_rows(heads, tied, logits, error_scale=hidden_error_scale(heads))[1].tolist()[1] >= 2


def test_the_engines_decision_is_decide_rows(runtime, engine, prompts):
    """The engine's decision (compiled on CUDA) against decide_rows itself, ties included."""
    model, heads = runtime.model, runtime.heads
    hidden = torch.cat([model.prefill(_ids(model, ids), model.new_cache(len(ids))) for ids in prompts])
    logits = heads.logits(hidden)
    logits[1, 7] = logits[1, 8] = logits[1].max()  # a forced exact tie in row 1
    for rows in (slice(0, 1), slice(1, 2), slice(0, 4)):  # one row (plain), several (a cycle)
        got = engine._decide(hidden[rows], logits[rows])
        want = decide_rows(heads, hidden[rows], logits[rows], error_scale=engine.error_scale)
        assert [t.tolist() for t in got] == [t.tolist() for t in want]
    assert engine._decide(hidden[1:2], logits[1:2])[1].item() >= 2


def test_draft_token_is_the_centroid_heads_choice(runtime, prompts):
    """The same candidates and the same pick, except where Heads.draft had to refine a near-tie."""
    model, heads = runtime.model, runtime.heads
    ids = prompts[1]
    hidden = model.prefill(_ids(model, ids), model.new_cache(len(ids)))
    compared = 0
    for h in hidden.split(1):
        for top_k in (4, heads.num_clusters):
            refined = heads.refined
            want = heads.draft(h, top_k=top_k)
            if heads.refined == refined:
                assert int(draft_token(heads, h, top_k=top_k)) == want
                compared += 1
    assert compared >= len(hidden)


@pytest.fixture(scope="module")
def graph_plain(runtime, engine, prompts) -> list[list[int]]:
    return _decode(_graph_decoder(runtime, engine), prompts)[0]


def test_graph_plain_decoding_equals_eager_plain_decoding(runtime, prompts, graph_plain):
    if runtime.model.device.type != "cpu":
        pytest.skip("bit-equality of the eager and fixed-shape steps holds on the CPU; CUDA kernels round otherwise")
    eager, _ = _decode(Decoder(runtime.model, runtime.heads, spec=None, centroid_top_k=32), prompts)
    assert graph_plain == eager


def test_plain_decoding_runs_several_positions_per_program(engine, graph_plain):
    assert any(key[:2] == ("plain", PLAIN_STEPS) for key in engine._programs)


def test_plain_runs_refine_every_ambiguous_row(runtime, prompts, graph_plain, monkeypatch):
    """Every row sent to the host's Heads.decide (as if each were a near-tie): still plain's tokens."""
    engine = _uncaptured_engine(runtime)  # a captured program would keep the error scale it was captured with
    monkeypatch.setattr(engine, "error_scale", 1e6)
    assert _decode(_graph_decoder(runtime, engine), prompts)[0] == graph_plain


def test_a_plain_run_stops_where_the_host_overrules_the_device(runtime, prompts, monkeypatch):
    """Positions after an overruled decision were computed from the wrong token: they are dropped."""
    engine = _uncaptured_engine(runtime)
    for ids in prompts:  # one whose run is all the device's (the first prompt starts with a near-tie)
        engine.adopt(_prefilled(runtime.model, ids))
        device_tokens, _ = engine.plain(ids[-1], len(ids) - 1, n=PLAIN_STEPS)
        if len(device_tokens) == PLAIN_STEPS:
            break
    assert len(device_tokens) == PLAIN_STEPS
    calls = []

    def overrule(hidden, logits):  # a test double for a refinement that disagrees at the third row
        calls.append(len(calls))
        return [device_tokens[len(calls) - 1] + (1 if len(calls) == 3 else 0)]

    monkeypatch.setattr(engine, "error_scale", 1e6)
    monkeypatch.setattr(runtime.heads, "decide", overrule)
    tokens, finals = engine.plain(ids[-1], len(ids) - 1, n=PLAIN_STEPS)
    assert tokens == [*device_tokens[:2], device_tokens[2] + 1]
    assert len(finals) == 3


def _uncaptured_engine(runtime) -> GraphEngine:
    return GraphEngine(runtime.model, runtime.heads, capacity=256, smallest_bucket=SMALL_BUCKET, graphs=False)


def _prefilled(model, ids):
    from engine.reference._decode import _State

    cache = model.new_cache(len(ids))
    model.prefill(_ids(model, ids[:-1]), cache)
    return _State(cache=cache, position=len(ids) - 1, pending=ids[-1], context=list(ids))


@pytest.mark.parametrize("name", list(SPECS))
def test_graph_speculative_decoding_equals_graph_plain(runtime, engine, prompts, graph_plain, name):
    plain = graph_plain
    spec, top_k = SPECS[name]
    outs, accepted = _decode(_graph_decoder(runtime, engine, spec, top_k), prompts)
    for i, (got, want) in enumerate(zip(outs, plain, strict=True)):
        first = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
        assert got == want, f"{name}, prompt {i}: first difference at generated token {first}"
    assert accepted > 0


def test_cycles_stay_inside_one_bucket(engine):
    for position in (0, 20, 30, 31, 32, 63, 100):
        room = engine.room(position)
        assert engine.step.bucket(position + 1) == engine.step.bucket(position + 1 + room)
    assert engine.room(31) == 0


def test_compiled_step_traces_whole_and_agrees(runtime, prompts):
    """torch.compile traces each piece as one graph (fullgraph): what inductor compiles on CUDA."""
    model = runtime.model
    ids = prompts[2]
    results = []
    for backend in (None, "aot_eager"):
        cache = model.new_cache(len(ids) + 8)
        cache.k.zero_()
        cache.v.zero_()
        model.prefill(_ids(model, ids[:-1]), cache)
        step = StaticStep(model, cache, smallest_bucket=SMALL_BUCKET, compile=backend)
        pos = step.position(_ids(model, [len(ids) - 1]), step.bucket(len(ids)))
        results.append(step.final(step.run(step.embed(_ids(model, [ids[-1]])), pos, layers=model.all_layers())))
    assert torch.allclose(results[0].float(), results[1].float(), rtol=2e-2, atol=2e-2)


def test_a_compiled_engine_decodes_as_the_uncompiled_one(runtime, prompts, graph_plain):
    """Every compile unit traced whole (the step's pieces, and the decision at 1 and k + 1 rows, a
    dynamic recompile): what inductor compiles on CUDA. No fallback, and the same tokens."""
    if runtime.model.device.type != "cpu":
        pytest.skip("on CUDA every engine here is compiled (inductor) already, and aot_eager rounds otherwise")
    engine = GraphEngine(runtime.model, runtime.heads, capacity=256, smallest_bucket=SMALL_BUCKET, compile="aot_eager")
    for spec, top_k in [(None, 32), SPECS["draft k=3"]]:
        assert _decode(_graph_decoder(runtime, engine, spec, top_k), prompts[1:2])[0] == graph_plain[1:2]
    assert engine.compile == "aot_eager"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_captured_graphs_replay_the_uncaptured_programs(runtime, prompts):
    if runtime.model.device.type != "cuda":
        pytest.skip("the session's runtime is on the CPU (REFERENCE_TEST_DEVICE=cuda runs this)")
    captured = GraphEngine(runtime.model, runtime.heads, capacity=256, smallest_bucket=SMALL_BUCKET)
    uncaptured = GraphEngine(runtime.model, runtime.heads, capacity=256, smallest_bucket=SMALL_BUCKET, graphs=False)
    assert captured.graphs and not uncaptured.graphs
    for spec, top_k in [(None, 32), SPECS["draft k=3"]]:
        want, _ = _decode(_graph_decoder(runtime, uncaptured, spec, top_k), prompts)
        got, _ = _decode(_graph_decoder(runtime, captured, spec, top_k), prompts)
        assert got == want
    assert any(p.graph is not None for p in captured._programs.values())
