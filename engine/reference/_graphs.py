"""Decoding from captured CUDA graphs: plain and speculative cycles as one replay each.

On CUDA a decode step of this small model is bound by launching kernels from Python, not by the
GPU (benchmarks/results/gpu/README.md; transformers itself: 12.5 tokens/s with transformers against a weight-read floor near 0.13 ms a step).
``GraphEngine`` owns one static KV cache and builds *programs* over ``_static.StaticStep``:

- ``verify(m)``: positions p..p+m-1 with given tokens (the pending token, then a proposal), each
  through the single-position step, then one batched full head and the decision of every row.
  Plain decoding is ``verify(1)``; ``ngram`` verifies its proposal with ``verify(k + 1)``.
- ``draft(k)``: the drafter's chain (lower layers + centroid head, the drafted token fed back on
  the device), the upper layers for each position, then the batched head: a whole speculative
  cycle with one host round trip.
- ``plain(n)``: n plain positions, each one's device decision fed back as the next one's token:
  plain decoding with one host round trip per ``PLAIN_STEPS`` tokens instead of per token (the
  host's ~0.12 ms a token was 10% of a step on the H200). A position whose decision needed the
  host's refinement, and came out another token, ends the run there: later positions were
  computed from the device's token and are dropped, as rejected drafts are.

A program is keyed by its shape (kind, m or k, the bucket of its positions, and the drafter's
settings), captured on first use and replayed after; off CUDA it runs eagerly, which is how the
tests check everything but the capture. One host<->device exchange per cycle: positions and
tokens in (``inputs``), drafted tokens, target tokens and candidate counts out.

Identity (docs/ARCHITECTURE.md, greedy identity): a cycle never spans two buckets (``room``), so every position runs the same
kernels on the same shapes in plain and speculative decoding alike; targets are ``Heads.decide``'s
``D(h)`` (``decide_rows`` on the device, the rare near-tie refined on the host by ``Heads.decide``).
The prefill stays eager: it writes the request's own cache, copied once into the static one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from engine.reference._config import SPEC_TOKENS_RANGE
from engine.reference._decode import Decoder, SpecConfig, SpecStats, _prompt_lookup, _State
from engine.reference._heads import Heads
from engine.reference._model import Gemma3
from engine.reference._static import SMALLEST_BUCKET, StaticStep, decide_rows, draft_token, hidden_error_scale

__all__ = ["GraphDecoder", "GraphEngine"]

# Positions one program may compute: the pending token and the longest proposal the server's
# config accepts (the registry's limit for this stack), so that no cycle is ever cut short.
MAX_CYCLE = 1 + SPEC_TOKENS_RANGE[1]
PLAIN_STEPS = 8  # plain positions per program; shorter runs (a request's end, a bucket's end) go one by one
PRECAPTURED_KEYS = 2048  # a decoder captures its programs up to this bucket at once, longer ones on first use

_Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # packed ints, finals [m, hidden], logits [m, vocab]


class _Program:
    """A function of the engine's static tensors: captured once and replayed on CUDA, else called."""

    def __init__(self, fn: Callable[[], _Outputs], *, pool: torch.cuda._POOL_HANDLE | None) -> None:
        self.fn = fn
        self.pool = pool  # from torch.cuda.graph_pool_handle(), whose type torch names privately
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: _Outputs | None = None

    def __call__(self) -> _Outputs:
        if self.pool is None:
            return self.fn()
        if self.graph is None:
            # One eager run first, on a side stream as torch.cuda.graph asks: compiles, creates the
            # cuBLAS handles, and computes exactly what the replay below recomputes.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.fn()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                    self.outputs = self.fn()
            except RuntimeError as exc:  # not capturable here: run it uncaptured from now on, and say so
                print(
                    f"engine.reference: a decode program could not be captured, running it uncaptured: "
                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                    file=sys.stderr,
                    flush=True,
                )
                self.pool = None
                return self.fn()
            self.graph = graph
        self.graph.replay()
        return self.outputs  # type: ignore[return-value]


