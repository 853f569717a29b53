"""The benchmark client against the stub stack (real process, real HTTP) and known answers."""

import math

import pytest

from engine.bench import measure, measure_ppl, open_client, parse_counters
from engine.config import PplRecord, load_ppl_records
from engine.launch import EngineProcess, build_launch
from engine.measurement import Stages, Stop
from engine.stacks import ADAPTERS, target_nlls
from errors import BenchmarkError
from tests.stacks import measure_on_stub, stub_manifest
from tests.stacks.stub_server import StubKnobs, request_time, spec_counts, token_logprob, token_time


def test_tps_is_completion_tokens_over_the_timed_window(tmp_path, stub_profile):
    env = {"STUB_DECODE_STEP_S": "0.004", "STUB_REQUEST_OVERHEAD_S": "0.05"}
    profile = stub_profile.with_overrides({"warmup_pause_s": 1.0}, source="test")
    m, log, launch, _, _ = measure_on_stub(tmp_path, profile, **env)
    chats = [r for r in log if r["path"] == "/v1/chat/completions"]
    warmup, timed = chats[: profile.warmup_requests], chats[profile.warmup_requests :]
    assert len(timed) == m.num_prompts == profile.num_prompts
    assert m.completion_tokens == sum(r["completion_tokens"] for r in timed) == 4 * profile.output_len
    assert m.tps == m.completion_tokens / m.tps_wall_s
    # The window runs from the first timed request's start to the last one's end: it holds the
    # server's own window of the timed requests, and not the warm-up or the 1 s pause after it
    # (the slack is half that pause, so a busy machine's HTTP overhead does not fail the test).
    server_window = timed[-1]["end"] - timed[0]["start"]
    assert server_window <= m.tps_wall_s < server_window + profile.warmup_pause_s / 2
    assert warmup[-1]["end"] + profile.warmup_pause_s <= timed[0]["start"] + 0.01
    # Each request sleeps a known time, so the window is at least their sum.
    knobs = StubKnobs.from_env(launch.env)
    per_request = request_time(knobs, tokens=profile.output_len, base_s=0.004, overhead_s=0.05)
    assert m.tps_wall_s >= per_request * len(timed)
    assert m.latency_s["min"] >= per_request
    assert set(m.latency_s) == {"mean", "min", "max", "p50", "p90", "p99"}


def test_ppl_is_the_token_weighted_value_computed_by_hand(tmp_path, stub_profile):
    m, _, launch, _, records = measure_on_stub(
        tmp_path, stub_profile, SLIDING_WINDOW="100", HF_OVERRIDES='{"text_config": {"sliding_window": 100}}'
    )
    nlls, counts = [], []
    for r in records:
        prompt = [*r.context_token_ids, *r.target_token_ids]
        start = len(r.context_token_ids)
        nlls.append(-sum(token_logprob(prompt[i], i, 100) for i in range(start, len(prompt))))
        counts.append(len(r.target_token_ids))
    assert m.ppl == pytest.approx(math.exp(sum(nlls) / sum(counts)), rel=1e-12)
    assert m.ppl_mean_record == pytest.approx(sum(math.exp(n / c) for n, c in zip(nlls, counts)) / len(nlls), rel=1e-12)
    assert m.ppl_target_tokens == sum(counts)
    assert m.num_ppl_records == len(records) == stub_profile.ppl_records


def test_acceptance_rate_comes_from_the_metrics_deltas_of_the_timed_run(tmp_path, stub_profile):
    m, _, launch, _, _ = measure_on_stub(tmp_path, stub_profile, CENTROID_TOP_K="20")
    drafted, accepted = spec_counts(StubKnobs.from_env(launch.env), stub_profile.output_len)
    # warm-up requests happened before the first reading, so only the timed ones count
    assert m.drafted_tokens == drafted * stub_profile.num_prompts
    assert m.accepted_tokens == accepted * stub_profile.num_prompts
    assert m.acceptance_rate == pytest.approx(accepted / drafted)


def test_each_prompts_answer_is_kept_as_a_hash_for_the_identity_check(tmp_path, stub_profile):
    # The timed requests ask for no token ids (the harness's body has no such field): the
    # identity evidence is the sha256 of each answer's text.
    m, _, _, _, _ = measure_on_stub(tmp_path, stub_profile)
    assert len(m.output_text_sha256) == stub_profile.num_prompts and m.output_token_ids == []
    (tmp_path / "w").mkdir()
    wrong, _, _, _, _ = measure_on_stub(tmp_path / "w", stub_profile, STUB_FAULT="wrong_tokens")
    assert all(a != b for a, b in zip(wrong.output_text_sha256, m.output_text_sha256))
    assert wrong.output_text_sha256 != m.output_text_sha256


