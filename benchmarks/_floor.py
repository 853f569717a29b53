"""The weight-read floor of a decode step: model bytes one step reads / a measured copy bandwidth.

A batch-1 decode step reads every weight matrix once (the body's projections and the full LM
head); at the device's copy bandwidth that takes ``floor_s``, and no implementation of the step
runs much faster. The bandwidth is measured with a large device-to-device
copy, counting bytes read plus bytes written. KV-cache reads are left out: at these lengths they
are under 2% of the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Floor", "copy_bandwidth", "step_weight_bytes", "weight_floor"]


@dataclass(frozen=True)
class Floor:
    step_bytes: int  # weights one plain decode step reads
    bandwidth: float  # bytes/s, device-to-device copy (read + write)

    @property
    def floor_s(self) -> float:
        return self.step_bytes / self.bandwidth

    def fraction(self, tokens_per_s: float) -> float:
        """Share of the floor reached by a plain decoder emitting ``tokens_per_s`` (1.0 = at the floor)."""
        return self.floor_s * tokens_per_s


def step_weight_bytes(model) -> int:
    """Bytes of every weight a plain step reads: each layer's matrices and norm scales, the final
    norm, the head. Counted per storage: a layer's q/k/v (gate/up) are views into one fused matrix."""
    tensors = [t for layer in model.layers for t in vars(layer).values() if isinstance(t, torch.Tensor)]
    tensors += [t for layer in model.layers for t in layer.scales.values()]
    tensors += [model.final_norm, model.head_rows]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def copy_bandwidth(device: torch.device, *, size_bytes: int = 1 << 30, repeats: int = 20) -> float:
    """Median bytes/s (read + write) of copying ``size_bytes`` between two device buffers."""
    n = size_bytes // 4
    src = torch.rand(n, device=device)  # random data, not zeros: zeros can read faster
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    if not torch.equal(dst, src):
        raise RuntimeError("the bandwidth probe's copy came out wrong")
    times.sort()
    return 2 * n * 4 / times[len(times) // 2]


def weight_floor(model) -> Floor:
    return Floor(step_bytes=step_weight_bytes(model), bandwidth=copy_bandwidth(model.device))
