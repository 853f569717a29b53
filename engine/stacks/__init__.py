"""The serving stacks this project knows, one adapter each, and the registry that picks one for a manifest.

    _adapter     StackAdapter (its counters, its PPL wire, its boot log's phases, its install) and Recipe
    _wire        the organisers' PPL request and vLLM's answer to it: the wire of every stack below
    _vllm        stock vLLM and stacks built on it
    _reference   the embedded reference stack
    _openai      any other OpenAI-compatible server: the API alone
    _phases      a boot's phases and the settings a stack says it resolved, read from its log by its adapter

A manifest names its stack (``"stack": "vllm"``); one that names none is a generic OpenAI-compatible server.
Adding a stack is one adapter module here, its entry in ``ADAPTERS``, and a manifest that names it.
"""

from __future__ import annotations

from engine.config import Manifest
from engine.stacks._adapter import STEP_BUCKETS, MetricNames, PplWire, Recipe, StackAdapter
from engine.stacks._openai import OPENAI
from engine.stacks._phases import boot_phases, resolved_settings
from engine.stacks._reference import REFERENCE
from engine.stacks._vllm import VLLM
from engine.stacks._wire import ORGANISERS, ppl_payload, record_nll
from errors import ManifestError

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
    "record_nll",
    "resolved_settings",
]

ADAPTERS: dict[str, StackAdapter] = {a.name: a for a in (REFERENCE, VLLM, OPENAI)}
# the stacks' own installs, by the name `python -m engine.install` takes
RECIPES: dict[str, Recipe] = {a.recipe.name: a.recipe for a in ADAPTERS.values() if a.recipe is not None}


def adapter_for(manifest: Manifest) -> StackAdapter:
    """The adapter of the stack ``manifest`` names (a generic OpenAI-compatible server where it names none);
    raises ManifestError for a stack this project has no adapter for."""
    name = manifest.stack or OPENAI.name
    if name not in ADAPTERS:
        raise ManifestError(
            f"{manifest.label}: field 'stack': no adapter for stack {name!r}; known stacks: {sorted(ADAPTERS)} "
            "(leave the field out for a generic OpenAI-compatible server)"
        )
    return ADAPTERS[name]
