"""A compact Gemma 3 (text) forward pass in torch with its own KV cache.

The arithmetic follows transformers' eager Gemma 3 op for op (RMSNorm in fp32 with (1 + w),
bf16 embedding scale, q/k norms, per-layer-type RoPE tables, fp32 softmax then cast back), so
prompt log-probabilities agree with transformers. Two entry points matter for greedy identity:

- ``prefill(ids)`` scores many positions at once (a prompt), masked like transformers' eager path;
- ``step(token, layers=...)`` advances ONE position through a range of layers. Plain decoding and
  every speculative path run each generated position through this same function with the same
  shapes, so a position's hidden state never depends on how many positions were decided at once.

Works on any torch device; nothing here is CPU-specific.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open

_PREFILL_CHUNK = 1024  # query rows per attention block: bounds the score matrix for long prompts


@dataclass(frozen=True)
class Gemma3Config:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    eps: float
    scaling: float  # query_pre_attn_scalar ** -0.5
    sliding_window: int
    layer_types: tuple[str, ...]  # "sliding_attention" | "full_attention"
    rope_theta: dict[str, float]
    max_positions: int
    bos_id: int
    eos_ids: tuple[int, ...]

    @classmethod
    def from_dir(cls, checkpoint_dir: Path) -> Gemma3Config:
        c = json.loads((checkpoint_dir / "config.json").read_text())
        gen_path = checkpoint_dir / "generation_config.json"
        eos = json.loads(gen_path.read_text()).get("eos_token_id") if gen_path.exists() else None
        eos = c["eos_token_id"] if eos is None else eos
        return cls(
            hidden=c["hidden_size"],
            intermediate=c["intermediate_size"],
            layers=c["num_hidden_layers"],
            heads=c["num_attention_heads"],
            kv_heads=c["num_key_value_heads"],
            head_dim=c["head_dim"],
            vocab=c["vocab_size"],
            eps=c["rms_norm_eps"],
            scaling=c["query_pre_attn_scalar"] ** -0.5,
            sliding_window=c["sliding_window"],
            layer_types=tuple(c["layer_types"]),
            rope_theta={k: v["rope_theta"] for k, v in c["rope_parameters"].items()},
            max_positions=c["max_position_embeddings"],
            bos_id=c["bos_token_id"],
            eos_ids=tuple(eos) if isinstance(eos, list) else (eos,),
        )


@dataclass
class Layer:
    input_norm: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    post_attn_norm: torch.Tensor
    pre_ff_norm: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    post_ff_norm: torch.Tensor
    sliding: bool
    # For `step`: q/k/v (and gate/up) are row views into one fused matrix each, so a decode step
    # makes 2 matmuls where 5 were; norm weights as (1 + w) in fp32, q and k norms stacked per head.
    qkv: torch.Tensor
    gate_up: torch.Tensor
    scales: dict[str, torch.Tensor]


class KVCache:
    """Keys and values of every layer at positions [0, capacity).

    The decoder tracks how many positions are valid; rejected speculative positions are simply
    overwritten by later writes, never read, since attention reads only up to the current position.
    """

    def __init__(self, cfg: Gemma3Config, *, capacity: int, device: torch.device, dtype: torch.dtype) -> None:
        # One tensor, keys then values: the fixed-shape step (_static.py) writes a position's key
        # and value of a layer with one kernel through ``kv[:, layer]``.
        self.kv = torch.empty((2, cfg.layers, cfg.kv_heads, capacity, cfg.head_dim), device=device, dtype=dtype)
        self.k, self.v = self.kv[0], self.kv[1]
        self.capacity = capacity


def _scale(weight: torch.Tensor) -> torch.Tensor:
    return 1.0 + weight.float()


def scaled_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm with its fp32 factor ``scale = 1 + w`` given (computed once per weight)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * scale).type_as(x)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Gemma3RMSNorm: normalise in fp32, times (1 + w), cast back."""
    return scaled_norm(x, _scale(weight), eps)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Gemma3:
    """Weights + forward. ``head_rows`` is the LM head (tied embedding) in cluster order."""

    def __init__(
        self,
        checkpoint_dir: Path,
        *,
        head_order: torch.Tensor,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.bfloat16,
        sliding_window: int | None = None,
    ) -> None:
        self.cfg = Gemma3Config.from_dir(checkpoint_dir)
        self.device = torch.device(device)
        self.dtype = dtype
        self.window = sliding_window or self.cfg.sliding_window
        w = self._load(checkpoint_dir / "model.safetensors")
        embed = w["model.embed_tokens.weight"]
        # The head rows are stored once, permuted so that each cluster is a contiguous block; the
        # embedding lookup goes through the inverse permutation. One layout for the full head and
        # the drafter's candidate subsets (see _heads.py).
        self.head_order = head_order.to(self.device)
        self.head_rows = embed[head_order].to(self.device).contiguous()
        self.head_pos = torch.empty_like(self.head_order)
        self.head_pos[self.head_order] = torch.arange(len(head_order), device=self.device)
        del embed
        # transformers keeps the scale as a bf16 tensor: sqrt(640) becomes 25.25, not 25.298.
        self.embed_scale = torch.tensor(self.cfg.hidden**0.5, dtype=dtype, device=self.device)
        self.final_norm = w["model.norm.weight"]
        self.layers = [self._layer(w, i) for i in range(self.cfg.layers)]
        self._rope: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._rope_len = 0

    def _load(self, path: Path) -> dict[str, torch.Tensor]:
        with safe_open(path, "pt") as f:
            return {k: f.get_tensor(k).to(device=self.device, dtype=self.dtype) for k in f.keys()}

    def _layer(self, w: dict[str, torch.Tensor], i: int) -> Layer:
        p = f"model.layers.{i}."
        cfg = self.cfg
        qkv = torch.cat([w[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]).contiguous()
        q, k, v = qkv.split([cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim])
        gate_up = torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]]).contiguous()
        gate, up = gate_up.split(cfg.intermediate)
        norms = {
            "input": w[p + "input_layernorm.weight"],
            "post_attn": w[p + "post_attention_layernorm.weight"],
            "pre_ff": w[p + "pre_feedforward_layernorm.weight"],
            "post_ff": w[p + "post_feedforward_layernorm.weight"],
        }
        q_norm, k_norm = w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"]
        scales = {name: _scale(weight) for name, weight in norms.items()}
        scales["qk"] = torch.cat(
            [_scale(q_norm).expand(cfg.heads, -1), _scale(k_norm).expand(cfg.kv_heads, -1)]
        ).contiguous()
        return Layer(
            input_norm=norms["input"],
            q=q,
            k=k,
            v=v,
            o=w[p + "self_attn.o_proj.weight"],
            q_norm=q_norm,
            k_norm=k_norm,
            post_attn_norm=norms["post_attn"],
            pre_ff_norm=norms["pre_ff"],
            gate=gate,
            up=up,
            down=w[p + "mlp.down_proj.weight"],
            post_ff_norm=norms["post_ff"],
            sliding=cfg.layer_types[i] == "sliding_attention",
            qkv=qkv,
            gate_up=gate_up,
            scales=scales,
        )

    # ------------------------------------------------------------------ pieces

    def new_cache(self, capacity: int) -> KVCache:
        self._ensure_rope(capacity)
        return KVCache(self.cfg, capacity=capacity, device=self.device, dtype=self.dtype)

    def _ensure_rope(self, length: int) -> None:
        """cos/sin tables per layer type, computed exactly as transformers does per position."""
        if length <= self._rope_len:
            return
        pos = torch.arange(length, device=self.device, dtype=torch.float)
        dim = self.cfg.head_dim
        for kind, theta in self.cfg.rope_theta.items():
            inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float, device=self.device) / dim))
            freqs = pos[:, None] * inv_freq
            emb = torch.cat((freqs, freqs), dim=-1)
            self._rope[kind] = (emb.cos().to(self.dtype), emb.sin().to(self.dtype))
        self._rope_len = length

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head_rows[self.head_pos[ids]] * self.embed_scale

    def final(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.final_norm, self.cfg.eps)

    def _qkv(self, layer: Layer, x: torch.Tensor, positions: slice) -> tuple[torch.Tensor, ...]:
        """x [n, hidden] -> q [heads, n, d], k/v [kv_heads, n, d], normed and rotated."""
        n, d = x.shape[0], self.cfg.head_dim
        q = F.linear(x, layer.q).view(n, -1, d).transpose(0, 1)
        k = F.linear(x, layer.k).view(n, -1, d).transpose(0, 1)
        v = F.linear(x, layer.v).view(n, -1, d).transpose(0, 1)
        q = rms_norm(q, layer.q_norm, self.cfg.eps)
        k = rms_norm(k, layer.k_norm, self.cfg.eps)
        cos, sin = self._rope["sliding_attention" if layer.sliding else "full_attention"]
        cos, sin = cos[positions], sin[positions]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        return q, k, v

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Eager attention as transformers computes it; returns [n, heads * d]."""
        groups = self.cfg.heads // self.cfg.kv_heads
        k = k.repeat_interleave(groups, dim=0) if groups > 1 else k
        v = v.repeat_interleave(groups, dim=0) if groups > 1 else v
        scores = torch.matmul(q, k.transpose(1, 2)) * self.cfg.scaling
        if mask is not None:
            scores = scores + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v)  # [heads, n, d]
        return out.transpose(0, 1).reshape(q.shape[1], -1)

    def _mlp_block(self, layer: Layer, x: torch.Tensor) -> torch.Tensor:
        h = rms_norm(x, layer.pre_ff_norm, self.cfg.eps)
        h = F.linear(F.gelu(F.linear(h, layer.gate), approximate="tanh") * F.linear(h, layer.up), layer.down)
        return x + rms_norm(h, layer.post_ff_norm, self.cfg.eps)

    # ------------------------------------------------------------------ forward

    def prefill(self, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run positions [0, n) at once into an empty cache; returns the final-normed hidden [n, hidden]."""
        n = ids.shape[0]
        self._ensure_rope(n)
        x = self.embed(ids)
        for li, layer in enumerate(self.layers):
            h = rms_norm(x, layer.input_norm, self.cfg.eps)
            q, k, v = self._qkv(layer, h, slice(0, n))
            cache.k[li, :, :n] = k
            cache.v[li, :, :n] = v
            parts = []
            for c0 in range(0, n, _PREFILL_CHUNK):
                c1 = min(n, c0 + _PREFILL_CHUNK)
                mask = self._mask(c0, c1, sliding=layer.sliding)
                parts.append(self._attend(q[:, c0:c1], k[:, :c1], v[:, :c1], mask))
            a = F.linear(torch.cat(parts) if len(parts) > 1 else parts[0], layer.o)
            x = x + rms_norm(a, layer.post_attn_norm, self.cfg.eps)
            x = self._mlp_block(layer, x)
        return self.final(x)

    def _mask(self, c0: int, c1: int, *, sliding: bool) -> torch.Tensor:
        """Additive mask of query rows [c0, c1) over keys [0, c1), as transformers' eager path."""
        q = torch.arange(c0, c1, device=self.device)[:, None]
        k = torch.arange(c1, device=self.device)[None, :]
        allowed = (k <= q) & (k > q - self.window) if sliding else k <= q
        zeros = torch.zeros(c1 - c0, c1, dtype=self.dtype, device=self.device)
        return zeros.masked_fill(~allowed, torch.finfo(self.dtype).min)

    def step(self, x: torch.Tensor, cache: KVCache, *, layers: range, position: int) -> torch.Tensor:
        """Advance ONE position (residual stream x [1, hidden]) through ``layers``; returns the residual.

        Writes that position's keys/values for those layers. The caller embeds the token first and
        applies ``final`` last; splitting the layer range lets a drafter run the lower layers and
        the verifier the upper ones for the same position, with identical arithmetic.
        """
        if position >= cache.capacity:
            raise ValueError(f"position {position} is beyond the KV cache ({cache.capacity})")
        cfg, eps = self.cfg, self.cfg.eps
        d, heads, kv = cfg.head_dim, cfg.heads, cfg.kv_heads
        for li in layers:
            layer = self.layers[li]
            scales = layer.scales
            qkv = F.linear(scaled_norm(x, scales["input"], eps), layer.qkv).view(-1, d)  # q heads, k heads, v heads
            qk = scaled_norm(qkv[: heads + kv], scales["qk"], eps)
            cos, sin = self._rope["sliding_attention" if layer.sliding else "full_attention"]
            qk = qk * cos[position] + _rotate_half(qk) * sin[position]
            cache.k[li, :, position] = qk[heads:]
            cache.v[li, :, position] = qkv[heads + kv :]
            start = max(0, position + 1 - self.window) if layer.sliding else 0
            keys = cache.k[li, :, start : position + 1]  # [kv, n, d]
            values = cache.v[li, :, start : position + 1]
            # Query heads grouped under their kv head: [kv, heads/kv, d] @ [kv, d, n], no key copies.
            scores = torch.matmul(qk[:heads].view(kv, heads // kv, d), keys.transpose(1, 2)) * cfg.scaling
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
            a = F.linear(torch.matmul(probs, values).view(1, heads * d), layer.o)
            x = x + scaled_norm(a, scales["post_attn"], eps)
            gate, up = F.linear(scaled_norm(x, scales["pre_ff"], eps), layer.gate_up).split(cfg.intermediate, dim=-1)
            x = x + scaled_norm(F.linear(F.gelu(gate, approximate="tanh") * up, layer.down), scales["post_ff"], eps)
        return x

    def with_window(self, window: int) -> Gemma3:
        """The same weights with another sliding window (a shallow copy: no weight is duplicated)."""
        other = copy.copy(self)
        other.window = window
        return other

    def all_layers(self) -> range:
        return range(self.cfg.layers)
