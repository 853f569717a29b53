"""What one trial produces: the values that cross from a worker back to the driver.

Plain dataclasses of JSON-friendly fields, so that a Ray worker can return them and the
driver can store them without importing anything engine-specific. ``Measurement`` is the one
typed record of a trial's figures: the driver stores it whole, and every reader (Optuna's user
attributes, the console, the dashboards, the CSV) derives from it. A field marked ``SUMMARY``
is also a user attribute of the Optuna trial (what optuna-dashboard lists); every scalar field
reaches the CSV on its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from engine.measurement._lengths import LengthBucket
from engine.measurement._loadlevel import LoadLevel

__all__ = ["SUMMARY", "Measurement", "TrialOutcome", "TrialStatus"]

SUMMARY = {"summary": True}  # field metadata: shown as an Optuna user attribute


@dataclass
class Measurement:
    """TPS and PPL measured as the challenge measures them, plus what we add."""

    # sum(completion_tokens) / wall time of the timed run (output_throughput); of several runs
    # (tps_runs), the slower of the first and the median (engine.bench's TpsRuns.chosen)
    tps: float = field(metadata=SUMMARY)
    ppl: float = field(metadata=SUMMARY)  # exp(total target NLL / target tokens), token-weighted: the gated number
    ppl_mean_record: float = field(metadata=SUMMARY)  # mean of per-record PPLs; reported, never gated
    completion_tokens: int  # of that run, like tps_wall_s
    tps_wall_s: float
    ppl_target_tokens: int
    num_prompts: int
    num_ppl_records: int
    latency_s: dict[str, float] = field(default_factory=dict)  # p50/p90/p99/mean per request
    stream: dict[str, float] = field(default_factory=dict)  # ttft_*/itl_* when a stream pass ran
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    acceptance_rate: float | None = field(default=None, metadata=SUMMARY)  # accepted / drafted over the TPS runs
    output_token_ids: list[list[int]] = field(default_factory=list)  # per prompt, for identity
    # sha256 of each prompt's generated text: identity evidence even from a stack that returns no ids
    output_text_sha256: list[str] = field(default_factory=list)
    tps_runs: list[float] = field(default_factory=list)  # every timed run's TPS, in order (profile tps_repeats)
    tps_cv: float | None = field(default=None, metadata=SUMMARY)  # sample stdev / mean of tps_runs; None for one run
    tps_rule: str = ""  # how the timed runs of the boot were kept apart (engine.bench.tps_rule)
    # Each prompt of the first timed run: seconds and completion tokens (what a replay of the trial needs)
    prompt_latencies_s: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    # Multi-fidelity (sweep.search): the rule the trial ran under and, when it stopped before its
    # full measurement, how ("gate", "front") and why; a stopped trial's TPS covers only the prompts
    # it timed (prompts_timed), and it has no stream pass and no later runs.
    fidelity: dict[str, Any] = field(default_factory=dict)
    stopped: str | None = None
    stop_reason: str | None = None
    prompts_timed: int | None = None
    # A promotion or verification boot: the held-out run's TPS (prompts the sweep never timed, timed in
    # the same boot as the public run) and the order the runs were timed in ("public", "heldout")
    heldout_tps: float | None = None
    run_order: list[str] = field(default_factory=list)
    # The share of the machine's CPU time its host (a hypervisor) gave to other guests during the runs
    # (engine.host): a TPS measured while it was high reads slower than the same stack on a quiet host
    host_steal: float | None = field(default=None, metadata=SUMMARY)
    # Every timed run's requests and step figures, and what the machine did meanwhile (engine.bench,
    # engine.host; the shape is in docs/ARCHITECTURE.md, "Telemetry")
    telemetry: dict[str, Any] = field(default_factory=dict)
    # The serving load's runs (profile load_concurrency), one per level, each with its requests' timings, from
    # which an SLO's goodput is judged (sweep.judgement); stored in LoadLevel's one shape
    load: list[LoadLevel] = field(default_factory=list)
    # PPL by context length over the profile's long texts (length_refs; engine.measurement), shortest bucket first;
    # empty without them
    ppl_lengths: list[LengthBucket] = field(default_factory=list)

    def length_bucket(self, end: int) -> LengthBucket | None:
        """The length bucket that ends at ``end`` tokens; None where none was scored."""
        return next((b for b in self.ppl_lengths if b.end == end), None)

    @property
    def full(self) -> bool:
        """Measured to the end: every planned prompt timed (a stopped trial is partial)."""
        return self.stopped is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "load": [level.to_dict() for level in self.load],
            "ppl_lengths": [b.to_dict() for b in self.ppl_lengths],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(
            **(
                data
                | {
                    "load": [LoadLevel.from_dict(level) for level in data.get("load") or []],
                    "ppl_lengths": [LengthBucket.from_dict(b) for b in data.get("ppl_lengths") or []],
                }
            )
        )

    def summary(self) -> dict[str, Any]:
        """The fields marked ``SUMMARY`` that have a value."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.metadata.get("summary") and getattr(self, f.name) is not None
        }

    def scalars(self, *, prefix: str = "") -> dict[str, Any]:
        """Every scalar figure, nested dicts flattened (``latency_s.p50``); per-prompt lists left out."""
        return _flatten(asdict(self), prefix=prefix)  # the load levels and length buckets are lists: left out


def _flatten(data: dict[str, Any], *, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flatten(value, prefix=f"{prefix}{key}."))
        elif value is None or isinstance(value, (bool, int, float, str)):
            out[f"{prefix}{key}"] = value
    return out


TrialStatus = Literal["complete", "failed"]


@dataclass
class TrialOutcome:
    """One trial's result as a worker returns it: success or failure, never an exception."""

    status: TrialStatus
    knobs: dict[str, Any]  # every consumed knob's value, as launched
    argv: list[str]
    env: dict[str, str]  # the manifest's env after knobs, secrets redacted
    measurement: Measurement | None = None
    reason: str | None = None  # why it failed, one line
    log_tail: str = ""
    timings_s: dict[str, float] = field(default_factory=dict)  # boot, warmup, ppl, tps, stop, total
    node: dict[str, Any] = field(default_factory=dict)  # node_id, hostname, accelerator, gpu ids
    provenance: dict[str, Any] = field(default_factory=dict)  # engine.host.provenance: stack, versions, GPU, driver

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"measurement": None if self.measurement is None else self.measurement.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialOutcome:
        data = dict(data)
        if data.get("measurement") is not None:
            data["measurement"] = Measurement.from_dict(data["measurement"])
        return cls(**data)
