"""Verification re-runs: their rows, and the verdict the challenge's organisers would give.

A front point is re-run on a held-out prompt set, R times, each on a freshly booted stack. Every
re-run is one row of ``verifications`` (the table is in ``sweep.storage``), linked to the trial by
study name and trial number and carrying the claimed TPS and the gate it was judged against, so
a verdict can be recomputed from the rows alone. Rows of one ``sweep.verify`` invocation share a ``run_id``; the latest
run of a trial is its verdict.

VERIFIED: the median re-run TPS is within 5% of the trial's TPS and the median re-run PPL is
under the gate, with every re-run measured. Otherwise INVALID, with each reason.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from engine.bench import coefficient_of_variation
from sweep.judgement import over_gate
from sweep.storage import Storage, as_utc, verifications

__all__ = [
    "TPS_TOLERANCE",
    "Rerun",
    "Verdict",
    "insert_reruns",
    "judge",
    "latest_verdicts",
    "load_reruns",
]

TPS_TOLERANCE = 0.05  # the organisers' rule: re-run TPS within 5% of the reported TPS

VerdictName = Literal["VERIFIED", "INVALID"]


@dataclass(frozen=True, kw_only=True)
class Rerun:
    """One re-run of one trial: one row of the ``verifications`` table."""

    study_name: str
    trial_number: int
    run_id: str
    repeat: int
    status: Literal["complete", "failed"]
    claimed_tps: float
    claimed_ppl: float
    gate: float
    prompts: str
    refs: str
    profile: str
    knobs: dict[str, Any] = field(default_factory=dict)
    tps: float | None = None
    ppl: float | None = None
    acceptance_rate: float | None = None
    reason: str | None = None  # why the re-run failed (boot failure, bad answers)
    node: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Verdict:
    trial_number: int
    verdict: VerdictName
    reasons: tuple[str, ...]
    claimed_tps: float
    gate: float
    repeats: int
    failed: int
    tps_min: float | None
    tps_median: float | None
    tps_max: float | None
    tps_cv: float | None  # sample stdev / mean over the measured re-runs
    tps_gap_pct: float | None  # (median re-run TPS - claimed) / claimed, in percent
    ppl_median: float | None
    run_id: str

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def judge(reruns: list[Rerun]) -> Verdict:
    """The verdict over the re-runs of one trial in one verification run."""
    if not reruns:
        raise ValueError("judge() needs at least one re-run")
    first = reruns[0]
    if any((r.trial_number, r.run_id) != (first.trial_number, first.run_id) for r in reruns):
        raise ValueError("judge() takes the re-runs of one trial in one verification run")
    measured = [r for r in reruns if r.status == "complete" and r.tps is not None and r.ppl is not None]
    failed = [r for r in reruns if r not in measured]
    tps = sorted(r.tps for r in measured)
    ppl = [r.ppl for r in measured]

    reasons: list[str] = []
    for r in failed:
        reasons.append(f"re-run {r.repeat + 1} failed: {r.reason or 'no measurement'}")
    tps_median = statistics.median(tps) if tps else None
    gap_pct = None
    if tps_median is not None and first.claimed_tps > 0:
        gap_pct = (tps_median - first.claimed_tps) / first.claimed_tps * 100.0
        if abs(gap_pct) > TPS_TOLERANCE * 100.0:
            reasons.append(
                f"TPS gap {gap_pct:+.1f}%: re-run median {tps_median:.2f} vs claimed "
                f"{first.claimed_tps:.2f} tokens/s (tolerance {TPS_TOLERANCE:.0%})"
            )
    ppl_median = statistics.median(ppl) if ppl else None
    if ppl_median is not None and over_gate(ppl_median, first.gate):
        reasons.append(f"PPL {ppl_median:.4f} over the gate {first.gate:.4f}")
    if not measured:
        reasons.append("no re-run produced a measurement")

    cv = coefficient_of_variation(tps)
    return Verdict(
        trial_number=first.trial_number,
        verdict="INVALID" if reasons else "VERIFIED",
        reasons=tuple(reasons),
        claimed_tps=first.claimed_tps,
        gate=first.gate,
        repeats=len(reruns),
        failed=len(failed),
        tps_min=tps[0] if tps else None,
        tps_median=tps_median,
        tps_max=tps[-1] if tps else None,
        tps_cv=cv,
        tps_gap_pct=gap_pct,
        ppl_median=ppl_median,
        run_id=first.run_id,
    )


def insert_reruns(storage: Storage, reruns: list[Rerun]) -> None:
    rows = [{**asdict(r), "created_at": r.created_at or datetime.now(UTC)} for r in reruns]
    with storage.engine.begin() as conn:
        conn.execute(verifications.insert(), rows)


def load_reruns(storage: Storage, study_name: str) -> list[Rerun]:
    query = (
        verifications.select()
        .where(verifications.c.study_name == study_name)
        .order_by(verifications.c.id)
    )
    with storage.engine.connect() as conn:
        rows = [dict(row._mapping) for row in conn.execute(query)]
    for row in rows:
        del row["id"]
        row["created_at"] = as_utc(row["created_at"])
    return [Rerun(**row) for row in rows]


def latest_verdicts(storage: Storage, study_name: str) -> dict[int, Verdict]:
    """Trial number -> the verdict of its most recent verification run."""
    by_run: dict[tuple[int, str], list[Rerun]] = {}
    latest: dict[int, str] = {}
    for rerun in load_reruns(storage, study_name):  # in insertion order: later runs win
        by_run.setdefault((rerun.trial_number, rerun.run_id), []).append(rerun)
        latest[rerun.trial_number] = rerun.run_id
    return {number: judge(by_run[(number, run_id)]) for number, run_id in latest.items()}
