"""Greedy generation: plain, or speculative (``draft`` with a centroid-head drafter, ``ngram``).

Every generated position goes through ``Gemma3.step`` one position at a time, in both plain and
speculative decoding, so its final hidden state is bit-identical across methods; the only batched
work is the verifying LM head, whose argmax ``Heads.greedy_many`` makes exact (see _heads.py).
Rejected positions leave keys/values behind in the cache; they are overwritten before anything
reads them, since attention never reads past the position being computed.

One speculative cycle, with the pending token t0 (known, not yet run) at position p:
  drafter:  t0 -> h0 -> d1 -> h1 -> ... -> dk -> hk   (``draft_layers`` lower layers, centroid head)
  verifier: the upper layers for positions p..p+k (none when the drafter uses all layers), then
            one batched full head over h0..hk -> targets g1..g(k+1);
  output:   g1..g(j+1), where j is the longest prefix with d_i == g_i; the next pending is g(j+1).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch

from engine.reference._config import SpecConfig
from engine.reference._heads import Heads
from engine.reference._model import Gemma3, KVCache


@dataclass
class SpecStats:
    drafts: int = 0  # verification cycles that had a proposal
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def add(self, *, proposed: int, accepted: int) -> None:
        self.drafts += 1
        self.draft_tokens += proposed
        self.accepted_tokens += accepted
        if len(self.accepted_per_pos) < proposed:
            self.accepted_per_pos.extend([0] * (proposed - len(self.accepted_per_pos)))
        for i in range(accepted):
            self.accepted_per_pos[i] += 1

    def merge(self, other: SpecStats) -> None:
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted_tokens += other.accepted_tokens
        if len(self.accepted_per_pos) < len(other.accepted_per_pos):
            self.accepted_per_pos.extend([0] * (len(other.accepted_per_pos) - len(self.accepted_per_pos)))
        for i, n in enumerate(other.accepted_per_pos):
            self.accepted_per_pos[i] += n


@dataclass
class Generation:
    token_ids: list[int]
    finish_reason: Literal["stop", "length"]
    stats: SpecStats
    # With keep_hidden: final hidden states of prompt positions 0..n-2 (they score prompt tokens
    # 1..n-1) and, per generated token, the state its head chose it from.
    prompt_hidden: torch.Tensor | None = None
    hidden: list[torch.Tensor] = field(default_factory=list)
    # seconds from one cycle's tokens to the next's (vLLM's inter-token latency, one a step): the first
    # cycle's tokens are the first token's, which has no gap
    step_s: list[float] = field(default_factory=list)


class Decoder:
    def __init__(self, model: Gemma3, heads: Heads, *, spec: SpecConfig | None, centroid_top_k: int) -> None:
        self.model = model
        self.heads = heads
        self.spec = spec
        self.top_k = centroid_top_k
        self.lookahead = spec.num_speculative_tokens if spec else 0
        layers = model.cfg.layers
        self.lower = range(spec.draft_layers or layers) if spec else range(layers)
        self.upper = range(self.lower.stop, layers)

    def generate(
        self,
        prompt: list[int],
        *,
        max_new_tokens: int,
        stop_ids: frozenset[int] = frozenset(),
        on_token: Callable[[int], None] | None = None,
        keep_hidden: bool = False,
    ) -> Generation:
        if not prompt:
            raise ValueError("an empty prompt has no position to continue from")
        model = self.model
        cache = model.new_cache(len(prompt) + max_new_tokens + self.lookahead + 1)
        # The last prompt token runs through `step` like every generated one: the first new token
        # then comes from the same per-position path in every decoding method.
        prompt_hidden = None
        if len(prompt) > 1:
            prompt_hidden = model.prefill(torch.tensor(prompt[:-1], device=model.device), cache)
        state = _State(cache=cache, position=len(prompt) - 1, pending=prompt[-1], context=list(prompt))
        result = Generation([], "length", SpecStats(), prompt_hidden if keep_hidden else None)
        last = None
        while True:
            budget = max_new_tokens - len(result.token_ids)
            emitted = self._cycle(state, result.stats, budget=budget)
            now = time.perf_counter()
            if last is not None:
                result.step_s.append(now - last)
            last = now
            for token, hidden in zip(*emitted):
                result.token_ids.append(token)
                if keep_hidden:
                    result.hidden.append(hidden)
                if on_token is not None:
                    on_token(token)
                if token in stop_ids:
                    result.finish_reason = "stop"
                    return result
                if len(result.token_ids) == max_new_tokens:
                    return result

    # ------------------------------------------------------------------ cycles

    def _cycle(self, state: _State, stats: SpecStats, *, budget: int) -> tuple[list[int], list[torch.Tensor]]:
        """Emitted tokens and, for each, the final hidden state it was chosen from."""
        k = min(self.lookahead, budget - 1)  # never draft past what the request can still emit
        if self.spec is None or k <= 0:
            return self._plain(state)
        if self.spec.method == "ngram":
            proposal = _prompt_lookup(
                state.context, k=k, min_n=self.spec.prompt_lookup_min, max_n=self.spec.prompt_lookup_max
            )
            if not proposal:
                return self._plain(state)
            return self._verify(state, stats, proposal, self._run_positions(state, [state.pending, *proposal]))
        return self._draft(state, stats, k)

    def _embed(self, token: int) -> torch.Tensor:
        return self.model.embed(torch.tensor([token], device=self.model.device))

    def _plain(self, state: _State) -> tuple[list[int], list[torch.Tensor]]:
        x = self.model.step(
            self._embed(state.pending), state.cache, layers=self.model.all_layers(), position=state.position
        )
        h = self.model.final(x)
        token = self.heads.greedy_one(h)
        state.advance([token])
        return [token], [h]

    def _run_positions(self, state: _State, tokens: list[int]) -> list[torch.Tensor]:
        """Final hidden states of ``tokens`` at positions state.position.., one position at a time."""
        layers = self.model.all_layers()
        return [
            self.model.final(self.model.step(self._embed(t), state.cache, layers=layers, position=state.position + i))
            for i, t in enumerate(tokens)
        ]

    def _draft(self, state: _State, stats: SpecStats, k: int) -> tuple[list[int], list[torch.Tensor]]:
        model, heads = self.model, self.heads
        residuals, drafts, token = [], [], state.pending
        for i in range(k + 1):
            x = model.step(self._embed(token), state.cache, layers=self.lower, position=state.position + i)
            residuals.append(x)
            if i < k:
                token = heads.draft(model.final(x), top_k=self.top_k)
                drafts.append(token)
        # Upper layers position by position (empty when the drafter is the whole body).
        finals = [
            model.final(model.step(x, state.cache, layers=self.upper, position=state.position + i))
            for i, x in enumerate(residuals)
        ]
        return self._verify(state, stats, drafts, finals)

    def _verify(
        self, state: _State, stats: SpecStats, proposal: list[int], finals: list[torch.Tensor]
    ) -> tuple[list[int], list[torch.Tensor]]:
        return self._accept(state, stats, proposal, self.heads.greedy_many(finals), finals)

    def _accept(
        self, state: _State, stats: SpecStats, proposal: list[int], targets: list[int], finals: list[torch.Tensor]
    ) -> tuple[list[int], list[torch.Tensor]]:
        """Keep the longest prefix of ``proposal`` that agrees with ``targets``, plus the next target."""
        accepted = 0
        while accepted < len(proposal) and proposal[accepted] == targets[accepted]:
            accepted += 1
        stats.add(proposed=len(proposal), accepted=accepted)
        emitted = targets[: accepted + 1]
        state.advance(emitted)
        return emitted, finals[: accepted + 1]


@dataclass
class _State:
    cache: KVCache
    position: int  # position of `pending`
    pending: int  # last known token, not yet run through the model
    context: list[int]  # prompt + generated, ending with `pending`

    def advance(self, emitted: list[int]) -> None:
        self.position += len(emitted)
        self.pending = emitted[-1]
        self.context.extend(emitted)


def _prompt_lookup(context: list[int], *, k: int, min_n: int, max_n: int) -> list[int]:
    """Prompt lookup: the k tokens that followed the latest earlier match of the context's suffix.

    Tries the longest suffix first (max_n down to min_n), as vLLM's n-gram proposer does.
    """
    size = len(context)
    for n in range(min(max_n, size - 1), min_n - 1, -1):
        suffix = context[size - n :]
        for start in range(size - n - 1, -1, -1):
            if context[start : start + n] == suffix:
                return context[start + n : start + n + k]
    return []
