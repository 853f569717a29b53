"""One serving load level, typed: the workload it ran, what it measured, each request's timings, and its one
stored shape.

``LoadLevel`` is what a load run gives (``engine.bench.measure_load``) and what every reader takes: a trial's
``Measurement.load``, ``sweep.transfer``'s ``transfer.json``, the SLO's judgement, the console, the exports and
the chart read its fields, never a dict's keys. ``to_dict`` is the one stored shape (the requests under
``requests``, one object each) and ``from_dict`` reads it back, and the two shapes stored before it: a trial's
``timings`` (each request as [TTFT, TPOT, latency] in seconds) and a transfer's ``requests_timed``.

Plain dataclasses of JSON-friendly fields, as ``engine.measurement``'s: a worker returns them, the driver stores
them, nothing here computes a figure (``engine.bench`` does, as bench_serving does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from errors import DataError

__all__ = ["LoadLevel", "LoadRequest", "Percentiles"]


@dataclass(frozen=True, kw_only=True)
class Percentiles:
    """One figure over a run in milliseconds: its mean and p50/p90/p99, as bench_serving reports them."""

    mean: float
    p50: float
    p90: float
    p99: float

    def at(self, percentile: int) -> float:
        """The ``percentile`` (50, 90 or 99); raises ValueError for another."""
        values = {50: self.p50, 90: self.p90, 99: self.p99}
        if percentile not in values:
            raise ValueError(f"a load level keeps p50, p90 and p99, not p{percentile}")
        return values[percentile]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Percentiles:
        return cls(mean=float(data["mean"]), p50=float(data["p50"]), p90=float(data["p90"]), p99=float(data["p99"]))


@dataclass(frozen=True, kw_only=True)
class LoadRequest:
    """One request of a level, in seconds; what a record stored before these were kept lacks is None or empty."""

    ttft_s: float
    tpot_s: float  # (latency - TTFT) / (tokens - 1), bench_serving's TPOT; 0 for a single token
    latency_s: float
    output_tokens: int | None = None
    start_s: float | None = None  # after the level's first request was sent
    itl_s: tuple[float, ...] = ()  # the gaps between its content chunks

    def to_dict(self) -> dict[str, Any]:
        return {
            "start_s": self.start_s,
            "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s,
            "latency_s": self.latency_s,
            "output_tokens": self.output_tokens,
            "itl_s": list(self.itl_s),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadRequest:
        """The stored shape, or a transfer's older ``requests_timed`` entry (no ``tpot_s``: derived as the run did)."""
        ttft, latency, tokens = float(data["ttft_s"]), float(data["latency_s"]), data.get("output_tokens")
        tpot = data.get("tpot_s")
        if tpot is None:
            tpot = (latency - ttft) / (tokens - 1) if isinstance(tokens, int) and tokens > 1 else 0.0
        return cls(
            ttft_s=ttft,
            tpot_s=float(tpot),
            latency_s=latency,
            output_tokens=tokens,
            start_s=data.get("start_s"),
            itl_s=tuple(float(g) for g in data.get("itl_s") or ()),
        )


@dataclass(frozen=True, kw_only=True)
class LoadLevel:
    """One load run: its workload (name, concurrency, arrival rate, prompts, lengths), its figures over the run's
    wall time (the first request sent to the last one done) and its requests in the order they were sent."""

    workload: str
    concurrency: int
    request_rate: float | None  # requests a second, Poisson arrivals; None: all at once
    prompts: str  # "public" or "long" (engine.bench.long_prompts)
    prompt_chars: float | None  # the prompts' mean length in characters; None in a record stored before it
    output_len: int | None  # tokens asked of each request; None in a record stored before it
    output_tokens: int
    wall_s: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    requests: tuple[LoadRequest, ...]

    @property
    def output_tps(self) -> float:
        return self.output_tokens / self.wall_s

    @property
    def requests_per_s(self) -> float:
        return len(self.requests) / self.wall_s

    def latency(self, figure: str) -> Percentiles:
        """A latency figure by the name an SLO bounds it by (``ttft_ms``, ``tpot_ms``, ``itl_ms``, ``e2e_ms``)."""
        named = {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "itl_ms": self.itl_ms, "e2e_ms": self.e2e_ms}
        if figure not in named:
            raise ValueError(f"a load level has no latency figure {figure!r}; it has {sorted(named)}")
        return named[figure]

    def to_dict(self) -> dict[str, Any]:
        """The one stored shape; the rates beside the counts they come from, for a reader of the JSON."""
        return {
            "workload": self.workload,
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "prompts": self.prompts,
            "prompt_chars": self.prompt_chars,
            "output_len": self.output_len,
            "output_tokens": self.output_tokens,
            "wall_s": self.wall_s,
            "output_tps": self.output_tps,
            "requests_per_s": self.requests_per_s,
            **{name: vars(self.latency(name)) for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")},
            "requests": [r.to_dict() for r in self.requests],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadLevel:
        """A stored level, in its shape or an older one (see the module's docstring); raises DataError naming what
        a stored level lacks."""
        if not isinstance(data, Mapping):
            raise DataError(f"a stored load level is a JSON object, got {type(data).__name__}")
        try:
            return cls(
                workload=str(data["workload"]),
                concurrency=int(data["concurrency"]),
                request_rate=None if data.get("request_rate") is None else float(data["request_rate"]),
                prompts=str(data.get("prompts", "public")),
                prompt_chars=data.get("prompt_chars"),
                output_len=data.get("output_len"),
                output_tokens=int(data["output_tokens"]),
                wall_s=float(data["wall_s"]),
                ttft_ms=Percentiles.from_dict(data["ttft_ms"]),
                tpot_ms=Percentiles.from_dict(data["tpot_ms"]),
                itl_ms=Percentiles.from_dict(data["itl_ms"]),
                e2e_ms=Percentiles.from_dict(data["e2e_ms"]),
                requests=_requests(data),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(
                f"load level {data.get('workload')!r}: not a stored load level ({type(exc).__name__}: {exc})"
            ) from None


def _requests(data: Mapping[str, Any]) -> tuple[LoadRequest, ...]:
    """The level's requests from whichever shape stored them (before this one, ``requests`` was their count)."""
    if isinstance(data.get("requests"), list):
        return tuple(LoadRequest.from_dict(r) for r in data["requests"])
    if "requests_timed" in data:
        return tuple(LoadRequest.from_dict(r) for r in data["requests_timed"])
    return tuple(LoadRequest(ttft_s=float(t), tpot_s=float(p), latency_s=float(e)) for t, p, e in data["timings"])
