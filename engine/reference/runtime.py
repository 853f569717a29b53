"""Load the prepared model into a decoder: the one place that wires model, heads and decoding."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from engine.reference._decode import Decoder, Generation, SpecConfig, SpecStats
from engine.reference._heads import Heads
from engine.reference._model import Gemma3
from engine.reference.prepare import PreparedModel, prepare_model

__all__ = ["Runtime", "load_runtime", "Decoder", "Generation", "SpecConfig", "SpecStats", "resolve_device"]


@dataclass
class Runtime:
    model: Gemma3
    heads: Heads
    checkpoint_dir: Path
    graph_engine: Any = field(default=None, repr=False)  # _graphs.GraphEngine, made on first use on CUDA

    def decoder(self, *, spec: SpecConfig | None = None, centroid_top_k: int = 32) -> Decoder:
        if self.model.device.type == "cuda":
            return self._graph_decoder(spec=spec, centroid_top_k=centroid_top_k)
        return Decoder(self.model, self.heads, spec=spec, centroid_top_k=centroid_top_k)

    def _graph_decoder(self, *, spec: SpecConfig | None, centroid_top_k: int) -> Decoder:
        """On CUDA: the same decoding from captured graphs over one static cache (see _graphs.py)."""
        from engine.reference._graphs import GraphDecoder, GraphEngine

        if self.graph_engine is None:  # one static cache and one set of graphs for every decoder
            self.graph_engine = GraphEngine(self.model, self.heads)
        return GraphDecoder(self.model, self.heads, spec=spec, centroid_top_k=centroid_top_k, engine=self.graph_engine)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(len(os.sched_getaffinity(0)))
    if device.type == "cuda":
        # The exactness argument of _heads.py assumes fp32 accumulation of bf16 products.
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return device


def load_runtime(
    prepared: PreparedModel | None = None,
    *,
    device: str = "cpu",
    sliding_window: int | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> Runtime:
    """The stack serves bf16 (``dtype``); float32 is for checking the model's arithmetic apart from bf16's rounding."""
    prepared = prepared or prepare_model()
    table = load_file(prepared.centroids_path)
    ids = table["cluster_token_ids"]
    model = Gemma3(
        prepared.checkpoint_dir,
        head_order=ids.flatten(),
        device=resolve_device(device),
        sliding_window=sliding_window,
        dtype=dtype,
    )
    heads = Heads(model, centroids=table["centroids"], cluster_size=ids.shape[1])
    return Runtime(model=model, heads=heads, checkpoint_dir=prepared.checkpoint_dir)