def test_a_stack_without_spec_counters_reports_no_acceptance(tmp_path, stub_profile):
    m, _, _, _, _ = measure_on_stub(tmp_path, stub_profile, STUB_FAULT="no_metrics")
    assert m.drafted_tokens is None and m.acceptance_rate is None


def test_the_streaming_pass_reports_ttft_and_inter_token_latency(tmp_path, stub_profile):
    profile = stub_profile.with_overrides({"stream_pass": True}, source="test")
    m, _, launch, _, _ = measure_on_stub(tmp_path, profile, STUB_DECODE_STEP_S="0.02")
    per_token = token_time(StubKnobs.from_env(launch.env), 0.02)
    # The stub sleeps per_token before each chunk: the first cannot come sooner, and the typical
    # gap between chunks is one token time (a busy machine may bunch a few, or delay them).
    assert m.stream["ttft_min"] >= per_token
    assert 0.5 * per_token <= m.stream["itl_p50"] < per_token + 0.5
    assert {"ttft_p50", "ttft_p99", "itl_p50", "itl_p90", "itl_p99", "itl_mean"} <= set(m.stream)


# --- the response shapes, without a server ------------------------------------------------

RECORD = PplRecord(id="r", context_token_ids=(2, 10), target_token_ids=(11, 12))


def vllm_answer(entries):
    return {"choices": [{"index": 0, "text": "x", "prompt_logprobs": entries}]}


def test_target_nlls_read_the_prompt_tokens_entry_not_the_top_ranked_one():
    entries = [
        None,
        {"10": {"logprob": -0.5, "rank": 1, "decoded_token": "a"}},
        {"99": {"logprob": -0.1, "rank": 1}, "11": {"logprob": -1.0, "rank": 3}},
        {"12": {"logprob": -2.0, "rank": 1, "decoded_token": "c"}},
    ]
    assert target_nlls(vllm_answer(entries), RECORD) == pytest.approx([1.0, 2.0])


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"choices": []}, r"no 'choices\[0\]' object"),
        (vllm_answer(None), r"expected 'choices\[0\]\.prompt_logprobs' with 4 entries .*got None"),
        (vllm_answer([None, {}, {}]), r"with 4 entries .*got 3"),
        (
            vllm_answer([None, {}, {"99": {"logprob": -1}}, {"12": {"logprob": -1}}]),
            r"position 2: the prompt token 11 is missing",
        ),
        (
            vllm_answer([None, {}, {"11": {"logprob": "x"}}, {"12": {"logprob": -1}}]),
            r"position 2: logprob of token 11 is 'x', not a finite number",
        ),
        (vllm_answer([None, {}, None, {"12": {"logprob": -1}}]), r"position 2: prompt_logprobs entry is NoneType"),
    ],
)
def test_malformed_ppl_answers_are_benchmark_errors(answer, message):
    with pytest.raises(BenchmarkError, match=rf"^PPL record r[: ].*{message}"):
        target_nlls(answer, RECORD)


def test_parse_counters_sums_label_sets_and_skips_comments():
    text = (
        "# HELP vllm:spec_decode_num_draft_tokens_total x\n"
        'vllm:spec_decode_num_draft_tokens_total{model_name="a"} 10.0\n'
        'vllm:spec_decode_num_draft_tokens_total{model_name="b"} 5\n'
        "vllm:spec_decode_num_accepted_tokens_total 7.0\n"
        "vllm:other_total 3\n"
    )
    names = ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total")
    assert parse_counters(text, names) == {names[0]: 15.0, names[1]: 7.0}


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("malformed_json", r"PPL record r0: POST /v1/completions answered malformed JSON"),
        ("http_500", r"PPL record r0: POST /v1/completions answered HTTP 500: .*simulated internal error"),
    ],
)
def test_bad_http_answers_are_benchmark_errors_naming_the_request(tmp_path, stub_profile, fault, message):
    launch = build_launch(stub_manifest(STUB_FAULT=fault))
    records = load_ppl_records(stub_profile.path(stub_profile.refs), limit=1)
    with (
        EngineProcess.for_profile(launch, stub_profile, log_path=tmp_path / "engine.log"),
        open_client(launch.base_url, timeout_s=5) as client,
    ):
        with pytest.raises(BenchmarkError, match=message):
            measure_ppl(client, model="stub", records=records)


