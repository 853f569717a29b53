"""A boot of one configuration measured as the organisers would measure it: ``BootRecord``.

Promotion (``sweep.claims``) and verification (``sweep.verify``) judge a configuration over
several fresh boots, never one: on a GPU one configuration's TPS moves about 10% from boot to boot
and 3-4% from run to run. Each boot times one run of the public prompts and one of the held-out
prompts (a set the sweep never timed, standing in for the organisers' private one), in an order
that alternates from boot to boot, then scores PPL; it is one ``BootRecord``, one row of the
``promotions`` or ``verifications`` table (``sweep.store``). Rows of one invocation share a
``run_id``; ``order`` is a boot's place in the run's interleave (A B C A B C ...: drift and
machine state hit every configuration alike), ``repeat`` its place among its configuration's boots.
A serving study's boot also runs the study's load levels after them (``load``: one run a level, each with its
requests' timings), which its claims of goodput are made of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from engine.config import BenchProfile
from engine.measurement import LoadLevel, TrialOutcome

__all__ = ["BootKind", "BootRecord", "BootStatus", "boot_record"]

BootStatus = Literal["complete", "failed"]
# the runs of fresh boots a study stores, each in its table (sweep.store._database.BOOT_TABLES)
BootKind = Literal["promotion", "confirmation", "verification", "calibration"]


@dataclass(frozen=True, kw_only=True)
class BootRecord:
    study_name: str
    trial_number: int  # the configuration's trial in the study
    run_id: str
    repeat: int
    status: BootStatus
    claimed_tps: float  # what this boot is measured against: the trial's TPS, or the claim verified
    claimed_ppl: float
    gate: float | None  # the gate on this boot's references, where known when it ran
    prompts: str  # the held-out prompt set
    refs: str
    profile: str
    knobs: dict[str, Any] = field(default_factory=dict)
    order: int | None = None  # None: a re-run stored before boots were interleaved
    first: str | None = None  # "public" or "heldout": which timed run came first in the boot
    public_prompts: str | None = None
    public_tps: float | None = None
    tps: float | None = None  # the held-out run's TPS: what a private re-run would read
    ppl: float | None = None
    acceptance_rate: float | None = None
    host_steal: float | None = None  # the share of CPU time the host took during the boot's runs (engine.host)
    telemetry: dict[str, Any] = field(default_factory=dict)  # the boot's Measurement.telemetry (engine.host.Telemetry)
    load: tuple[LoadLevel, ...] = ()  # a serving study's load levels, one run each, in the order they ran
    reason: str | None = None  # why the boot failed (boot failure, bad answers, a lost worker)
    node: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)  # engine.host.provenance
    timings: dict[str, float] = field(default_factory=dict)
    log_tail: str = ""
    created_at: datetime | None = None

    @property
    def measured(self) -> bool:
        """Both runs and the PPL measured: what the claims and the verdicts are made of."""
        return self.status == "complete" and None not in (self.public_tps, self.tps, self.ppl)


def boot_record(
    outcome: TrialOutcome,
    *,
    study_name: str,
    trial_number: int,
    run_id: str,
    repeat: int,
    order: int,
    claimed_tps: float,
    claimed_ppl: float,
    gate: float | None,
    profile: BenchProfile,
) -> BootRecord:
    """A worker's outcome of one boot as its row."""
    m = outcome.measurement
    measured = outcome.status == "complete" and m is not None
    return BootRecord(
        study_name=study_name,
        trial_number=trial_number,
        run_id=run_id,
        repeat=repeat,
        order=order,
        status="complete" if measured else "failed",
        claimed_tps=claimed_tps,
        claimed_ppl=claimed_ppl,
        gate=gate,
        prompts=profile.heldout_prompts,
        public_prompts=profile.prompts,
        refs=profile.refs,
        profile=profile.name,
        knobs=dict(outcome.knobs),
        first=(m.run_order[0] if m.run_order else None) if m else None,
        public_tps=m.tps if m else None,
        tps=m.heldout_tps if m else None,
        ppl=m.ppl if m else None,
        acceptance_rate=m.acceptance_rate if m else None,
        host_steal=m.host_steal if m else None,
        telemetry=dict(m.telemetry) if m else {},
        load=tuple(m.load) if m else (),
        reason=None if measured else (outcome.reason or "the boot returned no measurement"),
        node=dict(outcome.node),
        provenance=dict(outcome.provenance),
        timings=dict(outcome.timings_s),
        log_tail=outcome.log_tail,
    )
