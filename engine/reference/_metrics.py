"""Server counters in Prometheus text format, named as vLLM names them (v1 engine).

Only served requests count; the start-up warm-up does not, so ``generation_tokens_total`` equals
the sum of ``usage.completion_tokens`` over the responses.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.reference._decode import SpecStats
from engine.stackside import STEP_BUCKETS  # not engine.stacks: a folder's stack has no httpx


@dataclass
class Metrics:
    model_name: str
    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests_success: int = 0
    running: int = 0
    waiting: int = 0
    spec: SpecStats = field(default_factory=SpecStats)
    # vllm:inter_token_latency_seconds: steps per bucket of STEP_BUCKETS (the last past them all), their sum
    step_counts: list[int] = field(default_factory=lambda: [0] * (len(STEP_BUCKETS) + 1))
    step_sum: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def queued(self) -> None:
        with self._lock:
            self.waiting += 1

    def started(self) -> None:
        with self._lock:
            self.waiting -= 1
            self.running += 1

    def finished(
        self,
        *,
        prompt_tokens: int,
        generation_tokens: int,
        stats: SpecStats | None,
        ok: bool,
        step_s: Sequence[float] = (),
    ) -> None:
        with self._lock:
            self.running -= 1
            if not ok:
                return
            self.requests_success += 1
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += generation_tokens
            if stats is not None:
                self.spec.merge(stats)
            for gap in step_s:
                self.step_counts[bisect.bisect_left(STEP_BUCKETS, gap)] += 1
            self.step_sum += sum(step_s)

    def render(self, *, speculative: bool) -> str:
        labels = f'engine="0",model_name="{self.model_name}"'
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, int]]) -> None:
            # As prometheus_client writes a counter in the text format vLLM serves: the HELP and
            # TYPE lines carry the sample's own ``_total`` name.
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{name}{{{labels}{extra}}} {value}" for extra, value in samples)

        with self._lock:
            metric(
                "vllm:num_requests_running",
                "gauge",
                "Number of requests in model execution batches.",
                [("", self.running)],
            )
            metric(
                "vllm:num_requests_waiting",
                "gauge",
                "Number of requests waiting to be processed.",
                [("", self.waiting)],
            )
            metric(
                "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [("", self.prompt_tokens)]
            )
            metric(
                "vllm:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                [("", self.generation_tokens)],
            )
            metric(
                "vllm:request_success_total",
                "counter",
                "Count of successfully processed requests.",
                [("", self.requests_success)],
            )
            cumulative, buckets = 0, []
            for bound, n in zip([*(repr(b) for b in STEP_BUCKETS), "+Inf"], self.step_counts):
                cumulative += n
                buckets.append((f',le="{bound}"', cumulative))
            lines.append("# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.")
            lines.append("# TYPE vllm:inter_token_latency_seconds histogram")
            lines.extend(f"vllm:inter_token_latency_seconds_bucket{{{labels}{le}}} {n}" for le, n in buckets)
            lines.append(f"vllm:inter_token_latency_seconds_sum{{{labels}}} {self.step_sum}")
            lines.append(f"vllm:inter_token_latency_seconds_count{{{labels}}} {cumulative}")
            if speculative:
                s = self.spec
                metric(
                    "vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", [("", s.drafts)]
                )
                metric(
                    "vllm:spec_decode_num_draft_tokens_total",
                    "counter",
                    "Number of draft tokens.",
                    [("", s.draft_tokens)],
                )
                metric(
                    "vllm:spec_decode_num_accepted_tokens_total",
                    "counter",
                    "Number of accepted tokens.",
                    [("", s.accepted_tokens)],
                )
                metric(
                    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                    "counter",
                    "Accepted tokens per draft position.",
                    [(f',position="{i}"', n) for i, n in enumerate(s.accepted_per_pos)],
                )
        return "\n".join(lines) + "\n"
