"""The verdict the organisers' private re-run would give, from verification boots, with its interval.

``sweep.verify`` boots each chosen point R times afresh (``sweep.claims``); every boot times the
held-out prompts and, interleaved with them in alternating order, the public ones (a machine that
reads slower today shows in both), then scores PPL on the held-out references. Each boot is a row
of ``verifications`` (``sweep.store.BootRecord``), carrying the claim it was measured against and
the gate, so a verdict can be recomputed from the rows alone. The latest run of a trial is its
verdict. The rule (``judge``), on the held-out level fitted as ``sweep.claims`` fits it (a first
run's, the second-run effect taken out; its noise pooled with the study's promotion boots and the
other configurations of its own run, unless they differ), with the study's noise floor and target:

- VERIFIED: the level's 90% interval lies within 5% of the claim on both sides, one more re-run
  lands within 5% of it with a probability that reaches the target (a level 4.9% low can be known
  precisely and still fail half its re-runs), the median PPL is under the gate, and every boot was
  measured;
- INVALID: the interval lies wholly outside the 5% band, or the PPL is over the gate, or a boot
  failed (a private re-run of a stack that fails would fail too);
- UNDECIDED: anything between, and wherever the TPS cannot be judged: one measured boot, or fewer than
  one degree of freedom left for the noise; more boots would tell.

Boots stored before boots timed the public prompts too (one held-out run each) are judged on their
held-out runs alone: their own spread, on their own degrees of freedom.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from engine.bench import coefficient_of_variation
from sweep.claims._fit import fit
from sweep.judgement import DEFAULT_TARGET, NOISE_FLOOR, TPS_TOLERANCE, over_gate, tps_band
from sweep.store import BootRecord

__all__ = ["Verdict", "VerdictName", "judge"]

VerdictName = Literal["VERIFIED", "INVALID", "UNDECIDED"]
MIN_TPS_BOOTS = 2  # fewer measured boots than this: no TPS verdict either way (PPL and failures still count)
_VERIFYING = "verification"  # the fit's key for the boots under judgement, apart from any promotion's


@dataclass(frozen=True, kw_only=True)
class Verdict:
    trial_number: int
    verdict: VerdictName
    reasons: tuple[str, ...]  # why INVALID
    undecided: str | None  # why UNDECIDED
    claimed_tps: float  # the claim the boots were measured against
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
    p_rerun: float | None  # P(one more re-run within 5% of the claim)
    target: float
    df: float | None  # the noise's degrees of freedom
    public_gap_pct: float | None  # the public runs' median against the claim: the machine's drift
    ppl_median: float | None
    run_id: str

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    def verifies(self, claim: float) -> bool:
        """VERIFIED, and against this claim: a verdict measured against another claim (the claims moved since)
        says nothing of it."""
        return self.verdict == "VERIFIED" and math.isclose(self.claimed_tps, claim, rel_tol=1e-6)


def judge(
    boots: Sequence[BootRecord],
    *,
    beside: Sequence[BootRecord] = (),
    floor: float = NOISE_FLOOR,
    target: float = DEFAULT_TARGET,
) -> Verdict:
    """The verdict over the boots of one trial in one verification run; ``beside``: boots of other
    configurations measured as these were (the study's promotion, the other trials of this run), whose
    noise the interval pools where it does not differ."""
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
    ppls = [b.ppl for b in measured if b.ppl is not None]  # every one: measured boots have their PPL
    ppl_median = statistics.median(ppls) if ppls else None
    tps_part = _judge_tps(measured, beside=beside, claim=claim, floor=floor, target=target) if measured else None
    undecided = tps_part.undecided if tps_part else None
    if tps_part is not None and tps_part.reason:
        reasons.append(tps_part.reason)
    if not measured:
        reasons.append("no boot produced a measurement")
    elif gate is None:
        reasons.append("no gate to judge the PPL against")
    elif ppl_median is not None and over_gate(ppl_median, gate):
        reasons.append(f"PPL {ppl_median:.4f} over the gate {gate:.4f}")
    verdict: VerdictName = "INVALID" if reasons else "UNDECIDED" if undecided else "VERIFIED"
    return Verdict(
        trial_number=first.trial_number,
        verdict=verdict,
        reasons=tuple(reasons),
        undecided=None if reasons else undecided,
        claimed_tps=claim,
        gate=gate,
        repeats=len(boots),
        failed=len(failed),
        tps_min=tps[0] if tps else None,
        tps_median=statistics.median(tps) if tps else None,
        tps_max=tps[-1] if tps else None,
        tps_cv=coefficient_of_variation(tps),
        tps_gap_pct=tps_part.gap if tps_part else None,
        gap_low_pct=tps_part.low if tps_part else None,
        gap_high_pct=tps_part.high if tps_part else None,
        p_rerun=tps_part.p_rerun if tps_part else None,
        target=target,
        df=tps_part.df if tps_part else None,
        public_gap_pct=tps_part.public_gap if tps_part else None,
        ppl_median=ppl_median,
        run_id=first.run_id,
    )


@dataclass(frozen=True, kw_only=True)
class _TpsPart:
    """The held-out level against the claim: its gap and 90% interval (percent), the odds of one more re-run,
    and why that is INVALID (``reason``) or UNDECIDED (``undecided``), if it is."""

    gap: float
    low: float | None
    high: float | None
    public_gap: float | None
    p_rerun: float | None
    df: float | None
    reason: str | None
    undecided: str | None


def _judge_tps(
    measured: Sequence[BootRecord], *, beside: Sequence[BootRecord], claim: float, floor: float, target: float
) -> _TpsPart:
    mine = {id(b) for b in measured}
    legacy = any(b.public_tps is None or b.first is None for b in measured)
    fitted = fit(
        measured if legacy else [*(b for b in beside if id(b) not in mine), *measured],
        floor=floor,
        key=lambda b: _VERIFYING if id(b) in mine else (b.run_id, b.trial_number),
    )
    gap = (math.exp(fitted.levels[_VERIFYING].heldout) - claim) / claim * 100.0
    public = [b.public_tps for b in measured if b.public_tps is not None]
    public_gap = (statistics.median(public) - claim) / claim * 100.0 if public else None
    bounds = fitted.level_interval(_VERIFYING)
    if bounds is None:
        spread = fitted.spreads[_VERIFYING]
        return _TpsPart(
            gap=gap,
            low=None,
            high=None,
            public_gap=public_gap,
            p_rerun=None,
            df=None,
            reason=None,
            undecided=_too_few(len(measured))
            or (
                f"fewer than one degree of freedom left for the noise ({spread.df_y:g} for the boot's, "
                f"{spread.df_d:g} for the run's): more boots would tell"
            ),
        )
    low, high = ((math.exp(x) - claim) / claim * 100.0 for x in bounds)
    p_rerun = fitted.p_within(_VERIFYING, claim)
    law = fitted.law(_VERIFYING)
    below, above = (math.log(claim) + edge for edge in tps_band())  # the organisers' 5% around the claim
    reason = undecided = None
    if too_few := _too_few(len(measured)):
        undecided = too_few
    elif bounds[1] < below or bounds[0] > above:
        reason = (
            f"TPS gap {gap:+.1f}% (90% interval {low:+.1f}%..{high:+.1f}%) is outside "
            f"{TPS_TOLERANCE:.0%} of the claimed {claim:.2f} tokens/s"
        )
    elif bounds[0] < below or bounds[1] > above:
        undecided = "its interval straddles the 5% line: more boots (--repeats) would tell"
    elif p_rerun is not None and p_rerun < target:
        undecided = f"its level lies within 5% but one more re-run lands there with P {p_rerun:.2f}, under the target {target:g}"
    return _TpsPart(
        gap=gap,
        low=low,
        high=high,
        public_gap=public_gap,
        p_rerun=p_rerun,
        df=None if law is None else law.df,
        reason=reason,
        undecided=undecided,
    )


def _too_few(measured: int) -> str | None:
    if measured < MIN_TPS_BOOTS:
        return "one measured boot is one draw of a re-run: more boots (--repeats) would tell"
    return None
