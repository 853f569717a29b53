"""What a staged measurement and its checkpoint exchange (multi-fidelity, ``sweep.search``).

``engine.bench.measure`` times the first run of a trial in stages; after each stage but the last
it hands the checkpoint a ``Partial`` (what was measured so far) and ends the measurement there
when the checkpoint answers with a ``Stop``. Plain data, without the HTTP client, so that the
driver can plan stages without importing the benchmark stack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Checkpoint", "Partial", "Stages", "Stop"]


@dataclass(frozen=True)
class Partial:
    """What a staged first run has measured when a checkpoint sees it."""

    prompts_timed: int
    prompts_planned: int
    tps: float  # tokens over the timed prompts' own windows
    latencies_s: tuple[float, ...]
    tokens: tuple[int, ...]
    ppl: float | None  # known once the PPL pass ran

    @classmethod
    def so_far(
        cls, *, tps: float, latencies_s: Sequence[float], tokens: Sequence[int], planned: int, ppl: float | None
    ) -> Partial:
        return cls(
            prompts_timed=len(latencies_s),
            prompts_planned=planned,
            tps=tps,
            latencies_s=tuple(latencies_s),
            tokens=tuple(tokens),
            ppl=ppl,
        )


@dataclass(frozen=True)
class Stop:
    """A checkpoint's ruling that the measurement ends here: a short kind and the reason, in words."""

    kind: str
    reason: str


Checkpoint = Callable[[Partial], "Stop | None"]  # None: measure on


@dataclass(frozen=True)
class Stages:
    after: tuple[int, ...]  # prompts of the first run after which a checkpoint decides
    ppl_first: bool  # run the PPL pass right after the first stage, so that the gate can decide early
    checkpoint: Checkpoint

    def bounds(self, planned: int) -> list[int]:
        """Where a run of ``planned`` prompts stops to ask (the stages inside it, in order), then its end:
        the one rule for a live measurement (``engine.bench``) and a replayed one (``benchmarks._replay``)."""
        return [*sorted({b for b in self.after if 0 < b < planned}), planned]
