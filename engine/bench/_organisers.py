"""The organisers' own tools against a running stack: their TPS client, and their audit request.

- ``bench_serving``: sglang 0.5.2's ``bench_serving`` (installed unchanged by ``python -m
  engine.install sglang-bench``), run by its path exactly as the organisers' harness runs it:
  ``--backend vllm-chat --dataset-name sharegpt --max-concurrency 1 --request-rate inf --seed 1
  --extra-request-body '{"ignore_eos": true}' --disable-stream``, the profile's prompt count, output
  length and warm-up requests; its ``output_throughput``.
- ``audit``: the request their audit stage makes, ``POST /v1/completions`` with
  ``return_token_ids: true``, which needs ``choices[0].token_ids`` back; the ids.

PPL is scored as their ``ppl_endpoint.py`` does by ``engine.bench.measure_ppl`` (its requests are
theirs, field for field: ``tests/engine/test_wire.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx

from engine.config import BenchProfile, PplRecord
from engine.http import first_choice, post_json
from errors import BenchmarkError, EngineError

__all__ = ["audit", "bench_serving"]

_AUDIT_TOKENS = 8


def bench_serving(
    python: Path,
    script: str,
    *,
    base_url: str,
    model: str,
    tokenizer: Path,
    prompts: Path,
    profile: BenchProfile,
    work: Path,
    timeout_s: float = 3600.0,
) -> float:
    """One ``bench_serving`` run, as the organisers' harness invokes it; its ``output_throughput``."""
    result = work / f"bench-{time.monotonic_ns()}.jsonl"
    argv = [
        str(python),
        script,
        "--backend",
        "vllm-chat",
        "--base-url",
        base_url,
        "--model",
        model,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(prompts),
        "--sharegpt-output-len",
        str(profile.output_len),
        "--num-prompts",
        str(profile.num_prompts),
        "--max-concurrency",
        "1",
        "--request-rate",
        "inf",
        "--warmup-requests",
        str(profile.warmup_requests),
        "--seed",
        "1",
        "--extra-request-body",
        '{"ignore_eos": true}',
        "--disable-stream",
        "--output-file",
        str(result),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0 or not result.exists():
        raise EngineError(f"bench_serving exited with {done.returncode}: {done.stderr[-1500:]}")
    return float(json.loads(result.read_text().splitlines()[-1])["output_throughput"])


def audit(base_url: str, *, model: str, record: PplRecord, timeout_s: float = 600.0) -> list[int]:
    """The audit stage's request on the first PPL record's context; the token ids it returned.
    Raises BenchmarkError when the stack answers without them."""
    payload = {
        "model": model,
        "prompt": list(record.context_token_ids),
        "max_tokens": _AUDIT_TOKENS,
        "temperature": 0.0,
        "add_special_tokens": False,
        "return_token_ids": True,
    }
    with httpx.Client(base_url=base_url, timeout=httpx.Timeout(timeout_s, connect=10.0)) as client:
        choice = first_choice(post_json(client, "/v1/completions", payload, what="the audit"), what="the audit")
    ids = choice.get("token_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
        raise BenchmarkError(
            f"the audit request (/v1/completions, return_token_ids) got no choices[0].token_ids back: {ids!r}"[:300]
        )
    return ids
