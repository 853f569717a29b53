"""Server counters in Prometheus text format, named as vLLM names them (v1 engine).

Only served requests count; the start-up warm-up does not, so ``generation_tokens_total`` equals
the sum of ``usage.completion_tokens`` over the responses.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from engine.reference._decode import SpecStats


@dataclass
class Metrics:
    model_name: str
    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests_success: int = 0
    running: int = 0
    waiting: int = 0
    spec: SpecStats = field(default_factory=SpecStats)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def queued(self) -> None:
        with self._lock:
            self.waiting += 1

    def started(self) -> None:
        with self._lock:
            self.waiting -= 1
            self.running += 1

    def finished(self, *, prompt_tokens: int, generation_tokens: int, stats: SpecStats | None, ok: bool) -> None:
        with self._lock:
            self.running -= 1
            if not ok:
                return
            self.requests_success += 1
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += generation_tokens
            if stats is not None:
                self.spec.merge(stats)

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
