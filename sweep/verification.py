"""The verdict the organisers' private re-run would give, from verification boots, with its interval.

``sweep.verify`` boots each chosen point R times afresh (``sweep.booter``); every boot times the
held-out prompts and, interleaved with them in alternating order, the public ones (a machine that
reads slower today shows in both), then scores PPL on the held-out references. Each boot is a row
of ``verifications`` (``sweep.boots.BootRecord``), carrying the claim it was measured against and
the gate, so a verdict can be recomputed from the rows alone. The latest run of a trial is its
verdict. The rule (``judge``), on the held-out level fitted as ``sweep.estimate`` fits it (a first
run's, the second-run effect taken out; its noise pooled with the study's promotion boots):

- VERIFIED: its 90% interval lies within 5% of the claim on both sides, the median PPL is under the
  gate, and every boot was measured;
- INVALID: the interval lies wholly outside the 5% band, or the PPL is over the gate, or a boot
  failed (a private re-run of a stack that fails would fail too);
- UNDECIDED: the interval straddles the 5% line, or it rests on one boot (one draw of a re-run
  decides nothing on TPS, however narrow the noise it borrows says it is): more boots would tell.

Rows stored before boots timed the public prompts too (one held-out run each) are judged on their
held-out runs alone, with the promotion's noise, or the floor, standing in for a spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from engine.bench import coefficient_of_variation
from sweep.boots import BootRecord
from sweep.estimate import TPS_TOLERANCE, Fit, fit, interval
from sweep.judgement import NOISE_FLOOR, over_gate, pooled_log_sd
from sweep.storage import Storage

__all__ = ["Verdict", "VerdictName", "judge", "latest_verdicts"]

VerdictName = Literal["VERIFIED", "INVALID", "UNDECIDED"]
MIN_TPS_BOOTS = 2  # fewer measured boots than this: no TPS verdict either way (PPL and failures still count)
_VERIFYING = "verification"  # the fit's key for the boots under judgement, apart from any promotion's


@dataclass(frozen=True, kw_only=True)
class Verdict:
    trial_number: int
    verdict: VerdictName
    reasons: tuple[str, ...]
    claimed_tps: float
    gate: float | None
    repeats: int
    failed: int
    tps_min: float | None  # the held-out runs' TPS over the boots
    tps_median: float | None
    tps_max: float | None
    tps_cv: float | None  # sample stdev / mean over the measured boots
    tps_gap_pct: float | None  # (fitted held-out level - claim) / claim, in percent
    gap_low_pct: float | None  # its 90% interval
    gap_high_pct: float | None
    public_gap_pct: float | None  # the public runs' median against the claim: the machine's drift
    ppl_median: float | None
    run_id: str

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def _level(boots: Sequence[BootRecord], promoted: Sequence[BootRecord], floor: float) -> tuple[float, float, float]:
    """The held-out level and its 90% interval, as TPS."""
    if all(b.public_tps is not None and b.first is not None for b in boots):
        mine = {id(b) for b in boots}
        fitted = fit(
            [*promoted, *boots], floor=floor, key=lambda b: _VERIFYING if id(b) in mine else (b.run_id, b.trial_number)
        )
        return interval(fitted, _VERIFYING)
    # Held-out runs alone: their mean, the spread of the promotion's boots (or of these) or the floor
    heldout = [b.tps for b in boots if b.tps is not None]  # every one: judge() passes the measured boots
    logs = [math.log(tps) for tps in heldout]
    sd, df = pooled_log_sd([heldout, *_groups(promoted)])
    spread = Fit(levels={}, gamma=0.0, s_y=sd, s_d=0.0, df=df, ppl_sd=0.0, ppl_df=0, floor=floor)
    center = statistics.fmean(logs)
    low, high = spread.level_interval(center, len(logs))
    return math.exp(center), math.exp(low), math.exp(high)


def _groups(promoted: Sequence[BootRecord]) -> list[list[float]]:
    by: dict[tuple[str, int], list[float]] = {}
    for b in promoted:
        if b.measured:
            by.setdefault((b.run_id, b.trial_number), []).append(b.tps)  # type: ignore[arg-type]
    return list(by.values())


def judge(boots: Sequence[BootRecord], *, promoted: Sequence[BootRecord] = (), floor: float = NOISE_FLOOR) -> Verdict:
    """The verdict over the boots of one trial in one verification run; ``promoted``: the study's
    promotion boots, whose noise the interval pools."""
    if not boots:
        raise ValueError("judge() needs at least one boot")
    first = boots[0]
    if any((b.trial_number, b.run_id) != (first.trial_number, first.run_id) for b in boots):
        raise ValueError("judge() takes the boots of one trial in one verification run")
    measured = [b for b in boots if b.status == "complete" and b.tps is not None and b.ppl is not None]
    failed = [b for b in boots if b not in measured]
    claim, gate = first.claimed_tps, first.gate
    reasons = [f"boot {b.repeat + 1} failed: {b.reason or 'no measurement'}" for b in failed]
    tps = sorted(b.tps for b in measured if b.tps is not None)  # every one: measured boots have their TPS
    ppl_median = statistics.median(b.ppl for b in measured) if measured else None  # type: ignore[type-var]
    gap = low = high = public_gap = None
    verdict: VerdictName = "INVALID"
    if measured:
        level, lo, hi = _level(measured, promoted, floor)
        gap, low, high = ((x - claim) / claim * 100.0 for x in (level, lo, hi))
        public = [b.public_tps for b in measured if b.public_tps is not None]
        public_gap = (statistics.median(public) - claim) / claim * 100.0 if public else None
        band = TPS_TOLERANCE * 100.0
        if len(measured) < MIN_TPS_BOOTS:
            verdict = "UNDECIDED"
        elif high < -band or low > band:
            reasons.append(
                f"TPS gap {gap:+.1f}% (90% interval {low:+.1f}%..{high:+.1f}%) is outside {TPS_TOLERANCE:.0%} "
                f"of the claimed {claim:.2f} tokens/s"
            )
        elif low < -band or high > band:
            verdict = "UNDECIDED"
        if gate is None:
            reasons.append("no gate to judge the PPL against")
        elif over_gate(ppl_median, gate):  # type: ignore[arg-type]
            reasons.append(f"PPL {ppl_median:.4f} over the gate {gate:.4f}")
    else:
        reasons.append("no boot produced a measurement")
    if reasons:
        verdict = "INVALID"
    elif verdict != "UNDECIDED":
        verdict = "VERIFIED"
    return Verdict(
        trial_number=first.trial_number,
        verdict=verdict,
        reasons=tuple(reasons),
        claimed_tps=claim,
        gate=gate,
        repeats=len(boots),
        failed=len(failed),
        tps_min=tps[0] if tps else None,
        tps_median=statistics.median(tps) if tps else None,
        tps_max=tps[-1] if tps else None,
        tps_cv=coefficient_of_variation(tps),
        tps_gap_pct=gap,
        gap_low_pct=low,
        gap_high_pct=high,
        public_gap_pct=public_gap,
        ppl_median=ppl_median,
        run_id=first.run_id,
    )


def latest_verdicts(storage: Storage, study_name: str, *, floor: float = NOISE_FLOOR) -> dict[int, Verdict]:
    """Trial number -> the verdict of its most recent verification run."""
    by_run: dict[tuple[int, str], list[BootRecord]] = {}
    latest: dict[int, str] = {}
    for boot in storage.boots("verification", study_name):  # in insertion order: later runs win
        by_run.setdefault((boot.trial_number, boot.run_id), []).append(boot)
        latest[boot.trial_number] = boot.run_id
    promoted = storage.boots("promotion", study_name) if latest else []
    return {n: judge(by_run[(n, run_id)], promoted=promoted, floor=floor) for n, run_id in latest.items()}
