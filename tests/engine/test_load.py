"""A stack under serving load (``engine.bench``'s ``measure_load``): its figures as the organisers' client computes
them, and the judging room's SLO rule and goodput (``sweep.judgement``) on a stack whose latencies are known."""

from __future__ import annotations

import json
import math
import subprocess

import httpx
import pytest

from engine.bench import StreamTiming, Workload, level_prompts, measure_load, percentiles
from engine.config import parse_knobs
from engine.install import install_stack
from engine.launch import EngineProcess, build_launch
from engine.measurement import LoadLevel, LoadRequest, Percentiles
from engine.stackside import free_port
from errors import DataError
from sweep.judgement import Slo, goodput
from tests.stacks import stub_manifest, stub_profile
from tests.stacks.stub_server import StubKnobs, request_time

# The organisers' own client computes the run's figures (sglang's bench_serving, calculate_metrics) from the
# same requests: fed our timings, it must print our numbers
_THEIRS = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("bench_serving", sys.argv[1])
bs = importlib.util.module_from_spec(spec); spec.loader.exec_module(bs)
data = json.loads(sys.stdin.read())
outputs = [bs.RequestFuncOutput(success=True, latency=r["latency"], ttft=r["ttft"], itl=r["itl"],
                                 output_len=r["tokens"]) for r in data["requests"]]
class Counting:  # the retokenized counts are no figure compared here
    def encode(self, text, add_special_tokens=False): return []
