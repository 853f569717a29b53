"""Warm-up, TPS and the optional streaming pass, as the challenge's ``bench_serving`` run.

TPS is SGLang's ``output_throughput`` for the ``vllm-chat`` backend: ``POST
/v1/chat/completions`` one request at a time, non-streaming, ``temperature=0``, ``ignore_eos``,
``max_tokens`` = output length; the sum of ``usage.completion_tokens`` over the timed requests
divided by the wall time from the first timed request's start to the last one's end. A timed
request carries exactly the fields sglang 0.5.2's ``bench_serving`` sends (``chat_payload``), so
a stack sees what the organisers' client sends it. The warm-up is the harness's too: its
requests at once, on the run's first prompt, then a pause; they and the pause are outside the
timed window.
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.bench._metrics import counter_deltas, read_counters
from engine.bench._stats import coefficient_of_variation
from engine.config import Prompt
from engine.http import first_choice, post_json
from engine.stacks import MetricNames
from errors import BenchmarkError

CHAT = "/v1/chat/completions"


def _summed(counts: list[int | None]) -> int | None:
    """The sum of counts read in every part; None where one part had none."""
    return None if any(c is None for c in counts) else sum(c or 0 for c in counts)


@dataclass
class TpsResult:
    tps: float
    completion_tokens: int
    wall_s: float
    latencies_s: list[float]
    tokens: list[int] = field(default_factory=list)  # completion tokens per prompt, as latencies_s
    output_token_ids: list[list[int]] = field(default_factory=list)  # empty unless the stack gives them
    output_text_sha256: list[str] = field(default_factory=list)
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    # When each request started (time.perf_counter(), as ``latencies_s``), and what the stack's own
    # counters moved by over the run (those its adapter names: engine.stacks)
    request_starts: list[float] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float | None:
        return acceptance_rate(self.drafted_tokens, self.accepted_tokens)

    @classmethod
    def join(cls, parts: list[TpsResult]) -> TpsResult:
        """One run timed in consecutive stages: their tokens over the sum of their own windows
        (the time between two stages, spent elsewhere, is no part of the run)."""
        if len(parts) == 1:
            return parts[0]
        tokens, wall = sum(p.completion_tokens for p in parts), sum(p.wall_s for p in parts)
        drafted, accepted = _summed([p.drafted_tokens for p in parts]), _summed([p.accepted_tokens for p in parts])
        return cls(
            tps=tokens / wall,
            completion_tokens=tokens,
            wall_s=wall,
            latencies_s=[x for p in parts for x in p.latencies_s],
            tokens=[x for p in parts for x in p.tokens],
            output_token_ids=[x for p in parts for x in p.output_token_ids]
            if all(p.output_token_ids for p in parts)
            else [],
            output_text_sha256=[x for p in parts for x in p.output_text_sha256],
            drafted_tokens=drafted if drafted is not None and accepted is not None else None,
            accepted_tokens=accepted if drafted is not None and accepted is not None else None,
            request_starts=[x for p in parts for x in p.request_starts],
            counters={
                k: sum(p.counters[k] for p in parts) for k in set.intersection(*(set(p.counters) for p in parts))
            },
        )


def acceptance_rate(drafted: int | None, accepted: int | None) -> float | None:
    return None if not drafted or accepted is None else accepted / drafted


@dataclass
class TpsRuns:
    """R timed runs in one boot. The trial's TPS is the slower of the first run and the median run
    (the lower median for an even R): the first run is what a fresh boot's single run is (the
    organisers' private re-run), later runs of a boot may run warmer, and the median keeps one
    lucky first run from counting. Either way it is one real run's tokens over its own window."""

    runs: list[TpsResult]

    @property
    def median(self) -> TpsResult:
        return sorted(self.runs, key=lambda r: r.tps)[(len(self.runs) - 1) // 2]

    @property
    def chosen(self) -> TpsResult:
        return min(self.runs[0], self.median, key=lambda r: r.tps)

    @property
    def cv(self) -> float | None:
        """Coefficient of variation of the runs' TPS; None for one run."""
        return coefficient_of_variation([r.tps for r in self.runs])

    @property
    def latencies_s(self) -> list[float]:
        return [lat for r in self.runs for lat in r.latencies_s]

    def spec_counts(self) -> tuple[int | None, int | None]:
        """Drafted and accepted tokens summed over the runs (None when a run had no counters)."""
        drafted, accepted = (
            _summed([r.drafted_tokens for r in self.runs]),
            _summed([r.accepted_tokens for r in self.runs]),
        )
        return (drafted, accepted) if drafted is not None and accepted is not None else (None, None)


@dataclass
class ChatAnswer:
    text: str
    completion_tokens: int
    token_ids: list[int] | None


def chat_payload(prompt: Prompt, *, model: str, max_tokens: int, stream: bool = False) -> dict[str, Any]:
    """The body bench_serving's ``vllm-chat`` backend posts (with the harness's ``ignore_eos`` extra
    body), field for field; the optional streaming pass adds what a stream needs for its usage."""
    payload: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt.text}],
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "stream": stream,
        "ignore_eos": True,
    }
    if stream:
        payload["stream_options"] = {"include_usage": True}
    return payload


