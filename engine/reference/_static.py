"""The decode step in fixed shapes: one position on a fixed-capacity KV cache, no host syncs.

``Gemma3.step`` slices the cache to exactly the keys a position may see, so its shapes change at
every position and Python launches every one of its kernels. This module computes the same
function with shapes that a CUDA graph can capture once and replay (``_graphs.py``):

- the position is a device tensor (``Position.index``); RoPE rows and masks are gathered from it;
- full-attention layers read keys ``[0, L)`` of the cache, masked past the position, where ``L``
  is the position's *bucket*: the smallest of 256, 512, ... (doubling), capacity that holds it;
- sliding layers read only their window: a window-sized gather of keys ``p - W + 1 .. p``
  (masked below 0), or the full layers' ``[0, L)`` when the window covers the whole bucket;
- as in ``Gemma3.step``: q/k/v and gate/up are one matmul each, RMSNorm scales ``(1 + w)`` are fp32;
- a position's key and value go into the cache, and a window's come out, with one kernel each
  (through ``KVCache.kv``), and attention (mask, softmax, cast), the position's tensors and the
  embedding are compile units of their own: on CUDA a step is a few hundred short kernels, so
  each one fewer saves ~2 us a position (benchmarks/results/gpu/README.md).

Identity: a position's shapes depend on its bucket only, never on how many positions are computed
in one call, so plain and speculative decoding on this path give bit-identical hidden states for
every position (the callers keep each cycle inside one bucket). The arithmetic matches
``Gemma3.step`` up to summation order (masked keys), i.e. to bf16 rounding.

Also here: the greedy decision of ``Heads.decide`` as device tensors (``decide_rows``: the token
when unambiguous, plus the number of candidates so the caller refines the rare near-ties on the
host with ``Heads.decide`` itself), and the centroid drafter's pick (``draft_token``).
Everything runs on any device; nothing here is CUDA-specific.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.reference._heads import Heads, fp32_sum_error, ulp_bf16
from engine.reference._model import Gemma3, KVCache, _rotate_half, scaled_norm

__all__ = ["Position", "StaticStep", "buckets", "decide_rows", "draft_token"]

SMALLEST_BUCKET = 256


def buckets(capacity: int, *, smallest: int = SMALLEST_BUCKET) -> list[int]:
    """Key lengths the full-attention layers read: smallest, 2x, 4x, ... then capacity itself."""
    out, size = [], smallest
    while size < capacity:
        out.append(size)
        size *= 2
    return [*out, capacity]


@dataclass(frozen=True)
class Position:
    """What every layer of one position's step shares (all device tensors, fixed shapes)."""

    index: torch.Tensor  # int64 [1]
    rope: dict[str, tuple[torch.Tensor, torch.Tensor]]  # layer type -> cos, sin [1, d]
    keys: int  # the bucket L
    full_mask: torch.Tensor  # additive [L]: 0 for keys <= position, min elsewhere
    window_index: torch.Tensor | None  # int64 [W]: positions p-W+1..p clamped at 0; None: read [0, L)
    window_mask: torch.Tensor | None  # additive [W]


def _attend(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scaling: float
) -> torch.Tensor:
    """q [heads, d] over keys/values [kv_heads, L, d] with an additive mask [L] -> [1, heads * d].

    Query head h reads kv head h // (heads / kv_heads), as repeat_interleave in _model.py.
    """
    kv, length, d = keys.shape
    q = q.view(kv, -1, d)
    scores = torch.baddbmm(mask.expand(kv, q.shape[1], length), q, keys.transpose(1, 2), alpha=scaling)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.bmm(probs, values).view(1, -1)


