"""The serving stacks this project knows, one adapter each, and the registry that picks one for a manifest.

    _adapter     StackAdapter (its counters, its PPL wire, its boot log's phases, its install) and Recipe
    _wire        the organisers' PPL request and vLLM's answer to it: the wire of every stack below
    _vllm        stock vLLM and stacks built on it
    _reference   the embedded reference stack
    _openai      any other OpenAI-compatible server: the API alone
    _registry    ADAPTERS (one a stack), RECIPES (their installs), adapter_for(manifest)
    _phases      a boot's phases and the settings a stack says it resolved, read from its log by its adapter

A manifest names its stack (``"stack": "vllm"``); one that names none is a generic OpenAI-compatible server.
Adding a stack is one adapter module here, its entry in ``ADAPTERS``, and a manifest that names it.
"""

from engine.stacks._adapter import STEP_BUCKETS, MetricNames, PplWire, Recipe, StackAdapter
from engine.stacks._phases import boot_phases, resolved_settings
from engine.stacks._registry import ADAPTERS, RECIPES, adapter_for
from engine.stacks._wire import ORGANISERS, ppl_payload, target_nlls

__all__ = [
    "ADAPTERS",
    "ORGANISERS",
    "RECIPES",
    "STEP_BUCKETS",
    "MetricNames",
    "PplWire",
    "Recipe",
    "StackAdapter",
    "adapter_for",
    "boot_phases",
    "ppl_payload",
    "resolved_settings",
    "target_nlls",
]
