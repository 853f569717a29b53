"""One measurement of a running stack (``measure``): warm it up, then measure TPS and PPL as the challenge does.

Order of one measurement (``measure``): for each of the profile's ``tps_repeats`` runs, the
harness's sequence on the run's own slice of the prompts: warm-up on the slice's first prompt
(untimed, then a pause) -> the timed run, with the speculative-decoding counters of ``/metrics``
read before and after. The TPS is the slower of the first run and the median run (``TpsRuns``). No prompt is timed twice in one boot, so a
stack's prefix cache cannot serve a later run what an earlier one left (a fresh boot on unseen
prompts, the organisers' private re-run, would not get it either); the rule is recorded as
``Measurement.tps_rule``. The share of the machine's CPU time its host took from the first
warm-up to the last timed run is ``Measurement.host_steal`` (``engine.host``). Then the optional
streaming pass (TTFT, inter-token latency: on the
first run's prompts, so a stack's prefix cache may shorten its TTFT) -> PPL (one teacher-forced
request per reference record) -> PPL by context length (the profile's ``length_refs``: one
teacher-forced request per long text, its tokens placed in the buckets of ``length_buckets``,
``engine.measurement.by_length``). Every misbehaviour of the stack (HTTP error, timeout, malformed
or incomplete JSON) raises ``BenchmarkError`` naming the request.

With ``heldout`` prompts (a promotion or verification boot), the boot also times one run of them,
before the public runs (``heldout_first``) or after, with its own warm-up: the organisers' private
re-run in the same boot as the public measurement, so that the two can be compared boot by boot.
It is ``Measurement.heldout_tps``; ``run_order`` records which ran first.

Every timed run, in the order it ran, is one entry of ``Measurement.telemetry["runs"]``: its label
("public", "heldout"), when it started (seconds since the measurement began), its wall time and TPS,
each request's ``[start offset in the run, duration, completion tokens]``, and the stack's own step
figures from its ``/metrics`` (``engine.bench._metrics.stack_figures``). With a ``probe``
(``engine.host.Telemetry``, which ``run_trial`` runs around the measurement) each timed run is
one of its windows: the run's entry gets the machine's figures over it, and ``telemetry`` the boot's.

With ``stages`` (multi-fidelity, decided by ``sweep.search``), the first run is timed in
consecutive stages; after each stage but the last, ``stages.checkpoint`` sees what was measured so
far (``engine.measurement.Partial``: the PPL too, measured right after the first stage when
``ppl_first``) and may stop the measurement there, which the returned ``Measurement`` records
(``stopped``, ``stop_reason``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import httpx

from engine.bench._load import Workload, level_prompts, measure_load
from engine.bench._metrics import stack_figures
from engine.bench._ppl import PplResult, measure_lengths, measure_ppl
from engine.bench._stats import summarize
from engine.bench._tps import (
    TpsResult,
    TpsRuns,
    acceptance_rate,
    measure_tps,
    stream_pass,
    warm_up,
)
from engine.config import BenchProfile, PplRecord, Prompt
from engine.host import Telemetry, cpu_times, stolen_share
from engine.measurement import LengthBucket, LoadLevel, Measurement, Partial, Stages, Stop
from engine.stacks import StackAdapter

__all__ = ["harness_warm_up", "measure", "open_client", "tps_rule"]


def open_client(base_url: str, *, timeout_s: float) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=httpx.Timeout(timeout_s, connect=10.0))


def harness_warm_up(
    client: httpx.Client, *, model: str, prompt: Prompt, profile: BenchProfile, requests: int | None = None
) -> None:
    """The organisers' harness's warm-up as ``profile`` sizes it (its requests, their tokens, the pause after), on
    ``prompt``: what every timed run here, and each boot of a serving transfer, is preceded by. ``requests``: at
    least that many warm-up requests at once (a load level's concurrency: the batch it is about to be timed at)."""
    warm_up(
        client,
        model=model,
        prompt=prompt,
        requests=max(profile.warmup_requests, requests or 0),
        output_len=profile.warmup_output_len,
        pause_s=profile.warmup_pause_s,
    )


@contextmanager
def _phase(timings: dict[str, float], name: str) -> Iterator[None]:
    """Seconds spent in ``name``, summed over its repeats."""
    began = time.monotonic()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.monotonic() - began


def tps_rule(runs: int, per_run: int) -> str:
    """How the timed runs of one boot were kept from serving each other from a cache."""
    if runs == 1:
        return f"one timed run of {per_run} prompts"
    return f"{runs} timed runs of {per_run} prompts each, disjoint, each after its own warm-up: no prompt timed twice"


def _run_entry(label: str, run: TpsResult, *, origin: float, stack: StackAdapter) -> dict[str, Any]:
    """One timed run as ``Measurement.telemetry["runs"]`` holds it (see the module's docstring)."""
    first = run.request_starts[0] if run.request_starts else origin
    return {
        "label": label,
        "start_s": round(first - origin, 3),
        "wall_s": round(run.wall_s, 4),
        "tps": run.tps,
        "requests": [
            [round(start - first, 4), round(latency, 4), tokens]
            for start, latency, tokens in zip(run.request_starts, run.latencies_s, run.tokens)
        ],
        "stack": stack_figures(run.counters, stack.metrics, wall_s=run.wall_s, tokens=run.completion_tokens),
    }


def measure(
    base_url: str,
    *,
    model: str,
    stack: StackAdapter,
    profile: BenchProfile,
    prompts: list[Prompt],
    records: list[PplRecord],
    timings: dict[str, float] | None = None,
    stages: Stages | None = None,
    heldout: list[Prompt] | None = None,
    heldout_first: bool = False,
    probe: Telemetry | None = None,
) -> Measurement:
    """One full measurement of a running stack, read as its adapter says (``engine.stacks``: its counters, its PPL
    wire); ``timings`` (if given) gets seconds per phase.

    ``prompts`` holds every run's slice in order (``BenchProfile.load_data``): ``num_prompts``
    per run, ``tps_repeats`` runs; ``heldout`` (``BenchProfile.load_heldout``), one more run's.
    ``probe``, a started ``Telemetry``, samples the machine over each timed run.
    """
    per_run = profile.num_prompts
    if len(prompts) < per_run * profile.tps_repeats:
        raise ValueError(
            f"{profile.tps_repeats} runs of {per_run} prompts need {per_run * profile.tps_repeats}, got {len(prompts)}"
        )
    if heldout is not None and (stages is not None or len(heldout) < per_run):
        raise ValueError(f"a held-out run needs {per_run} prompts and a measurement without stages")
    slices = [prompts[i * per_run : (i + 1) * per_run] for i in range(profile.tps_repeats)]
    order = ["public"] * len(slices)
    if heldout is not None:
        order = ["heldout", *order] if heldout_first else [*order, "heldout"]
    with open_client(base_url, timeout_s=profile.request_timeout_s) as client:
        runs = _Runs(client, model=model, stack=stack, profile=profile, records=records, timings=timings, probe=probe)
        host_before = cpu_times()
        public = iter(slices)
        for label in order:
            if not runs.run(
                label, heldout[:per_run] if heldout is not None and label == "heldout" else next(public), stages
            ):
                break
        host_steal = stolen_share(host_before, cpu_times())  # over the warm-ups and timed runs
        stream: dict[str, float] = {}
        if profile.stream_pass and runs.stopped is None:
            with _phase(runs.timings, "stream"):
                ttfts, itls = stream_pass(client, model=model, prompts=slices[0], output_len=profile.output_len)
            stream = summarize(ttfts, prefix="ttft_") | summarize(itls, prefix="itl_")
        ppl = runs.ppl or runs.scored()
        lengths = runs.lengths() if runs.stopped is None else []
        load = _serving_load(client, model=model, profile=profile) if runs.stopped is None else []
    return runs.measurement(
        ppl, stream=stream, host_steal=host_steal, order=order if runs.held else [], load=load, lengths=lengths
    )


def _serving_load(client: httpx.Client, *, model: str, profile: BenchProfile) -> list[LoadLevel]:
    """The profile's serving load (``load_concurrency``), one run a level, after the challenge's measurement, each
    level on its own prompts (``level_prompts``)."""
    if not profile.load_concurrency:
        return []
    plan = [
        Workload(
            name=f"c{concurrency}",
            concurrency=concurrency,
            request_rate=profile.load_request_rate or math.inf,
            num_prompts=profile.load_num_prompts,
            output_len=profile.load_output_len,
            prompts=profile.load_prompts,
        )
        for concurrency in profile.load_concurrency
    ]
    prompts = level_prompts(profile.load_public(), plan)
    return [measure_load(client, model=model, prompts=prompts[w.name], workload=w) for w in plan]


class _Runs:
    """The timed runs of one measurement, in the order they ran, and what a staged run's checkpoint decided."""

    def __init__(
        self,
        client: httpx.Client,
        *,
        model: str,
        stack: StackAdapter,
        profile: BenchProfile,
        records: list[PplRecord],
        timings: dict[str, float] | None,
        probe: Telemetry | None,
    ) -> None:
        self.client, self.model, self.stack, self.profile, self.records = client, model, stack, profile, records
        self.timings = {} if timings is None else timings
        self.probe = probe
        self.origin = time.perf_counter()
        self.public: list[TpsResult] = []
        self.held: TpsResult | None = None
        self.ppl: PplResult | None = None
        self.stopped: Stop | None = None
        self.timed: list[tuple[str, TpsResult]] = []  # in the order they ran

    def _window(self) -> AbstractContextManager[None]:
        return self.probe.window(len(self.timed)) if self.probe is not None else nullcontext()

    def _timed(self, run: list[Prompt], phase: str) -> TpsResult:
        with _phase(self.timings, phase), self._window():
            return measure_tps(
                self.client,
                model=self.model,
                prompts=run,
                output_len=self.profile.output_len,
                metrics=self.stack.metrics,
            )

    def scored(self) -> PplResult:
        with _phase(self.timings, "ppl"):
            return measure_ppl(self.client, model=self.model, records=self.records, wire=self.stack.ppl)

    def lengths(self) -> list[LengthBucket]:
        """PPL by context length over the profile's long texts (none without them)."""
        texts = self.profile.load_lengths()
        if not texts:
            return []
        with _phase(self.timings, "lengths"):
            return measure_lengths(
                self.client, model=self.model, records=texts, ends=self.profile.length_buckets, wire=self.stack.ppl
            )

    def run(self, label: str, run: list[Prompt], stages: Stages | None) -> bool:
        """One timed run after its own warm-up (the first public one in ``stages``); False when a stage's
        checkpoint stopped the measurement."""
        profile = self.profile
        with _phase(self.timings, "warmup"):
            harness_warm_up(self.client, model=self.model, prompt=run[0], profile=profile)
        if label == "heldout":
            self.held = self._timed(run, "heldout")
            self.timed.append((label, self.held))
            return True
        result = self._timed(run, "tps") if self.public or stages is None else self._staged(run, stages)
        self.public.append(result)
        self.timed.append((label, result))
        return self.stopped is None

    def _staged(self, run: list[Prompt], stages: Stages) -> TpsResult:
        """The first run timed in consecutive stages, the checkpoint asked after each but the last (the PPL
        first where ``ppl_first``); stops at the first stage it says to."""
        bounds = stages.bounds(len(run))
        parts: list[TpsResult] = []
        for start, end in zip([0, *bounds], bounds):
            parts.append(self._timed(run[start:end], "tps"))
            if end == len(run):
                break
            if stages.ppl_first and self.ppl is None:
                self.ppl = self.scored()
            so_far = TpsResult.join(parts)
            self.stopped = stages.checkpoint(
                Partial.so_far(
                    tps=so_far.tps,
                    latencies_s=so_far.latencies_s,
                    tokens=so_far.tokens,
                    planned=len(run),
                    ppl=self.ppl.ppl if self.ppl else None,
                )
            )
            if self.stopped:
                break
        return TpsResult.join(parts)

    def measurement(
        self,
        ppl: PplResult,
        *,
        stream: dict[str, float],
        host_steal: float | None,
        order: list[str],
        load: list[LoadLevel],
        lengths: list[LengthBucket],
    ) -> Measurement:
        runs = TpsRuns(self.public)
        tps, first = runs.chosen, self.public[0]
        drafted, accepted = runs.spec_counts()
        entries = [_run_entry(label, run, origin=self.origin, stack=self.stack) for label, run in self.timed]
        telemetry: dict[str, Any] = {"runs": entries}
        if self.probe is not None:
            for i, entry in enumerate(entries):
                entry["host"] = self.probe.run_figures(i)
            telemetry |= self.probe.summary()
        stopped = self.stopped
        return Measurement(
            tps=tps.tps,
            ppl=ppl.ppl,
            ppl_mean_record=ppl.ppl_mean_record,
            completion_tokens=tps.completion_tokens,
            tps_wall_s=tps.wall_s,
            ppl_target_tokens=ppl.target_tokens,
            num_prompts=self.profile.num_prompts,
            num_ppl_records=ppl.records,
            latency_s=summarize(runs.latencies_s),
            stream=stream,
            drafted_tokens=drafted,
            accepted_tokens=accepted,
            acceptance_rate=acceptance_rate(drafted, accepted),
            # the first run's answers: every trial's first run times the same prompts, whichever run its TPS came from
            output_token_ids=first.output_token_ids,
            output_text_sha256=first.output_text_sha256,
            tps_runs=[r.tps for r in runs.runs],
            tps_cv=runs.cv,
            tps_rule=tps_rule(len(self.public), self.profile.num_prompts),
            prompt_latencies_s=list(first.latencies_s),
            prompt_tokens=list(first.tokens),
            stopped=stopped.kind if stopped else None,
            stop_reason=stopped.reason if stopped else None,
            prompts_timed=sum(len(r.latencies_s) for r in self.public),
            heldout_tps=self.held.tps if self.held else None,
            run_order=order,
            host_steal=host_steal,
            telemetry=telemetry,
            load=load,
            ppl_lengths=lengths,
        )