class StaticStep:
    """The fixed-shape step of one model over one KV cache (from ``model.new_cache``, so that the
    RoPE tables cover it, and zeroed: masked slots are read too, and must not hold NaN). ``compile`` names a torch.compile backend ("inductor" fuses each layer's
    norms, RoPE and activations into a few kernels) for the per-layer pieces; None runs them eagerly."""

    def __init__(
        self, model: Gemma3, cache: KVCache, *, smallest_bucket: int = SMALLEST_BUCKET, compile: str | None = None
    ) -> None:
        cfg = model.cfg
        self.model = model
        self.cfg = cfg
        self.cache = cache
        self.capacity = capacity = cache.capacity
        self.window = model.window
        self.buckets = buckets(capacity, smallest=smallest_bucket)
        # Gemma3's own tables (sized by new_cache); held here so that captured graphs keep reading
        # live tensors even if the model later grows its tables for a longer cache.
        self._rope = dict(model._rope)  # noqa: SLF001
        self._arange = torch.arange(capacity, device=model.device)
        self._zero = torch.zeros((), dtype=model.dtype, device=model.device)
        self._min = torch.full((), torch.finfo(model.dtype).min, dtype=model.dtype, device=model.device)
        self.layers = model.layers  # with their fused qkv / gate_up and fp32 (1 + w) norm scales
        self.final_scale = (1.0 + model.final_norm.float()).contiguous()
        self._pre, self._attend, self._post, self._final = self._pieces()
        self._position, self._embed = self._position_tensors, model.embed
        if compile:
            # Attention compiles once per key length (every bucket a request reaches, and the
            # window): a long request passes dynamo's default of 8, and past its limit a fullgraph
            # unit raises in the middle of a request instead of compiling.
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            self._pre, self._attend, self._post, self._final, self._position, self._embed = (
                torch.compile(fn, backend=compile, dynamic=False, fullgraph=True)
                for fn in (self._pre, self._attend, self._post, self._final, self._position, self._embed)
            )

    def _pieces(self) -> tuple[Callable, Callable, Callable, Callable]:
        """The per-layer functions before, of and after attention, and the final norm (compile units)."""
        eps, heads, kv, d, scaling = (
            self.cfg.eps,
            self.cfg.heads,
            self.cfg.kv_heads,
            self.cfg.head_dim,
            self.cfg.scaling,
        )

        def pre(x, input_scale, qkv_w, qk_scale, cos, sin):
            """-> q [heads, d] and the position's key and value as [2, kv_heads, 1, d] (a cache write)."""
            qkv = F.linear(scaled_norm(x, input_scale, eps), qkv_w).view(heads + 2 * kv, d)
            qk = scaled_norm(qkv[: heads + kv], qk_scale, eps)
            qk = qk * cos + _rotate_half(qk) * sin
            return qk[:heads], torch.stack([qk[heads:], qkv[heads + kv :]]).unsqueeze(2)

        def post(x, attn, o, post_attn_scale, pre_ff_scale, gate_up, down, post_ff_scale):
            x = x + scaled_norm(F.linear(attn, o), post_attn_scale, eps)
            gate, up = F.linear(scaled_norm(x, pre_ff_scale, eps), gate_up).chunk(2, dim=-1)
            h = F.linear(F.gelu(gate, approximate="tanh") * up, down)
            return x + scaled_norm(h, post_ff_scale, eps)

        def attend(q, keys, values, mask):
            return _attend(q, keys, values, mask, scaling)

        def final(x, scale):
            return scaled_norm(x, scale, eps)

        return pre, attend, post, final

    # ------------------------------------------------------------------ positions

    def bucket(self, length: int) -> int:
        """The key length read by a position whose keys are [0, length)."""
        if length > self.capacity:
            raise ValueError(f"position {length - 1} is beyond the KV cache ({self.capacity})")
        return next(b for b in self.buckets if b >= length)

    def position(self, index: torch.Tensor, keys: int) -> Position:
        """Per-position tensors for the device position ``index`` (int64 [1]) in bucket ``keys``."""
        return Position(index, keys=keys, **self._position(index, keys))

    def _position_tensors(self, index: torch.Tensor, keys: int) -> dict:
        """A compile unit: about ten small kernels uncompiled (RoPE gathers, masks, the window's index)."""
        rope = {
            kind: (cos.index_select(0, index), sin.index_select(0, index)) for kind, (cos, sin) in self._rope.items()
        }
        span = self._arange[:keys]
        full_mask = torch.where(span <= index, self._zero, self._min)
        window_index = window_mask = None
        if self.window < keys:
            wanted = index - (self.window - 1) + self._arange[: self.window]
            window_mask = torch.where(wanted >= 0, self._zero, self._min)
            window_index = wanted.clamp(min=0)
        return {"rope": rope, "full_mask": full_mask, "window_index": window_index, "window_mask": window_mask}

    # ------------------------------------------------------------------ the step

    def embed(self, token: torch.Tensor) -> torch.Tensor:
        """token int64 [1] -> residual [1, hidden]."""
        return self._embed(token)

    def final(self, x: torch.Tensor) -> torch.Tensor:
        return self._final(x, self.final_scale)

    def run(self, x: torch.Tensor, pos: Position, *, layers: range) -> torch.Tensor:
        """``Gemma3.step`` in fixed shapes: residual x [1, hidden] through ``layers`` at ``pos``."""
        cache = self.cache
        for li in layers:
            w = self.layers[li]
            cos, sin = pos.rope["sliding_attention" if w.sliding else "full_attention"]
            q, kv = self._pre(x, w.scales["input"], w.qkv, w.scales["qk"], cos, sin)
            cache.kv[:, li].index_copy_(2, pos.index, kv)
            if w.sliding and pos.window_index is not None:
                keys, values = cache.kv[:, li].index_select(2, pos.window_index)
                mask = pos.window_mask
            else:
                keys, values, mask = cache.k[li, :, : pos.keys], cache.v[li, :, : pos.keys], pos.full_mask
            attn = self._attend(q, keys, values, mask)
            scales = w.scales
            x = self._post(x, attn, w.o, scales["post_attn"], scales["pre_ff"], w.gate_up, w.down, scales["post_ff"])
        return x