class GraphEngine:
    """The static KV cache, the fixed-shape step over it and the programs built on that step.

    ``graphs``: capture programs as CUDA graphs (default: on CUDA). ``compile``: the torch.compile
    backend of the step's per-layer pieces (default: "inductor" on CUDA, none elsewhere). If the
    first step fails that way, the engine says so on stderr and falls back (uncompiled, then uncaptured):
    slower, never different in what it decodes.
    """

    def __init__(
        self,
        model: Gemma3,
        heads: Heads,
        *,
        capacity: int | None = None,
        smallest_bucket: int = SMALLEST_BUCKET,
        graphs: bool | None = None,
        compile: str | None = "auto",
    ) -> None:
        cuda = model.device.type == "cuda"
        self.model = model
        self.heads = heads
        self.graphs = cuda if graphs is None else graphs
        self.compile = ("inductor" if cuda else None) if compile == "auto" else compile
        self.cache = model.new_cache(capacity or model.cfg.max_positions)
        # Masked keys are still multiplied (by 0): never-written slots must hold numbers, not NaN.
        self.cache.k.zero_()
        self.cache.v.zero_()
        self._smallest_bucket = smallest_bucket
        self.error_scale = hidden_error_scale(heads)
        self.inputs = torch.zeros(1 + MAX_CYCLE, dtype=torch.long, device=model.device)  # position, tokens
        self._pool: torch.cuda._POOL_HANDLE | None = None  # the programs' shared pool, on CUDA
        self._programs: dict[tuple, _Program] = {}
        self.step = self._warmed_step()

    def _warmed_step(self) -> StaticStep:
        """The step, compiled and captured if asked and if that works here: one plain step runs (at
        position 0) per attempt; a failure falls back to uncompiled, then to uncaptured, and says so."""
        attempts = [(self.compile, self.graphs)]
        if self.compile:
            attempts.append((None, self.graphs))
        if self.graphs:
            attempts.append((None, False))
        for i, (backend, graphs) in enumerate(attempts):
            self.compile, self.graphs = backend, graphs
            self._pool = torch.cuda.graph_pool_handle() if graphs else None
            self._programs.clear()
            self.step = StaticStep(self.model, self.cache, smallest_bucket=self._smallest_bucket, compile=backend)
            self._decide = self._decider(backend)
            try:
                self.verify([self.model.cfg.bos_id], 0)
                return self.step
            except Exception as exc:  # noqa: BLE001  a compiler or capture failure: fall back, and say so
                if i + 1 == len(attempts):
                    raise
                first = str(exc).splitlines()[0] if str(exc) else ""
                print(
                    f"engine.reference: the decode step failed with compile={backend or 'none'}, "
                    f"graphs={'yes' if graphs else 'no'} ({type(exc).__name__}: {first}); trying "
                    f"compile={attempts[i + 1][0] or 'none'}, graphs={'yes' if attempts[i + 1][1] else 'no'}",
                    file=sys.stderr,
                    flush=True,
                )
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ requests

    def room(self, position: int) -> int:
        """How many positions after ``position`` a cycle may add without leaving its bucket."""
        return self.step.bucket(position + 1) - position - 1

    def adopt(self, state: _State) -> None:
        """Continue a request in the static cache: copy what its eager prefill wrote, once."""
        if state.cache is self.cache:
            return
        n = state.position
        if n:
            self.cache.k[:, :, :n].copy_(state.cache.k[:, :, :n])
            self.cache.v[:, :, :n].copy_(state.cache.v[:, :, :n])
        state.cache = self.cache

    def verify(self, tokens: list[int], position: int) -> tuple[list[int], list[torch.Tensor]]:
        """Targets (``D(h)``) and final hidden states of ``tokens`` at positions position..."""
        m = len(tokens)
        keys = self.step.bucket(position + m)
        program = self._program(("verify", m, keys), lambda: self._verify_fn(m, keys))
        packed, finals, logits = self._run(program, position, tokens)
        return self._targets(packed[:m], packed[m:], finals, logits), self._rows(finals)

    def draft(
        self, pending: int, position: int, *, k: int, top_k: int, lower: range, upper: range
    ) -> tuple[list[int], list[int], list[torch.Tensor]]:
        """One speculative cycle: k drafted tokens, the k + 1 targets, their final hidden states."""
        keys = self.step.bucket(position + k + 1)
        key = ("draft", k, keys, top_k, lower.stop, upper.stop)
        program = self._program(key, lambda: self._draft_fn(k, keys, top_k=top_k, lower=lower, upper=upper))
        packed, finals, logits = self._run(program, position, [pending])
        m = k + 1
        return packed[:k], self._targets(packed[k : k + m], packed[k + m :], finals, logits), self._rows(finals)

    def plain(self, pending: int, position: int, *, n: int) -> tuple[list[int], list[torch.Tensor]]:
        """n plain greedy positions from ``pending``: the emitted tokens (n, or fewer where a
        refinement overruled the device) and their final hidden states."""
        keys = self.step.bucket(position + n)
        program = self._program(("plain", n, keys), lambda: self._plain_fn(n, keys))
        packed, finals, logits = self._run(program, position, [pending])
        device_tokens = packed[:n]
        targets = self._targets(device_tokens, packed[n:], finals, logits)
        emitted = next((i + 1 for i, (t, d) in enumerate(zip(targets, device_tokens)) if t != d), n)
        return targets[:emitted], self._rows(finals[:emitted])

    def precapture(self, *, spec: SpecConfig | None, top_k: int, lower: range, upper: range, keys: int) -> None:
        """Capture every program a decoder with these settings uses for positions below ``keys``,
        so that no capture lands inside a request (a no-op where programs are not captured)."""
        if not self.graphs:
            return
        bos, k = self.model.cfg.bos_id, spec.num_speculative_tokens if spec else 0
        for bucket in self.step.buckets:
            if bucket > keys:
                break
            first = self.step.buckets[self.step.buckets.index(bucket) - 1] if bucket != self.step.buckets[0] else 0
            self.verify([bos], first)
            if spec is None and self.room(first) + 1 >= PLAIN_STEPS:
                self.plain(bos, first, n=PLAIN_STEPS)
            for n in range(1, min(k, bucket - first - 1) + 1):  # shorter cycles end each request
                if spec is not None and spec.method == "draft":
                    self.draft(bos, first, k=n, top_k=top_k, lower=lower, upper=upper)
                elif spec is not None:
                    self.verify([bos] * (n + 1), first)

    # ------------------------------------------------------------------ programs

    def _program(self, key: tuple, build: Callable[[], Callable[[], _Outputs]]) -> _Program:
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = _Program(build(), pool=self._pool)
        return program

    def _run(self, program: _Program, position: int, tokens: list[int]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        if len(tokens) > MAX_CYCLE:
            raise ValueError(f"a cycle of {len(tokens)} positions is over the engine's {MAX_CYCLE}")
        with torch.inference_mode():
            self.inputs[: 1 + len(tokens)].copy_(torch.tensor([position, *tokens]))
            packed, finals, logits = program()
            if packed.is_cuda:
                # Waits with the GIL released (tolist would hold it): meanwhile the server's event
                # loop streams the previous program's tokens.
                torch.cuda.current_stream(packed.device).synchronize()
            return packed.tolist(), finals, logits

    def _targets(self, tokens: list[int], near: list[int], finals: torch.Tensor, logits: torch.Tensor) -> list[int]:
        """The device's decisions, with every row that had more than one candidate refined exactly."""
        with torch.inference_mode():
            return [
                t if n == 1 else self.heads.decide([finals[i : i + 1]], logits[i : i + 1])[0]
                for i, (t, n) in enumerate(zip(tokens, near))
            ]

    @staticmethod
    def _rows(finals: torch.Tensor) -> list[torch.Tensor]:
        # A copy: the program's outputs are overwritten by its next replay.
        kept = finals.clone()
        return [kept[i : i + 1] for i in range(kept.shape[0])]

    def _decider(
        self, backend: str | None
    ) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """decide_rows over this engine's heads, compiled with the step's backend: uncompiled it is
        about twenty small kernels a decision (a few reductions over 262,144 logits, the rest scalars)."""

        def decide(hidden: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return decide_rows(self.heads, hidden, logits, error_scale=self.error_scale)

        # Not dynamic=False: rows are 1 (plain) or k + 1 (a cycle), and one dynamic recompile covers every k.
        return torch.compile(decide, backend=backend, fullgraph=True) if backend else decide

    def _decided(self, finals: torch.Tensor, drafts: list[torch.Tensor]) -> _Outputs:
        logits = self.heads.logits(finals)
        tokens, near = self._decide(finals, logits)
        return torch.cat([*drafts, tokens, near]), finals, logits

    def _verify_fn(self, m: int, keys: int) -> Callable[[], _Outputs]:
        step, everything = self.step, self.model.all_layers()

        def run() -> _Outputs:
            start, tokens = self.inputs[:1], self.inputs[1 : 1 + m]
            finals = [
                step.final(step.run(step.embed(tokens[i : i + 1]), step.position(start + i, keys), layers=everything))
                for i in range(m)
            ]
            return self._decided(torch.cat(finals), [])

        return run

    def _plain_fn(self, n: int, keys: int) -> Callable[[], _Outputs]:
        step, heads, everything = self.step, self.heads, self.model.all_layers()

        def run() -> _Outputs:
            # Each position exactly as verify(1) computes it (one row through the head and the
            # decision), so the tokens are plain decoding's own.
            start, token = self.inputs[:1], self.inputs[1:2]
            tokens, nears, finals, logits = [], [], [], []
            for i in range(n):
                final = step.final(step.run(step.embed(token), step.position(start + i, keys), layers=everything))
                row = heads.logits(final)
                token, near = self._decide(final, row)
                tokens.append(token)
                nears.append(near)
                finals.append(final)
                logits.append(row)
            return torch.cat([*tokens, *nears]), torch.cat(finals), torch.cat(logits)

        return run

    def _draft_fn(self, k: int, keys: int, *, top_k: int, lower: range, upper: range) -> Callable[[], _Outputs]:
        step, heads = self.step, self.heads

        def run() -> _Outputs:
            start, token = self.inputs[:1], self.inputs[1:2]
            positions = [step.position(start + i, keys) for i in range(k + 1)]
            residuals, drafts = [], []
            for i, pos in enumerate(positions):
                x = step.run(step.embed(token), pos, layers=lower)
                residuals.append(x)
                if i < k:
                    token = draft_token(heads, step.final(x), top_k=top_k)
                    drafts.append(token)
            finals = [step.final(step.run(x, pos, layers=upper)) for x, pos in zip(residuals, positions)]
            return self._decided(torch.cat(finals), drafts)

        return run


class GraphDecoder(Decoder):
    """``Decoder`` whose cycles run as ``GraphEngine`` programs (the same methods and results)."""

    def __init__(
        self, model: Gemma3, heads: Heads, *, spec: SpecConfig | None, centroid_top_k: int, engine: GraphEngine
    ) -> None:
        super().__init__(model, heads, spec=spec, centroid_top_k=centroid_top_k)
        self.engine = engine
        engine.precapture(spec=spec, top_k=centroid_top_k, lower=self.lower, upper=self.upper, keys=PRECAPTURED_KEYS)

    def _cycle(self, state: _State, stats: SpecStats, *, budget: int) -> tuple[list[int], list[torch.Tensor]]:
        engine = self.engine
        engine.adopt(state)
        k = min(self.lookahead, budget - 1, engine.room(state.position))
        if self.spec is not None and k > 0:
            if self.spec.method == "draft":
                drafts, targets, finals = engine.draft(
                    state.pending, state.position, k=k, top_k=self.top_k, lower=self.lower, upper=self.upper
                )
                return self._accept(state, stats, drafts, targets, finals)
            proposal = _prompt_lookup(
                state.context, k=k, min_n=self.spec.prompt_lookup_min, max_n=self.spec.prompt_lookup_max
            )
            if proposal:
                targets, finals = engine.verify([state.pending, *proposal], state.position)
                return self._accept(state, stats, proposal, targets, finals)
        if self.spec is None and min(budget, engine.room(state.position) + 1) >= PLAIN_STEPS:
            targets, finals = engine.plain(state.pending, state.position, n=PLAIN_STEPS)
        else:
            targets, finals = engine.verify([state.pending], state.position)
        state.advance(targets)
        return targets, finals
