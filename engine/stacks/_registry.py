"""The registry of the stacks this project knows: one adapter a stack, and the one a manifest names."""

from __future__ import annotations

from engine.config import Manifest
from engine.stacks._adapter import Recipe, StackAdapter
from engine.stacks._openai import OPENAI
from engine.stacks._reference import REFERENCE
from engine.stacks._vllm import VLLM
from errors import ManifestError

__all__ = ["ADAPTERS", "RECIPES", "adapter_for"]

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