def parse_chat(data: dict[str, Any], *, what: str) -> ChatAnswer:
    choice = first_choice(data, what=what)
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str):
        raise BenchmarkError(f"{what}: response has no 'choices[0].message.content' string")
    usage = data.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise BenchmarkError(f"{what}: response has no 'usage.completion_tokens' count (got {usage!r})")
    ids = choice.get("token_ids")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
        raise BenchmarkError(f"{what}: 'choices[0].token_ids' is not a list of token ids")
    return ChatAnswer(text=text, completion_tokens=tokens, token_ids=ids)


def chat(client: httpx.Client, prompt: Prompt, *, model: str, max_tokens: int, what: str) -> ChatAnswer:
    data = post_json(client, CHAT, chat_payload(prompt, model=model, max_tokens=max_tokens), what=what)
    return parse_chat(data, what=what)


def warm_up(
    client: httpx.Client, *, model: str, prompt: Prompt, requests: int, output_len: int, pause_s: float
) -> None:
    """The harness's untimed warm-up: ``requests`` short requests on the run's first prompt, sent
    at once (bench_serving gathers them), then a pause."""
    if requests:
        with ThreadPoolExecutor(max_workers=requests) as pool:
            answers = [
                pool.submit(chat, client, prompt, model=model, max_tokens=output_len, what=f"warm-up request {i + 1}")
                for i in range(requests)
            ]
            for answer in answers:
                answer.result()  # a failed warm-up request is the stack's failure, named
    time.sleep(pause_s)


def measure_tps(
    client: httpx.Client, *, model: str, prompts: list[Prompt], output_len: int, metrics: MetricNames | None = None
) -> TpsResult:
    """One timed run of ``prompts``, one at a time; ``metrics``: the stack's counters, read before and after."""
    before = read_counters(client, metrics)
    answers, latencies, starts = [], [], []
    first_start = last_end = 0.0
    for i, prompt in enumerate(prompts):
        start = time.perf_counter()
        answers.append(chat(client, prompt, model=model, max_tokens=output_len, what=f"TPS prompt {prompt.id}"))
        end = time.perf_counter()
        if i == 0:
            first_start = start
        last_end = end
        latencies.append(end - start)
        starts.append(start)
    counters = counter_deltas(before, read_counters(client, metrics))
    wall = last_end - first_start
    tokens = sum(a.completion_tokens for a in answers)
    have_ids = all(a.token_ids is not None for a in answers)
    spec = (
        (int(counters[metrics.drafted]), int(counters[metrics.accepted]))
        if metrics is not None and metrics.drafted in counters and metrics.accepted in counters
        else (None, None)
    )
    return TpsResult(
        tps=tokens / wall,
        completion_tokens=tokens,
        wall_s=wall,
        latencies_s=latencies,
        tokens=[a.completion_tokens for a in answers],
        output_token_ids=[list(a.token_ids or []) for a in answers] if have_ids else [],
        output_text_sha256=[hashlib.sha256(a.text.encode()).hexdigest() for a in answers],
        drafted_tokens=spec[0],
        accepted_tokens=spec[1],
        request_starts=starts,
        counters=counters,
    )