def test_a_hanging_stack_is_a_timeout_error(tmp_path, stub_profile):
    launch = build_launch(stub_manifest(STUB_FAULT="hang_after_ready"))
    records = load_ppl_records(stub_profile.path(stub_profile.refs), limit=1)
    with (
        EngineProcess(launch, log_path=tmp_path / "engine.log", stop_grace_s=2),
        open_client(launch.base_url, timeout_s=0.5) as client,
    ):
        with pytest.raises(BenchmarkError, match=r"PPL record r0: POST /v1/completions timed out after 0.5 s"):
            measure_ppl(client, model="stub", records=records)


def test_a_single_tps_run_has_no_spread(tmp_path, stub_profile):
    m, _, _, _, _ = measure_on_stub(tmp_path, stub_profile)
    assert len(m.tps_runs) == 1 and m.tps_runs[0] == m.tps and m.tps_cv is None


def test_the_identity_evidence_is_the_first_runs_answers_whichever_run_gives_the_tps(monkeypatch, stub_profile):
    # Runs of one boot time disjoint prompts; the TPS may come from the median run, but only the first
    # run's prompts are the same in every trial. (The timed runs are stand-ins here: the rule is what
    # is tested, with a first run faster than the median, so the median run gives the TPS.)
    import engine.bench._measure as bench  # where measure() looks up the parts it calls

    runs = iter([(30.0, "a"), (10.0, "b"), (20.0, "c")])

    def timed(client, *, model, prompts, output_len, metrics):
        tps, answer = next(runs)
        return bench.TpsResult(
            tps=tps,
            completion_tokens=len(prompts),
            wall_s=len(prompts) / tps,
            latencies_s=[1 / tps] * len(prompts),
            tokens=[1] * len(prompts),
            output_text_sha256=[answer] * len(prompts),
        )

    monkeypatch.setattr(bench, "measure_tps", timed)
    monkeypatch.setattr(bench, "warm_up", lambda *a, **k: None)
    monkeypatch.setattr(
        bench, "measure_ppl", lambda *a, **k: bench.PplResult(ppl=2.0, ppl_mean_record=2.0, target_tokens=1, records=1)
    )
    profile = stub_profile.with_overrides({"tps_repeats": 3}, source="test")
    prompts, records = profile.load_data()
    m = measure(
        "http://127.0.0.1:9", model="stub", stack=ADAPTERS["vllm"], profile=profile, prompts=prompts, records=records
    )
    assert m.tps == 20.0  # the slower of the first run and the median
    assert m.output_text_sha256 == ["a"] * profile.num_prompts


def staged_measure(tmp_path, profile, checkpoint, *, after=(1, 3), ppl_first=True):
    seen = []

    def look(partial):
        seen.append(partial)
        return checkpoint(partial)

    m, log, _, _, _ = measure_on_stub(
        tmp_path, profile, stages=Stages(after=after, ppl_first=ppl_first, checkpoint=look)
    )
    return m, [r["path"] for r in log], seen


def test_a_staged_run_times_every_prompt_once_with_the_ppl_pass_after_the_first_stage(tmp_path, stub_profile):
    m, paths, seen = staged_measure(tmp_path, stub_profile, lambda partial: None)
    chat, ppl = "/v1/chat/completions", "/v1/completions"
    w = stub_profile.warmup_requests
    # warm-up, stage 1 (one prompt), the PPL records, then the rest of the run: no prompt twice
    assert paths == [chat] * w + [chat] + [ppl] * stub_profile.ppl_records + [chat] * 3
    assert [p.prompts_timed for p in seen] == [1, 3] and all(p.ppl == m.ppl for p in seen)
    assert seen[1].latencies_s[:1] == seen[0].latencies_s and len(seen[1].tokens) == 3
    assert m.full and m.stopped is None and m.prompts_timed == m.num_prompts == 4
    assert len(m.prompt_latencies_s) == len(m.prompt_tokens) == 4 and sum(m.prompt_tokens) == m.completion_tokens
    assert m.tps == pytest.approx(m.completion_tokens / m.tps_wall_s)


def test_a_checkpoint_that_stops_ends_the_measurement_with_what_it_had(tmp_path, stub_profile):
    profile = stub_profile.with_overrides({"stream_pass": True, "tps_repeats": 2}, source="test")
    m, paths, seen = staged_measure(tmp_path, profile, lambda partial: Stop("gate", "over it"))
    assert len(seen) == 1 and not m.full
    assert (m.stopped, m.stop_reason, m.prompts_timed, m.num_prompts) == ("gate", "over it", 1, 4)
    assert m.completion_tokens == profile.output_len and m.tps_runs == [m.tps]
    assert m.stream == {}  # no stream pass and no second run after a stop
    assert paths.count("/v1/chat/completions") == profile.warmup_requests + 1
