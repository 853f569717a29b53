"""What one trial produces: the values that cross from a worker back to the driver.

Plain dataclasses of JSON-friendly fields, so that a Ray worker can return them and the
driver can store them without importing anything engine-specific.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal


@dataclass
class Measurement:
    """TPS and PPL measured as the challenge measures them, plus what we add."""

    tps: float  # sum(completion_tokens) / wall time of the timed run (output_throughput); median run of tps_runs
    ppl: float  # exp(total target NLL / target tokens), token-weighted: the gated number
    ppl_mean_record: float  # mean of per-record PPLs; reported, never gated
    completion_tokens: int  # of the median run, like tps_wall_s
    tps_wall_s: float
    ppl_target_tokens: int
    num_prompts: int
    num_ppl_records: int
    latency_s: dict[str, float] = field(default_factory=dict)  # p50/p90/p99/mean per request
    stream: dict[str, float] = field(default_factory=dict)  # ttft_*/itl_* when a stream pass ran
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    acceptance_rate: float | None = None  # accepted / drafted over the TPS run
    output_token_ids: list[list[int]] = field(default_factory=list)  # per prompt, for identity
    # sha256 of each prompt's generated text: identity evidence even from a stack that returns no ids
    output_text_sha256: list[str] = field(default_factory=list)
    tps_runs: list[float] = field(default_factory=list)  # every timed run's TPS, in order (profile tps_repeats)
    tps_cv: float | None = None  # sample stdev / mean of tps_runs; None for a single run

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Measurement":
        return cls(**data)


TrialStatus = Literal["complete", "failed"]


@dataclass
class TrialOutcome:
    """One trial's result as a worker returns it: success or failure, never an exception."""

    status: TrialStatus
    knobs: dict[str, Any]
    argv: list[str]
    env: dict[str, str]  # the manifest's env after knobs, secrets redacted
    measurement: Measurement | None = None
    reason: str | None = None  # why it failed, one line
    log_tail: str = ""
    timings_s: dict[str, float] = field(default_factory=dict)  # boot, warmup, ppl, tps, stop, total
    node: dict[str, Any] = field(default_factory=dict)  # node_id, hostname, accelerator, gpu ids

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrialOutcome":
        data = dict(data)
        if data.get("measurement") is not None:
            data["measurement"] = Measurement.from_dict(data["measurement"])
        return cls(**data)