@dataclass(frozen=True)
class StreamTiming:
    """One streamed request, timed as sglang's ``bench_serving`` times it: from the request's start to the first
    content chunk (TTFT), between content chunks (inter-token latency), to the stream's end (latency)."""

    start_s: float  # time.perf_counter() when it was sent
    ttft_s: float
    itl_s: list[float]
    latency_s: float
    output_tokens: int  # the stream's usage.completion_tokens, else its content chunks

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first, as bench_serving's TPOT: (latency - TTFT) / (tokens - 1)."""
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


def stream_one(client: httpx.Client, prompt: Prompt, *, model: str, max_tokens: int) -> StreamTiming:
    """One streaming request with the organisers' request fields (``chat_payload``), timed."""
    what = f"streaming prompt {prompt.id}"
    payload = chat_payload(prompt, model=model, max_tokens=max_tokens, stream=True)
    start = time.perf_counter()
    arrivals: list[float] = []
    usage: int | None = None
    try:
        with client.stream("POST", CHAT, json=payload) as response:
            if response.status_code != 200:
                raise BenchmarkError(f"{what}: answered HTTP {response.status_code}: {response.read()[:300]!r}")
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                body = line[5:].strip()
                if body == "[DONE]":
                    break
                try:
                    chunk = json.loads(body)
                except (ValueError, RecursionError):  # JSONDecodeError, a huge number, deep nesting
                    raise BenchmarkError(f"{what}: malformed stream chunk {body[:200]!r}") from None
                if not isinstance(chunk, dict):
                    raise BenchmarkError(f"{what}: stream chunk is not a JSON object: {body[:200]!r}")
                # A chunk without content (the role, the usage) is fine; so is any odd shape inside.
                choices = chunk.get("choices")
                first = choices[0] if isinstance(choices, list) and choices else None
                delta = first.get("delta") if isinstance(first, dict) else None
                if isinstance(delta, dict) and delta.get("content"):
                    arrivals.append(time.perf_counter())
                counted = chunk.get("usage")
                if isinstance(counted, dict) and isinstance(counted.get("completion_tokens"), int):
                    usage = counted["completion_tokens"]
    except httpx.TimeoutException:
        raise BenchmarkError(f"{what}: timed out after {client.timeout.read} s") from None
    except httpx.HTTPError as exc:
        raise BenchmarkError(f"{what}: failed ({type(exc).__name__}: {exc})") from None
    end = time.perf_counter()
    if not arrivals:
        raise BenchmarkError(f"{what}: the stream carried no content")
    return StreamTiming(
        start_s=start,
        ttft_s=arrivals[0] - start,
        itl_s=[b - a for a, b in zip(arrivals, arrivals[1:])],
        latency_s=end - start,
        output_tokens=usage if usage is not None else len(arrivals),
    )


def stream_pass(
    client: httpx.Client, *, model: str, prompts: list[Prompt], output_len: int
) -> tuple[list[float], list[float]]:
    """Time to first token per prompt, and every gap between content chunks (inter-token latency)."""
    ttfts, itls = [], []
    for prompt in prompts:
        timing = stream_one(client, prompt, model=model, max_tokens=output_len)
        ttfts.append(timing.ttft_s)
        itls.extend(timing.itl_s)
    return ttfts, itls