m, _ = bs.calculate_metrics([None] * len(outputs), outputs, data["wall_s"], Counting(), "vllm-chat")
print(json.dumps({k: float(v) for k, v in vars(m).items() if isinstance(v, (int, float))}))
"""


def _serving(tmp_path, **env: str) -> tuple[EngineProcess, str]:
    manifest = stub_manifest(PORT=str(free_port()), **env)
    launch = build_launch(manifest, parse_knobs(manifest, {}))
    return EngineProcess(launch, log_path=tmp_path / "engine.log"), launch.base_url


def test_the_figures_under_load_are_the_organisers_clients_own(tmp_path):
    prompts, _ = stub_profile(tmp_path, num_prompts=12).load_data()
    engine, url = _serving(tmp_path, STUB_DECODE_STEP_S="0.004", STUB_REQUEST_OVERHEAD_S="0.02")
    workload = Workload(name="c4", concurrency=4, num_prompts=12, output_len=24)
    with engine, httpx.Client(base_url=url, timeout=60) as client:
        ours = measure_load(client, model="stub", prompts=prompts, workload=workload)
    assert len(ours.requests) == 12 and ours.output_tokens == 12 * 24
    # at most 4 in flight: at every request's start, fewer than 4 others were still running
    spans = [(r.start_s, r.start_s + r.latency_s) for r in ours.requests]
    assert max(sum(a <= s < b for a, b in spans if (a, b) != (s, e)) for s, e in spans) <= 3

    bench = install_stack("sglang-bench")
    fed = {
        "wall_s": ours.wall_s,
        "requests": [
            {"latency": r.latency_s, "ttft": r.ttft_s, "itl": r.itl_s, "tokens": r.output_tokens} for r in ours.requests
        ],
    }
    done = subprocess.run(
        [str(bench.python), "-c", _THEIRS, bench.versions["bench_serving"]],
        input=json.dumps(fed),
        capture_output=True,
        text=True,
        check=True,
    )
    theirs = json.loads(done.stdout)
    assert ours.output_tps == pytest.approx(theirs["output_throughput"], rel=1e-9)
    assert ours.requests_per_s == pytest.approx(theirs["request_throughput"], rel=1e-9)
    for figure, name in ((ours.ttft_ms, "ttft"), (ours.tpot_ms, "tpot"), (ours.itl_ms, "itl")):
        assert figure.mean == pytest.approx(theirs[f"mean_{name}_ms"], rel=1e-9)
        assert figure.p50 == pytest.approx(theirs[f"median_{name}_ms"], rel=1e-9)
        assert figure.p99 == pytest.approx(theirs[f"p99_{name}_ms"], rel=1e-9)
    assert ours.e2e_ms.p99 == pytest.approx(theirs["p99_e2e_latency_ms"], rel=1e-9)
    assert percentiles([]) == Percentiles(mean=0.0, p50=0.0, p90=0.0, p99=0.0)  # as their `or 0`
    # the one stored shape reads back as it was
    assert LoadLevel.from_dict(json.loads(json.dumps(ours.to_dict()))) == ours


def _timing(ttft_s: float, latency_s: float = 1.0, tokens: int = 11) -> StreamTiming:
    return StreamTiming(start_s=0.0, ttft_s=ttft_s, itl_s=[], latency_s=latency_s, output_tokens=tokens)


def _level(*, ttft_p99: float, tpot_p99: float) -> LoadLevel:
    def at(p99: float) -> Percentiles:
        return Percentiles(mean=p99 / 2, p50=p99 / 2, p90=p99 / 2, p99=p99)

    return LoadLevel(
        workload="c1",
        concurrency=1,
        request_rate=None,
        prompts="public",
        prompt_chars=10.0,
        output_len=11,
        output_tokens=11,
        wall_s=1.0,
        ttft_ms=at(ttft_p99),
        tpot_ms=at(tpot_p99),
        itl_ms=at(tpot_p99),
        e2e_ms=at(1000.0),
        requests=(LoadRequest(ttft_s=ttft_p99 / 1000, tpot_s=tpot_p99 / 1000, latency_s=1.0, output_tokens=11),),
    )


def test_a_request_at_a_bound_meets_it_and_one_just_over_does_not():
    slo = Slo(ttft_ms=400, tpot_ms=50)
    assert slo.met(_timing(0.4, latency_s=0.9))  # TTFT at the bound, TPOT (0.9 - 0.4) / 10 = 50 ms at it
    assert not slo.met(_timing(0.4 + 1e-9, latency_s=0.9))  # a nanosecond over
    assert not slo.met(_timing(0.3, latency_s=0.8 + 1e-6))  # TPOT just over
    assert goodput([_timing(0.1, 0.5), _timing(0.5, 0.6), _timing(0.2, 0.7)], slo, wall_s=2.0) == 1.0
    assert slo.holds(_level(ttft_p99=400.0, tpot_p99=49.9)) and slo.text() == "p99 TTFT <= 400 ms, p99 TPOT <= 50 ms"
    assert not slo.holds(_level(ttft_p99=400.01, tpot_p99=1.0))
    for bad in ({"ttft_ms": 0}, {"e2e_ms": math.inf}, {"percentile": 95}):
        with pytest.raises(ValueError):
            Slo(**bad)


def test_goodput_counts_the_requests_that_met_the_slo_on_a_stack_that_serves_one_at_a_time(tmp_path):
    """Four requests at once on a stack that serves one at a time, each taking S: the k-th waits for the k before
    it, so its first token comes k x S after the first's; a bound at the first's TTFT plus 1.5 x S is met by two."""
    prompts, _ = stub_profile(tmp_path, num_prompts=4).load_data()
    # S ~0.29 s: a busy client sends the four tens of ms apart, which each TTFT, timed from its own send, loses,
    # beside the bound's half a service (at S ~0.17 s a loaded machine's third request met it, 3 ms inside)
    step_s, overhead_s, tokens = 0.05, 0.05, 10
    engine, url = _serving(
        tmp_path, STUB_SERIAL="1", STUB_DECODE_STEP_S=str(step_s), STUB_REQUEST_OVERHEAD_S=str(overhead_s)
    )
    workload = Workload(name="c4", concurrency=4, num_prompts=4, output_len=tokens)
    with engine, httpx.Client(base_url=url, timeout=60) as client:
        result = measure_load(client, model="stub", prompts=prompts, workload=workload)
    ttfts = sorted(r.ttft_s for r in result.requests)
    # one service, as the stub's model says: a request's measured latency adds the client's own delays (~45 ms of
    # them under load), which the stub's lock does not wait for
    serve_s = request_time(StubKnobs.from_env(stub_manifest().env), tokens=tokens, base_s=step_s, overhead_s=overhead_s)
    # when each first token came (its send plus its TTFT): how far apart the client sent them does not count
    firsts = sorted(r.start_s + r.ttft_s for r in result.requests if r.start_s is not None)
    assert len(firsts) == 4
    for k, first in enumerate(firsts):  # each waited for those before it
        assert first == pytest.approx(firsts[0] + k * serve_s, abs=0.25 * serve_s), (firsts, ttfts, serve_s)
    slo = Slo(ttft_ms=1000 * (ttfts[0] + 1.5 * serve_s))
    assert sum(slo.met(r) for r in result.requests) == 2
    assert goodput(result.requests, slo, wall_s=result.wall_s) == pytest.approx(2 / result.wall_s)
    assert not slo.holds(result)  # its p99 TTFT is the last request's wait


def test_poisson_arrivals_follow_the_rate_and_a_bad_workload_is_refused(tmp_path):
    prompts, _ = stub_profile(tmp_path, num_prompts=8).load_data()
    engine, url = _serving(tmp_path, STUB_DECODE_STEP_S="0.001")
    workload = Workload(name="r10", concurrency=8, request_rate=10.0, num_prompts=8, output_len=4, seed=3)
    with engine, httpx.Client(base_url=url, timeout=60) as client:
        result = measure_load(client, model="stub", prompts=prompts, workload=workload)
    starts = [r.start_s - result.requests[0].start_s for r in result.requests]
    assert starts == sorted(starts) and 0.1 < starts[-1] < 3.0  # 7 gaps of 0.1 s on average
    assert result.request_rate == 10.0
    for bad in ({"concurrency": 0}, {"request_rate": 0.0}, {"prompts": "heldout"}):
        with pytest.raises(ValueError):
            Workload(**{"name": "w", "concurrency": 1, **bad})


def test_a_level_stored_in_either_older_shape_reads_back_with_its_requests():
    """Before one shape, a trial stored each request as [TTFT, TPOT, latency] under ``timings`` and a transfer as
    an object under ``requests_timed``, with ``requests`` their count: both still load, and goodput is judged the
    same from them."""
    stats = {"mean": 5.0, "p50": 5.0, "p90": 8.0, "p99": 9.0}
    figures = {"workload": "c2", "concurrency": 2, "request_rate": None, "requests": 2, "output_tokens": 8}
    figures |= {"wall_s": 0.5, "output_tps": 16.0, "requests_per_s": 4.0}
    figures |= {name: stats for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")}
    trial = LoadLevel.from_dict(figures | {"timings": [[0.1, 0.02, 0.16], [0.3, 0.02, 0.36]]})
    transfer = LoadLevel.from_dict(
        figures
        | {"prompts": "long", "output_len": 4, "goodput": 2.0}
        | {
            "requests_timed": [
                {"start_s": 0.0, "ttft_s": 0.1, "itl_s": [0.02] * 3, "latency_s": 0.16, "output_tokens": 4},
                {"start_s": 0.0, "ttft_s": 0.3, "itl_s": [0.02] * 3, "latency_s": 0.36, "output_tokens": 4},
            ]
        }
    )
    for level in (trial, transfer):
        assert [r.ttft_s for r in level.requests] == [0.1, 0.3] and level.output_tps == 16.0
        assert [r.tpot_s for r in level.requests] == pytest.approx([0.02, 0.02], rel=1e-12)
        assert goodput(level.requests, Slo(ttft_ms=200), wall_s=level.wall_s) == 2.0
    assert transfer.prompts == "long" and transfer.requests[0].itl_s == (0.02, 0.02, 0.02)
    assert trial.output_len is None and trial.requests[0].output_tokens is None
    with pytest.raises(DataError, match="load level 'c2'"):
        LoadLevel.from_dict({k: v for k, v in figures.items() if k != "ttft_ms"} | {"timings": []})


def test_each_level_gets_its_own_prompts_and_a_short_set_is_refused(tmp_path):
    public, _ = stub_profile(tmp_path, num_prompts=4).load_data()
    plan = [Workload(name=f"c{c}", concurrency=c, num_prompts=2) for c in (1, 2)]
    plan.append(Workload(name="long-c1", concurrency=1, num_prompts=2, prompts="long"))
    prompts = level_prompts(public, plan)
    assert prompts["c1"] == public[:2] and prompts["c2"] == public[2:4]  # none timed twice in a boot
    assert all(p.id.startswith("long-") for p in prompts["long-c1"])
    with pytest.raises(DataError, match="need 4 public prompts"):
        level_prompts(public[:3], plan)
