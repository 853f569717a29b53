"""Any other OpenAI-compatible server: measured through the API alone, as the organisers measure it."""

from __future__ import annotations

from engine.stacks._adapter import StackAdapter
from engine.stacks._wire import ORGANISERS

__all__ = ["OPENAI"]

# The organisers score every submission with one PPL request: a server that cannot answer it cannot be scored.
# No counters, no boot phases, nothing to install: a run's step figures and a boot's phases are left out.
OPENAI = StackAdapter(name="openai", ppl=ORGANISERS)
