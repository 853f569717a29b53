"""The embedded reference stack (``engine/reference``): it answers vLLM's API and exposes vLLM's counters."""

from __future__ import annotations

from engine.stacks._adapter import StackAdapter
from engine.stacks._vllm import VLLM_METRICS
from engine.stacks._wire import ORGANISERS

__all__ = ["REFERENCE"]

# Its server logs no boot phases: it prepares its model before the stack starts (engine.reference.prepare), and
# installs with this project.
REFERENCE = StackAdapter(name="reference", ppl=ORGANISERS, metrics=VLLM_METRICS)
