"""The bounds of a step-time histogram this project asks a stack for where it can (vLLM's
``--custom-histogram-buckets``; the reference stack's own): 0.5 ms to ~2 minutes, each bound 1.25 times the
last, so that a median is known to within 25% and a stall of any length is counted.

Standard library only: the reference stack's server imports it inside a submission folder, whose environment
holds the folder's dependencies alone (``engine.stacks`` re-exports it for everything else).
"""

from __future__ import annotations

__all__ = ["STEP_BUCKETS"]

STEP_BUCKETS = tuple(float(f"{0.0005 * 1.25**k:.6g}") for k in range(56))
