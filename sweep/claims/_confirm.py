"""The claim a participant acts on, from evidence its choice did not see: the confirmation.

A promotion's boots rank its candidates and choose one, but a point is chosen exactly when its few boots
happen to read fast and steady: the claim and the odds those same boots give are optimistic where they are
used (``benchmarks.claims_simulation`` measures by how much). So the promotion's claims are a **screening**
figure, labelled so, and the claim and its odds come from a **confirmation**: ``boots`` fresh boots of the
chosen point and of a control beside it (the runner-up, else the baseline), interleaved, in a later run of
their own, each starting as the organisers' first boot of the folder does (an empty compile cache). Its
boots alone give the claim and the odds (``claim_for`` over their fit: the control only shares its noise,
unless Bartlett's test says the two differ).

The odds are those of the organisers' re-run: a later run, on another machine. Its law is the confirmation's
law of one fresh boot widened by the **machine term** (``sweep.claims._between.MachineTerm``): the study's
stated prior (``[promotion] between_prior`` and the degrees of freedom it is worth, ``between_prior_df``: an
assumption each printout names) pooled with what the study's own runs measured (the promotion, the
confirmation, and any verification or calibration at the same prompts).

**Sequential.** The confirmation boots the pair ``boots`` times, then asks ``stopping`` after every further
round (one boot of each, interleaved): it stops where P reaches the target, where the chosen point's P
ceiling (``Claim.ceiling``: what boots without end would give) cannot, where its PPL is over the gate, or at
the cap (``max_boots``); a stopped run says where and why (``Stop``). Every stored boot counts: an
interrupted run goes on from the next round.

The point is recommended when that P reaches the target under the gate: a decision on the confirmation's own
figure, its noise taken at the upper end of its 90% interval (``sweep.claims._fit``: the law a decision is
taken on), so that a confirmation whose few boots happened to read steady does not pass on that luck; each
further round lifts that P toward the ceiling as the noise's interval narrows. ``benchmarks.claims_simulation``
scores the recommended points of this sequential rule per cell (its README says where their P holds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from sweep.claims._fit import Fit
from sweep.store import ConfirmationPlan

__all__ = ["Candidate", "Stop", "StopReason", "ceiling_text", "changed_knobs", "confirmation_pair", "stopping"]

StopReason = Literal["target", "ceiling", "gate", "cap"]


class _Ceiling(Protocol):
    @property
    def p(self) -> float: ...
    @property
    def reaches(self) -> bool: ...


class Candidate(Protocol):
    """What the choice and the stopping rule read of a claim: a claim of TPS (``Claim``) or of goodput
    (``sweep.claims._serving.ServingClaim``)."""

    @property
    def trial_number(self) -> int: ...
    @property
    def claim(self) -> float: ...
    @property
    def p_verified(self) -> float | None: ...
    @property
    def meets(self) -> bool: ...
    @property
    def ppl_over_gate(self) -> bool: ...
    @property
    def ceiling(self) -> _Ceiling | None: ...


C = TypeVar("C", bound=Candidate)


@dataclass(frozen=True, kw_only=True)
class Stop:
    """Where a sequential confirmation stopped, and why."""

    reason: StopReason
    rounds: int  # boots of each stored when it stopped
    cap: int
    p: float | None  # the chosen point's P(VERIFIED) then
    ceiling: float | None  # and its ceiling
    target: float
    odds: str = "P(VERIFIED)"  # what ``p`` is the odds of, as printed (a serving claim's: of meeting the SLO)

    def describe(self) -> str:
        where = f"the confirmation stopped after {self.rounds} boot(s) of each (at most {self.cap})"
        p = "-" if self.p is None else f"{self.p:.2f}"
        why = {
            "target": f"{self.odds} {p} reached the target {self.target:g}",
            "ceiling": f"{self.odds} {p}, and no number of boots lifts it above {self.ceiling:.2f}, under the target "
            f"{self.target:g}: more boots would buy nothing",
            "gate": "the chosen point's PPL is over the gate: no boot brings it under",
            "cap": f"the cap was reached with {self.odds} {p}, under the target {self.target:g}",
        }[self.reason]
        return f"{where}: {why}"


def stopping(
    plan: ConfirmationPlan, chosen: Candidate | None, *, stored: int, target: float, odds: str = "P(VERIFIED)"
) -> Stop | None:
    """Whether the confirmation of ``plan`` stops with ``stored`` boots stored and the chosen point's claim from
    them (None: none of its boots measured), held to ``target``; None: it goes on with another round. ``odds``: what
    the claim's P is the odds of, as its ``Stop`` prints it."""
    rounds = stored // len(plan.trials)
    if rounds < plan.boots:
        return None  # the stated minimum first: the noise needs it
    p = chosen.p_verified if chosen else None
    ceiling = chosen.ceiling.p if chosen and chosen.ceiling else None
    reason: StopReason | None = None
    if chosen is not None and chosen.ppl_over_gate:
        reason = "gate"
    elif chosen is not None and chosen.meets:
        reason = "target"
    elif ceiling is not None and ceiling < target:
        reason = "ceiling"
    elif rounds >= plan.cap:
        reason = "cap"
    if reason is None:
        return None
    return Stop(reason=reason, rounds=rounds, cap=plan.cap, p=p, ceiling=ceiling, target=target, odds=odds)


def confirmation_pair(
    screening: Sequence[C],
    *,
    baseline: int | None,
    fitted: Fit | None = None,
    changed: Mapping[int, int] | None = None,
) -> tuple[int, int | None] | None:
    """The point to confirm and its control: the promotion's recommendation by its screening figures (else the
    candidate of the highest screening P under the gate), and the runner-up (the next highest claim), else the
    baseline; None where no candidate under the gate has figures to choose by.

    Among the candidates whose levels the screening's noise (``fitted``) cannot tell apart from that one's, the
    one with the fewest knobs changed from the baseline (``changed``: a count per trial) is confirmed, then the
    steadier (the higher P), then the faster: a configuration that changes less and holds its speed is the
    safer submission when the noise cannot say which is faster."""
    usable = [c for c in screening if not c.ppl_over_gate]
    if not usable:
        return None
    meeting = [c for c in usable if c.meets]
    best = (
        max(meeting, key=lambda c: (c.claim, -c.trial_number))
        if meeting
        else max(usable, key=lambda c: (c.p_verified or 0.0, c.claim))
    )
    pool = meeting or usable
    tied = [best] if fitted is None else [c for c in pool if not fitted.apart(c.trial_number, best.trial_number)]
    changes = changed or {}
    chosen = min(tied, key=lambda c: (changes.get(c.trial_number, 0), -(c.p_verified or 0.0), -c.claim, c.trial_number))
    others = sorted((c for c in screening if c is not chosen), key=lambda c: (-c.claim, c.trial_number))
    control = others[0].trial_number if others else baseline if baseline != chosen.trial_number else None
    return chosen.trial_number, control


def changed_knobs(knobs: Mapping[str, Any], reference: Mapping[str, Any]) -> int:
    """How many knobs a configuration sets otherwise than ``reference`` (the baseline's)."""
    return sum(knobs.get(name) != reference.get(name) for name in {*knobs, *reference})


def ceiling_text(ceiling: _Ceiling | None) -> str:
    """A claim's ceiling as printed (a claim of TPS or of goodput alike): its P, "<" where it is under the target;
    "-" unmeasured."""
    if ceiling is None:
        return "-"
    return f"{ceiling.p:.2f}" + ("" if ceiling.reaches else " <")
