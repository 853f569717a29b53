"""A stack under serving load: many requests in flight, timed one by one as sglang's ``bench_serving`` does.

The challenge times one stream at a time; a deployed stack serves many. ``measure_load`` sends a workload's
prompts as streaming chat requests with the organisers' request fields (``chat_payload``), at most
``concurrency`` in flight (bench_serving's ``--max-concurrency``), arriving as a Poisson process of
``request_rate`` a second (its ``--request-rate``: exponential gaps from a seeded generator; ``inf`` sends
them all at once), and times each: TTFT, the gaps between content chunks, the latency to the stream's end,
its output tokens. A request waiting for a free slot is not yet sent: its clock starts when it is, as
bench_serving's does.

The run is one ``engine.measurement.LoadLevel``: its figures are what bench_serving prints for a run (output tok/s
and requests/s over the run's wall time, first request sent to last one done; TTFT, TPOT, inter-token latency and
end-to-end latency at their mean and p50/p90/p99 in milliseconds), computed as it computes them
(``numpy.percentile``, linear interpolation, over every request's TTFT, every gap, every latency), beside every
request's timings. Whether a request met a latency SLO, and the goodput, are the judging room's
(``sweep.judgement``).

Which prompts a level gets is ``level_prompts``'s one rule, for a serving study's trials and ``sweep.transfer``
alike: each public level its own consecutive slice of the public prompts, in the profile's order.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import numpy as np

from engine.bench._tps import StreamTiming, stream_one
from engine.config import Prompt
from engine.measurement import LoadLevel, LoadRequest, Percentiles
from errors import BenchmarkError, DataError

__all__ = ["Workload", "level_prompts", "long_prompts", "measure_load", "percentiles"]

PERCENTILES = (50, 90, 99)
LONG_PARTS = 8  # public prompts joined into one long-context prompt


@dataclass(frozen=True, kw_only=True)
class Workload:
    """One serving load: how many requests at once, how fast they arrive, on which prompts, how long."""

    name: str
    concurrency: int  # requests in flight at most
    request_rate: float = math.inf  # requests a second, Poisson arrivals; inf: all at once
    num_prompts: int = 16
    output_len: int = 64
    prompts: str = "public"  # "public": the profile's prompts; "long": long-context ones (engine.config)
    seed: int = 1

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.num_prompts < 1 or self.output_len < 1:
            raise ValueError(f"workload {self.name!r}: concurrency, num_prompts and output_len must be >= 1")
        if not self.request_rate > 0:
            raise ValueError(f"workload {self.name!r}: request_rate must be > 0 (inf: all at once)")
        if self.prompts not in ("public", "long"):
            raise ValueError(f"workload {self.name!r}: prompts must be 'public' or 'long', got {self.prompts!r}")


def long_prompts(prompts: list[Prompt], count: int, *, parts: int = LONG_PARTS) -> list[Prompt]:
    """``count`` long-context prompts, each ``parts`` consecutive public prompts joined into one request with
    the last as its question: the public set's own text, never the held-out one; cycled where it runs short."""
    if not prompts:
        raise BenchmarkError("long prompts need public prompts to build them from")
    built = []
    for i in range(count):
        chunk = [prompts[(i * parts + j) % len(prompts)] for j in range(parts)]
        text = "\n\n".join(f"Document {j + 1}:\n{p.text}" for j, p in enumerate(chunk[:-1]))
        built.append(Prompt(id=f"long-{i}", text=f"{text}\n\nAnswer this last: {chunk[-1].text}"))
    return built


