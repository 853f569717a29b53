"""The stability knobs of a stack's host side, applied and recorded on real stacks (real processes, real HTTP):
the garbage collector as asked in every Python process of the stack, the warm-up's n-gram prompts (never a
public one), vLLM's engine in one process and numba's threads; and a run's stalls told from steady steps."""

from __future__ import annotations

import json
import re

import pytest

from engine.bench import run_trial
from engine.config import get_profile, load_manifest, parse_knobs
from engine.stackside import StartError, gc_policy, synthetic_prompts
from tests.stacks import stub_manifest, stub_profile


def _runs(outcome):
    assert outcome.status == "complete", outcome.reason
    return outcome.measurement.telemetry["runs"]


def test_injected_stalls_are_found_and_a_steady_stack_has_none(tmp_path):
    profile = stub_profile(tmp_path, num_prompts=6, output_len=48, tps_repeats=2)
    steady = stub_manifest(STUB_DECODE_STEP_S="0.004")
    stalling = stub_manifest(STUB_DECODE_STEP_S="0.004", STUB_STALL_EVERY="40", STUB_STALL_S="0.12")
    for manifest, stalls in ((steady, False), (stalling, True)):
        for run in _runs(run_trial(manifest, parse_knobs(manifest, {}), profile, workdir=tmp_path / str(stalls))):
            times = run["stack"]["step_times"]
            # 6 prompts x 48 tokens at ~2.5 tokens a step (the stub's draft), each request's first step not timed
            assert 80 < times["steps"] < 130
            assert times["stalled"] is stalls and (times["stall_steps"] > 0) is stalls
            if stalls:
                # every 40th step held 0.12 s: found, and never counted longer than they were
                assert 0.5 * 0.12 * times["stall_steps"] < times["stall_s"] <= 0.12 * times["stall_steps"] + 1e-9
            assert times["p50_bucket_s"][0] <= times["p50_ms"] / 1000 <= times["p50_bucket_s"][1]


@pytest.mark.parametrize(
    ("policy", "expect"),
    [
        ("default", {"enabled": True}),
        ("off", {"enabled": False}),
        ("1000,20,20", {"threshold": [1000, 20, 20]}),
        ("freeze", {"enabled": True}),
    ],
)
def test_the_collector_of_the_stacks_python_processes_is_set_as_asked_and_recorded(tmp_path, policy, expect):
    manifest = stub_manifest(STACK_GC="default", STUB_CHILD="1")
    knobs = parse_knobs(manifest, {"gc_policy": policy})
    outcome = run_trial(manifest, knobs, stub_profile(tmp_path), workdir=tmp_path / "trial")
    _runs(outcome)
    states = outcome.measurement.telemetry["gc"]
    stub = [s for s in states if s["program"] == "stub_server.py"]
    assert len(stub) == 1 and stub[0]["policy"] == policy
    assert {k: stub[0][k] for k in expect} == expect
    # frozen once the stack was warm (the wrapper's mark), and only then: the others freeze nothing
    assert (stub[0]["frozen"] > 0) is (policy == "freeze")
    # every run records the collections that began in it (none of 1 ms or more is needed for the count to be 0)
    assert all({"gc_collections", "gc_s", "gc_max_s", "gc_full"} <= set(r["host"]) for r in _runs(outcome))


def test_a_collector_policy_the_hooks_cannot_honour_is_refused():
    assert gc_policy({"STACK_GC": "700,10,10"}) == "700,10,10"
    with pytest.raises(StartError, match="STACK_GC='sometimes'"):
        gc_policy({"STACK_GC": "sometimes"})
    with pytest.raises(Exception, match="gc_policy"):
        parse_knobs(stub_manifest(STACK_GC="default"), {"gc_policy": "1,2"})


def test_the_ngram_warm_up_repeats_itself_and_sends_no_public_prompt(tmp_path, challenge_data):
    log = tmp_path / "requests.jsonl"
    manifest = stub_manifest(
        WARMUP_NUM_PROMPTS="0", WARMUP_KIND="plain", WARMUP_MAX_TOKENS="24", STUB_REQUEST_LOG=str(log)
    )
    knobs = parse_knobs(manifest, {"warmup_prompts": 6, "warmup_kind": "ngram"})
    profile = stub_profile(tmp_path)
    _runs(run_trial(manifest, knobs, profile, workdir=tmp_path / "trial"))
    chats = [json.loads(line) for line in log.read_text().splitlines()]
    sent = [c["body"] for c in chats if c["path"] == "/v1/chat/completions"]
    warm = [b["messages"][0]["content"] for b in sent if b["messages"][0]["content"].startswith("Warm-up")]
    assert len(warm) == 6 and all(b["max_tokens"] == 24 for b in sent[:6])
    assert warm == synthetic_prompts(6, 42, "ngram")  # the bridge's, before anything the harness sent
    public = [p.text for p in profile.load_data()[0]] + [p.text for p in get_profile("challenge").load_data()[0]]
    for text in warm:
        words = re.findall(r"[a-z]+", text.split(":", 1)[1])
        grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
        assert len(set(grams)) < len(grams) / 2  # a phrase said over and over: its n-grams repeat
        assert not any(text in p or p in text for p in public)


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_with_one_numba_thread_and_a_frozen_heap_records_its_process_layout(tmp_path, vllm_venv):
    manifest = load_manifest("vllm-cpu")
    knobs = parse_knobs(manifest, {"numba_threads": 1, "gc_policy": "freeze"})
    profile = get_profile("quick").with_overrides({"num_prompts": 2, "tps_repeats": 2, "ppl_records": 1}, source="t")
    outcome = run_trial(manifest, knobs, profile, workdir=tmp_path / "trial")
    runs = _runs(outcome)
    telemetry = outcome.measurement.telemetry
    assert outcome.env["NUMBA_NUM_THREADS"] == "1" and outcome.env["STACK_GC"] == "freeze"
    # the layout as it ran: `vllm serve` keeps its engine core in a process of its own
    assert any("EngineCor" in name for name in telemetry["stack"]["process_names"]), telemetry["stack"]
    served = [s for s in telemetry["gc"] if s["frozen"] > 0]
    assert served and all(s["policy"] == "freeze" for s in telemetry["gc"])
    # its step distribution from its histogram, at the bounds the manifest asks for
    assert all(r["stack"]["step_times"]["steps"] > 0 for r in runs)
    assert outcome.provenance["resolved"].get("cudagraph_mode")
