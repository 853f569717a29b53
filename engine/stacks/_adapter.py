"""What this project knows of one serving stack: ``StackAdapter``, and ``Recipe`` (how to install one).

Everything else measures a stack only through its OpenAI-compatible HTTP API, as the organisers'
harness does; what differs from stack to stack is read here, and nowhere else:

    metrics   the names of its Prometheus counters (``MetricNames``): speculative decoding's drafted and
              accepted tokens, its drafts, its engine steps; None where it exposes none this project reads
    ppl       how a PPL record is asked for and read back: the organisers' request (``prompt_logprobs`` on
              ``/v1/completions``, vLLM's answer shape) unless the stack's API differs
    phases    where its boot went, from its own log: phase name -> a pattern whose first group is seconds
    settings  what it resolved, from its own log: setting name -> a pattern whose first group is the value
    stamp     the pattern of a timestamped line of its log (the first one says when the stack began work)
    name      what provenance calls it when its ``GET /version`` does not say
    recipe    the install of its own virtual environment (``python -m engine.install``), where it has one
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.config import PplRecord
from engine.stackside import STEP_BUCKETS

__all__ = ["STEP_BUCKETS", "MetricNames", "PplWire", "Recipe", "StackAdapter"]


@dataclass(frozen=True)
class Recipe:
    """An install into a virtual environment of its own: pip steps, then a check that prints versions (JSON)."""

    name: str
    venv_name: str  # default folder at the repository root
    installs: tuple[tuple[str, ...], ...]  # pip install argument lists, in order
    check: str  # Python run in the new environment; prints a JSON object of versions
    removes: tuple[str, ...] = ()  # distributions uninstalled afterwards
    remove_scripts: tuple[str, ...] = ()  # bin/ entries deleted afterwards

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class MetricNames:
    """A stack's counters that a timed run's figures are made of (``engine.bench``'s stack figures)."""

    drafted: str  # speculative tokens proposed
    accepted: str  # of them, accepted
    drafts: str  # drafting steps: one a step per request that drafted
    steps: str  # engine steps
    more: tuple[str, ...] = ()  # other counters and histograms' _sum/_count kept with a run
    # a histogram observing one value a step at one request at a time (its buckets and _sum are read:
    # engine.bench._steps); None where the stack has none
    step_seconds: str | None = None

    @property
    def counters(self) -> tuple[str, ...]:
        step_sum = () if self.step_seconds is None else (f"{self.step_seconds}_sum",)
        return tuple(dict.fromkeys((self.drafts, self.drafted, self.accepted, self.steps, *self.more, *step_sum)))


@dataclass(frozen=True)
class PplWire:
    """How one PPL record is asked for (``request(record, model) -> JSON body`` of ``/v1/completions``) and
    its target tokens' NLLs read from the answer, in order (``nlls(answer, record)``)."""

    request: Callable[[PplRecord, str], dict[str, Any]]
    nlls: Callable[[dict[str, Any], PplRecord], list[float]]


@dataclass(frozen=True, kw_only=True)
class StackAdapter:
    """One serving stack, as this project reads it (see the module's docstring)."""

    name: str
    ppl: PplWire
    metrics: MetricNames | None = None
    phases: dict[str, re.Pattern[str]] = field(default_factory=dict)
    settings: dict[str, re.Pattern[str]] = field(default_factory=dict)
    stamp: re.Pattern[str] | None = None
    recipe: Recipe | None = None
