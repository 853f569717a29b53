"""The highest load a configuration holds under an SLO, on a running stack: ``probe_levels`` measures the levels that
``sweep.judgement.max_load`` bisects, each level decided over repeated runs with the noise in the decision (the
decision is a rule of judging, ``sweep.judgement``'s, so that a serving claim's boots are judged by it too).

A level **holds** when the SLO's bounded figures at its percentile (``p99 TTFT`` and the rest) stay under their
bounds with margin over the noise: each run gives the largest ratio of a figure to its bound; over the level's
``repeats`` runs, the one-sided Student-t upper confidence bound of their mean (``confidence``, 90% by default)
must be at most 1. A level whose runs scatter across the bound is not held: what one lucky run met, a re-run may
miss (GuideLLM's users measured run-to-run spread 1.8-3.2x what one run's own interval says).

The search assumes a level that holds lets every lower one hold (latency grows with load), and bisects the sorted
levels: the lowest first (none held if it fails), then the middle of what is still open, until the highest level
that holds sits next to the lowest that fails. It measures about log2 of the number of levels, not all of them.

``probe_levels`` measures a level on a running stack: a warm-up sized to it (as many warm-up requests as it puts
in flight, so that the stack has met that batch before it is timed), then ``repeats`` runs, each on its own slice
of the public prompts, taken in order around the set (a prompt is timed again only once the whole set has been).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from engine.bench import Workload, harness_warm_up, measure_load
from engine.config import BenchProfile, Prompt
from engine.measurement import LoadLevel

__all__ = ["probe_levels"]


@dataclass(kw_only=True)
class _Slices:
    """The public prompts handed out in order, a slice a run, around the set when it runs out."""

    public: list[Prompt]
    next: int = 0

    def take(self, count: int) -> list[Prompt]:
        taken = [self.public[(self.next + i) % len(self.public)] for i in range(count)]
        self.next = (self.next + count) % len(self.public)
        return taken


def probe_levels(
    client: httpx.Client,
    *,
    model: str,
    profile: BenchProfile,
    public: list[Prompt],
    repeats: int,
    num_prompts: int,
    output_len: int,
) -> Callable[[int], list[LoadLevel]]:
    """``measure`` for ``sweep.judgement.max_load`` on the stack ``client`` reaches (see the module's docstring):
    each run sends ``num_prompts`` requests, or the level's concurrency where that is more, of ``output_len``
    tokens."""
    if repeats < 2 or not public:
        raise ValueError(f"a level needs at least 2 runs and some public prompts, got {repeats} and {len(public)}")
    slices = _Slices(public=public)

    def measure(concurrency: int) -> list[LoadLevel]:
        workload = Workload(
            name=f"c{concurrency}",
            concurrency=concurrency,
            num_prompts=max(num_prompts, concurrency),
            output_len=output_len,
        )
        harness_warm_up(client, model=model, prompt=public[0], profile=profile, requests=concurrency)
        return [
            measure_load(client, model=model, prompts=slices.take(workload.num_prompts), workload=workload)
            for _ in range(repeats)
        ]

    return measure
