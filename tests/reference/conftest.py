"""Fixtures over the real reference model: loaded once per session, servers booted once per config."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine.config import REPO_ROOT
from engine.launch import EngineProcess, LaunchConfig
from engine.stackside import free_port

DATA = Path(__file__).parent / "data"
GEN_TOKENS = 64

# Eight prompts: open prose, lists, code, and text that repeats itself (where lookup drafts pay).
PROMPTS = [
    "The history of the city of Rome spans two and a half thousand years. It was founded",
    "Here is a short recipe for bread. Ingredients: flour, water, salt and yeast. Step 1:",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday,",
    "Question: What is the boiling point of water at sea level?\nAnswer:",
    "Dear Sir or Madam,\n\nI am writing to complain about",
    "The three laws of motion formulated by Isaac Newton are",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
]


def _load_runtime(dtype_name: str):
    import torch

    from engine.reference.runtime import load_runtime

    os.environ["HF_HUB_OFFLINE"] = "1"
    torch.set_grad_enabled(False)
    # REFERENCE_TEST_DEVICE=cuda runs these tests on a GPU (the graph decoder); CI has none.
    return load_runtime(device=os.environ.get("REFERENCE_TEST_DEVICE", "cpu"), dtype=getattr(torch, dtype_name))


def _load_hf(checkpoint_dir: Path, dtype_name: str):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        checkpoint_dir, dtype=getattr(torch, dtype_name), attn_implementation="eager"
    )


@pytest.fixture(scope="session")
def runtime():
    return _load_runtime("bfloat16")


@pytest.fixture(scope="session")
def runtime_fp32():
    """The model in float32: its arithmetic apart from bf16's rounding, which moves single tokens' log-probs by up
    to 0.23 nats whenever two forwards round differently; bf16 also scores a text 5x slower on CPUs without
    AVX-512 (937 tokens: 70 s, 15 s in float32)."""
    return _load_runtime("float32")


@pytest.fixture(scope="session")
def tokenizer(runtime):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(runtime.checkpoint_dir)


@pytest.fixture(scope="session")
def prompt_ids(tokenizer) -> list[list[int]]:
    return [tokenizer(p).input_ids for p in PROMPTS]


@pytest.fixture(scope="session")
def plain_outputs(runtime, prompt_ids) -> list[list[int]]:
    """Plain greedy decoding (no speculation): the reference every speculative config must equal."""
    decoder = runtime.decoder()
    return [decoder.generate(ids, max_new_tokens=GEN_TOKENS).token_ids for ids in prompt_ids]


@pytest.fixture(scope="session")
def ppl_text() -> str:
    return (DATA / "ppl_text.txt").read_text()


@contextmanager
def reference_server(env: dict[str, str], log_dir: Path) -> Iterator[EngineProcess]:
    port = free_port()
    launch = LaunchConfig(
        argv=[sys.executable, "-m", "engine.reference.serve"],
        env={"PORT": str(port), "HF_HUB_OFFLINE": "1", **env},
        cwd=REPO_ROOT,
        host="127.0.0.1",
        port=port,
        served_model_name=env.get("SERVED_MODEL_NAME", "gemma-3-270m"),
        manifest_name="reference-test",
    )
    with EngineProcess(launch, log_path=log_dir / f"reference-{port}.log", boot_timeout_s=300) as engine:
        yield engine


@pytest.fixture(scope="session")
def hf_model(runtime):
    return _load_hf(runtime.checkpoint_dir, "bfloat16")


@pytest.fixture(scope="session")
def hf_model_fp32(runtime_fp32):
    return _load_hf(runtime_fp32.checkpoint_dir, "float32")


def hf_token_logprobs(hf_model, ids: list[int], *, window: int | None = None) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1, from transformers' own forward of the checkpoint."""
    import torch

    config = hf_model.config
    saved = config.sliding_window
    config.sliding_window = window or saved
    try:
        logits = hf_model(torch.tensor([ids])).logits[0, :-1].float()
    finally:
        config.sliding_window = saved
    lsm = torch.log_softmax(logits, dim=-1)
    return lsm.gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