def hidden_error_scale(heads: Heads) -> float:
    """Heads.decide's bound on a logit's fp32 summation error, per unit of |h| (see _heads.py)."""
    return fp32_sum_error(heads.hidden) * float(heads.rows.float().norm(dim=1).max())


def decide_rows(
    heads: Heads, hidden: torch.Tensor, logits: torch.Tensor, *, error_scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``Heads.decide`` on device for rows of hidden [m, hidden] / logits [m, vocab] (row order).

    Returns the argmax token of each row and how many rows lie within the decision margin of
    the top: where that count is 1 the token is ``D(h)``; elsewhere the caller refines the row
    with ``Heads.decide`` (the same thresholds, computed here in fp32 rather than on the host).
    """
    top = logits.max(dim=-1).values.float()
    eps = error_scale * hidden.float().norm(dim=-1)
    spacing = ulp_bf16(top.abs() * 1.05 + 4 * eps + 1e-6)
    near = (logits >= (top - spacing - 4 * eps).unsqueeze(1)).sum(dim=-1)
    return heads.token_of_row.index_select(0, logits.argmax(dim=-1)), near


def draft_token(heads: Heads, h: torch.Tensor, *, top_k: int) -> torch.Tensor:
    """The centroid drafter's pick for h [1, hidden] as an int64 [1] device tensor.

    The candidate set of ``Heads.draft`` (top-K clusters by h . centroid, exact logits for their
    rows); its plain argmax, without the host-side refinement of near-ties: a draft only moves
    acceptance, the verifier decides every emitted token.
    """
    if top_k >= heads.num_clusters:  # every cluster in order: the full head's rows, without a 335 MB copy
        return heads.token_of_row.index_select(0, F.linear(h, heads.rows).argmax(dim=-1))
    clusters = F.linear(h, heads.centroids)[0].topk(top_k).indices.sort().values
    rows = heads.rows.view(heads.num_clusters, heads.cluster_size, heads.hidden).index_select(0, clusters)
    # index_select with 1-element tensors throughout: indexing by a 0-dim tensor would read it on the host
    best = F.linear(h, rows.view(-1, heads.hidden)).argmax(dim=-1)
    row = clusters.index_select(0, best // heads.cluster_size) * heads.cluster_size + best % heads.cluster_size
    return heads.token_of_row.index_select(0, row)