def level_prompts(public: list[Prompt], plan: Sequence[Workload]) -> dict[str, list[Prompt]]:
    """Each workload's prompts by its name: the public levels consecutive slices of ``public`` in its order, none
    shared, the long ones built from the whole of ``public``; raises DataError where ``public`` runs short.

    The one rule, for a serving study's trials and ``sweep.transfer`` alike. Each level its own slice, not one
    slice for all: the levels run in order on one boot, and a stack's prefix cache would serve a later level the
    prompts an earlier one left, shortening its TTFT by what the first level paid (no prompt timed twice in a
    boot, as the challenge's runs are kept apart). Every configuration gets the same slices, so levels compare
    across configurations on the same requests."""
    slices, start = {}, 0
    for w in plan:
        if w.prompts == "public":
            slices[w.name] = public[start : start + w.num_prompts]
            start += w.num_prompts
    if start > len(public):
        raise DataError(
            f"{sum(w.prompts == 'public' for w in plan)} load levels need {start} public prompts, none timed twice "
            f"in a boot; the set has {len(public)}: fewer prompts a level or fewer levels"
        )
    for w in plan:
        if w.prompts == "long":
            slices[w.name] = long_prompts(public, w.num_prompts)
    return slices


def percentiles(values: list[float]) -> Percentiles:
    """Mean and p50/p90/p99 of ``values`` in milliseconds, as bench_serving reports them (``np.percentile``,
    linear interpolation; 0 for none)."""
    data = np.asarray(values or [0.0], dtype=float) * 1000.0
    p50, p90, p99 = (float(np.percentile(data, p)) for p in PERCENTILES)
    return Percentiles(mean=float(data.mean()), p50=p50, p90=p90, p99=p99)


def _level(workload: Workload, prompts: list[Prompt], timings: list[StreamTiming]) -> LoadLevel:
    """The run's figures (see the module's docstring) and its requests, as a ``LoadLevel``."""
    first = min(t.start_s for t in timings)
    wall = max(t.start_s + t.latency_s for t in timings) - first
    return LoadLevel(
        workload=workload.name,
        concurrency=workload.concurrency,
        request_rate=None if math.isinf(workload.request_rate) else workload.request_rate,
        prompts=workload.prompts,
        prompt_chars=sum(len(p.text) for p in prompts) / len(prompts),
        output_len=workload.output_len,
        output_tokens=sum(t.output_tokens for t in timings),
        wall_s=wall,
        ttft_ms=percentiles([t.ttft_s for t in timings]),
        tpot_ms=percentiles([t.tpot_s for t in timings if t.output_tokens > 1]),
        itl_ms=percentiles([gap for t in timings for gap in t.itl_s]),
        e2e_ms=percentiles([t.latency_s for t in timings]),
        requests=tuple(
            LoadRequest(
                ttft_s=t.ttft_s,
                tpot_s=t.tpot_s,
                latency_s=t.latency_s,
                output_tokens=t.output_tokens,
                start_s=t.start_s - first,
                itl_s=tuple(t.itl_s),
            )
            for t in timings
        ),
    )


def _arrivals(workload: Workload) -> list[float]:
    """When each request arrives, seconds after the first (bench_serving's exponential gaps)."""
    if math.isinf(workload.request_rate):
        return [0.0] * workload.num_prompts
    gaps = np.random.default_rng(workload.seed).exponential(1.0 / workload.request_rate, workload.num_prompts)
    return [0.0, *np.cumsum(gaps[1:]).tolist()]


def measure_load(client: httpx.Client, *, model: str, prompts: list[Prompt], workload: Workload) -> LoadLevel:
    """One run of ``workload`` on ``prompts`` (its first ``num_prompts``); raises BenchmarkError for a request
    the stack failed, naming it, or for too few prompts."""
    if len(prompts) < workload.num_prompts:
        raise BenchmarkError(
            f"workload {workload.name!r}: {workload.num_prompts} prompts asked for, {len(prompts)} given"
        )
    slots = threading.Semaphore(workload.concurrency)

    def send(prompt: Prompt) -> StreamTiming:
        try:
            return stream_one(client, prompt, model=model, max_tokens=workload.output_len)
        finally:
            slots.release()

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workload.concurrency) as pool:
        futures = []
        for prompt, at in zip(prompts[: workload.num_prompts], _arrivals(workload)):
            time.sleep(max(0.0, began + at - time.perf_counter()))
            slots.acquire()  # a slot first: the request's clock starts when it is sent
            futures.append(pool.submit(send, prompt))
        timings = [f.result() for f in futures]
    return _level(workload, prompts[: workload.num_prompts], timings)
