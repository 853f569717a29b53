"""One contract every stack passes: the HTTP API the harness measures through.

Each stack boots from its manifest (real process, real HTTP) and must answer the way vLLM does:
/v1/models, chat completions with usage and token ids, completions over token-id prompts with
vLLM's prompt_logprobs shape, and the speculative-decoding counters on /metrics.
"""

import math

import httpx
import pytest

from engine.knobs import baseline_knobs
from engine.launch import build_launch
from engine.manifest import load_manifest
from engine.process import EngineProcess
from tests.stacks import STUB_MANIFEST

STACKS = [
    pytest.param(STUB_MANIFEST, id="stub"),
    pytest.param("reference", id="reference", marks=pytest.mark.slow),
]
PROMPT = [2, 105, 2364, 107, 3689, 563, 506, 5279, 529, 7001, 236881, 106, 107, 105, 4368, 107]


@pytest.fixture(scope="module", params=STACKS)
def stack(request, tmp_path_factory):
    manifest = load_manifest(request.param)
    launch = build_launch(manifest, baseline_knobs(manifest))
    log = tmp_path_factory.mktemp("contract") / "engine.log"
    with (
        EngineProcess(launch, log_path=log, boot_timeout_s=300) as engine,
        httpx.Client(base_url=engine.base_url, timeout=300) as client,
    ):
        yield launch.served_model_name, client


def test_models_lists_the_served_name(stack):
    model, client = stack
    assert model in [m["id"] for m in client.get("/v1/models").json()["data"]]


def test_chat_completion_honours_max_tokens_with_ignore_eos_and_returns_ids(stack):
    model, client = stack
    body = client.post(
        "/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": "Name three prime numbers."}],
            "max_tokens": 12,
            "temperature": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
        },
    ).json()
    assert body["usage"]["completion_tokens"] == 12
    assert isinstance(body["choices"][0]["message"]["content"], str)
    assert len(body["choices"][0]["token_ids"]) == 12


def test_completions_give_prompt_logprobs_in_vllms_shape(stack):
    model, client = stack
    body = client.post(
        "/v1/completions",
        json={
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 1,
            "add_special_tokens": False,
        },
    ).json()
    entries = body["choices"][0]["prompt_logprobs"]
    assert len(entries) == len(PROMPT) and entries[0] is None
    for token, entry in zip(PROMPT[1:], entries[1:]):
        item = entry[str(token)]
        assert math.isfinite(item["logprob"]) and item["logprob"] <= 0 and item["rank"] >= 1


def test_completions_return_generated_token_ids(stack):
    model, client = stack
    body = client.post(
        "/v1/completions",
        json={
            "model": model,
            "prompt": PROMPT,
            "max_tokens": 5,
            "temperature": 0.0,
            "ignore_eos": True,
            "add_special_tokens": False,
            "return_token_ids": True,
        },
    ).json()
    assert len(body["choices"][0]["token_ids"]) == 5


def test_metrics_expose_the_speculative_decoding_counters(stack):
    _, client = stack
    text = client.get("/metrics").text
    assert "vllm:spec_decode_num_draft_tokens_total" in text
    assert "vllm:spec_decode_num_accepted_tokens_total" in text
