"""The benchmark client: warm up a running stack, then measure TPS and PPL as the challenge does.

Order of one measurement (``measure``): warm-up (untimed, then a pause) -> TPS (the timed run,
straight after the warm-up as in the organisers' harness, with the speculative-decoding counters
of ``/metrics`` read before and after; repeated back to back when the profile asks for
``tps_repeats``, the median run giving the TPS) -> optional streaming pass (TTFT, inter-token latency)
-> PPL (one teacher-forced request per reference record). Every misbehaviour of the stack
(HTTP error, timeout, malformed or incomplete JSON) raises ``BenchmarkError`` naming the request.

``python -m engine.bench`` is the command-line front end (see ``engine/bench/__main__.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from engine.bench._metrics import parse_counters, read_spec_counters
from engine.bench._ppl import PplResult, measure_ppl, ppl_payload, record_nll
from engine.bench._stats import coefficient_of_variation, summarize
from engine.bench._tps import (
    TpsResult,
    TpsRuns,
    acceptance_rate,
    chat_payload,
    measure_tps,
    parse_chat,
    stream_pass,
    warm_up,
)  # fmt: skip
from engine.data import PplRecord, Prompt
from engine.measurement import Measurement
from engine.profiles import BenchProfile

__all__ = [
    "PplResult",
    "TpsResult",
    "TpsRuns",
    "chat_payload",
    "coefficient_of_variation",
    "measure",
    "measure_ppl",
    "measure_tps",
    "open_client",
    "parse_chat",
    "parse_counters",
    "ppl_payload",
    "read_spec_counters",
    "record_nll",
    "stream_pass",
    "summarize",
    "warm_up",
]


def open_client(base_url: str, *, timeout_s: float) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=httpx.Timeout(timeout_s, connect=10.0))


@contextmanager
def _phase(timings: dict[str, float], name: str) -> Iterator[None]:
    began = time.monotonic()
    try:
        yield
    finally:
        timings[name] = time.monotonic() - began


def measure(
    base_url: str,
    *,
    model: str,
    profile: BenchProfile,
    prompts: list[Prompt],
    records: list[PplRecord],
    timings: dict[str, float] | None = None,
) -> Measurement:
    """One full measurement of a running stack; ``timings`` (if given) gets seconds per phase."""
    timings = {} if timings is None else timings
    with open_client(base_url, timeout_s=profile.request_timeout_s) as client:
        with _phase(timings, "warmup"):
            warm_up(client, model=model, prompt=prompts[0], requests=profile.warmup_requests,
                    output_len=profile.warmup_output_len, pause_s=profile.warmup_pause_s)
        with _phase(timings, "tps"):
            runs = TpsRuns([measure_tps(client, model=model, prompts=prompts, output_len=profile.output_len)
                            for _ in range(profile.tps_repeats)])
        stream: dict[str, float] = {}
        if profile.stream_pass:
            with _phase(timings, "stream"):
                ttfts, itls = stream_pass(client, model=model, prompts=prompts, output_len=profile.output_len)
            stream = summarize(ttfts, prefix="ttft_") | summarize(itls, prefix="itl_")
        with _phase(timings, "ppl"):
            ppl = measure_ppl(client, model=model, records=records)
    tps = runs.median
    drafted, accepted = runs.spec_counts()
    return Measurement(
        tps=tps.tps,
        ppl=ppl.ppl,
        ppl_mean_record=ppl.ppl_mean_record,
        completion_tokens=tps.completion_tokens,
        tps_wall_s=tps.wall_s,
        ppl_target_tokens=ppl.target_tokens,
        num_prompts=len(prompts),
        num_ppl_records=ppl.records,
        latency_s=summarize(runs.latencies_s),
        stream=stream,
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        acceptance_rate=acceptance_rate(drafted, accepted),
        output_token_ids=tps.output_token_ids,
        output_text_sha256=tps.output_text_sha256,
        tps_runs=[r.tps for r in runs.runs],
        tps_cv=runs.cv,
    )
