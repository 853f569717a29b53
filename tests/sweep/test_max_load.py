"""The max-load search (``sweep.serving.max_load``) on a stack whose latencies are known: a stub that serves one
request at a time (``STUB_SERIAL=1``). Each run sends c requests at once (one wave): whichever order the stub takes
them in, they wait 0, 1, ..., c - 1 requests' service before their first token, so the run's p99 TTFT is the first
token's time plus 0.99 (c - 1) services, and the highest concurrency under a TTFT bound is known before anything
runs. (More requests than c would leave it to the stub's lock which request waits longest.)"""

from __future__ import annotations

import math
from dataclasses import replace

import httpx
import pytest

from engine.config import parse_knobs
from engine.launch import EngineProcess, build_launch
from engine.measurement import LoadLevel
from engine.stackside import free_port
from sweep.judgement import Slo
from sweep.serving import max_load, probe_levels, verdict
from tests.stacks import stub_manifest, stub_profile
from tests.stacks.stub_server import StubKnobs, request_time, token_time

STEP_S, OVERHEAD_S, OUTPUT_LEN = 0.03, 0.05, 5  # about 0.2 s a request, all of it inside the serial stub's lock
KNEE = 4  # the bound sits half a request's service above what 4 in flight wait, half below what 5 wait
LEVELS = range(1, 9)


def test_the_max_load_search_finds_the_known_knee_within_one_level(tmp_path):
    profile = stub_profile(tmp_path)
    manifest = stub_manifest(
        PORT=str(free_port()), STUB_SERIAL="1", STUB_DECODE_STEP_S=str(STEP_S), STUB_REQUEST_OVERHEAD_S=str(OVERHEAD_S)
    )
    launch = build_launch(manifest, parse_knobs(manifest, {}))
    knobs = StubKnobs.from_env(launch.env)
    serve_s = request_time(knobs, tokens=OUTPUT_LEN, base_s=STEP_S, overhead_s=OVERHEAD_S)
    first_s = OVERHEAD_S + token_time(knobs, STEP_S)  # the first token, alone
    slo = Slo(ttft_ms=1000 * (first_s + (KNEE - 0.5) * serve_s))
    tested: list[int] = []
    runs: list[LoadLevel] = []
    with (
        EngineProcess(launch, log_path=tmp_path / "engine.log"),
        httpx.Client(base_url=launch.base_url, timeout=60) as client,
    ):
        probe = probe_levels(
            client,
            model="stub",
            profile=profile,
            public=profile.load_public(),
            repeats=3,
            num_prompts=1,  # one wave of c requests a run
            output_len=OUTPUT_LEN,
        )

        def measure(concurrency: int) -> list[LoadLevel]:
            tested.append(concurrency)
            runs.extend(probe(concurrency))
            return runs[-3:]

        found = max_load(LEVELS, measure, slo)
    assert found.concurrency is not None and abs(found.concurrency - KNEE) <= 1, found
    # a bisection: about log2 of the levels measured, not all of them, each decided over its 3 runs
    assert len(tested) <= 1 + math.ceil(math.log2(len(LEVELS))) and tested[0] == 1
    assert all(len(v.ratios) == 3 for v in found.verdicts)
    # what it decided agrees with the known latencies: a level that held is at most one above the knee, one that
    # failed at least one below it, and the answer is the highest that held
    assert all(v.concurrency <= KNEE + 1 for v in found.verdicts if v.holds)
    assert all(v.concurrency >= KNEE - 1 for v in found.verdicts if not v.holds)
    assert found.concurrency == max(v.concurrency for v in found.verdicts if v.holds)

    # the noise is in the decision: runs of a level under the bound on average but scattered across it do not hold;
    # steady runs at the same mean do
    base, bound = runs[0], slo.ttft_ms
    assert bound is not None
    scattered = [replace(base, ttft_ms=replace(base.ttft_ms, p99=bound * r)) for r in (0.6, 1.3, 0.95)]
    steady = [replace(base, ttft_ms=replace(base.ttft_ms, p99=bound * r)) for r in (0.94, 0.96, 0.95)]
    assert not verdict(2, scattered, slo).holds and verdict(2, steady, slo).holds
    with pytest.raises(ValueError, match="at least 2 runs"):
        verdict(2, steady[:1], slo)
