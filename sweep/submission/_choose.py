"""The point to submit.

``choose`` picks the point: among the study's feasible trials measured to the end, the VERIFIED one
(its latest verification, ``sweep.claims.judge``) of the highest claim (its promotion's,
``sweep.claims``; a trial never promoted, its sweep TPS). With none VERIFIED it raises
``NothingToSubmit`` naming why, unless unverified points are allowed: then the point of the highest
P(VERIFIED) (or, never promoted, the fastest), labelled as such everywhere.

The folder that submits it is ``sweep.submission``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from errors import GemmaSweepError
from sweep.claims import Claim, Verdict
from sweep.store import TrialRecord

__all__ = ["Choice", "NothingToSubmit", "choose"]


class NothingToSubmit(GemmaSweepError):
    """No point of the study may be submitted (none is VERIFIED, or none is feasible)."""


@dataclass(frozen=True, kw_only=True)
class Choice:
    record: TrialRecord
    claim: Claim | None
    verdict: Verdict | None

    @property
    def tps(self) -> float:
        """The TPS to report: the promotion's claim, else the sweep's TPS."""
        return self.claim.claim if self.claim else self.record.figures.tps

    @property
    def verified(self) -> bool:
        """VERIFIED against the claim it writes (``Verdict.verifies``)."""
        return self.verdict is not None and self.verdict.verifies(self.tps)

    @property
    def label(self) -> str:
        v = self.verdict
        if self.verified:
            return "VERIFIED"
        if v is not None and v.verdict == "VERIFIED":
            return f"UNVERIFIED (VERIFIED against {v.claimed_tps:.2f} tok/s, not this claim: verify it again)"
        return f"UNVERIFIED ({v.verdict if v else 'never verified'})"


def choose(
    records: list[TrialRecord],
    *,
    verdicts: dict[int, Verdict],
    claims: dict[int, Claim],
    allow_unverified: bool = False,
) -> Choice:
    feasible = [r for r in records if r.full and r.feasible]
    if not feasible:
        raise NothingToSubmit("no feasible trial measured to the end: nothing to submit")
    options = [
        Choice(record=r, claim=claims.get(r.trial_number), verdict=verdicts.get(r.trial_number)) for r in feasible
    ]
    verified = [c for c in options if c.verified]
    if verified:
        return max(verified, key=lambda c: (c.tps, -c.record.trial_number))
    if not allow_unverified:
        seen = sorted(f"trial {c.record.trial_number}: {c.label}" for c in options if c.verdict is not None)
        raise NothingToSubmit(
            "no point of the study is VERIFIED ("
            + ("; ".join(seen) or "no verification run yet")
            + "): verify one with `python -m sweep.verify`, or pass --allow-unverified"
        )
    promoted = [c for c in options if c.claim is not None and not c.claim.ppl_over_gate]
    if promoted:
        return max(promoted, key=lambda c: ((c.claim.p_verified if c.claim else None) or 0.0, c.tps))
    return max(options, key=lambda c: (c.tps, -c.record.trial_number))
