"""The TPS to claim and how likely the organisers' private re-run is to verify it: ``claim_for``.

A private re-run is a fresh boot's first run on prompts nobody timed; its law is the fit's (``sweep.claims._fit``)
around the configuration's held-out level, widened by the machine term where the re-run is the organisers'
(a later run on another machine: ``sweep.claims._between.MachineTerm``). Then::

    P(VERIFIED | claim C) = P(0.95 C <= H_new <= 1.05 C) * P(PPL_new <= gate)

the PPL's part from the boots' PPLs alike (``sweep.judgement.chance_under_gate``). Without a machine term the
figure is a re-run's within the same run of boots: a screening figure (``Claim.basis``). With one, the odds are
the ones a participant acts on (a confirmed claim is recommended on them), so its P(VERIFIED), the claim it
makes and its re-run interval take the run's own noise at the upper end of its 90% interval (``Fit.law``'s
``bounded``): a P that the boots behind it vouch for at 95%, never the one of boots that happened to read
steady. The figures beside it (the P within its run, the P at each machine term) decide nothing and are the
plain estimates: averaged over what the noise might be, as a participant compares them with a machine's truth.

The claim is the public level ``exp(L_P)`` (what a fresh boot's first public run reads, in the
middle) when that reaches the target P(VERIFIED); else the largest lower claim that does; when none
does, the claim of the highest P, marked as missing the target. A claim is never above ``exp(L_P)``:
it reports what was measured, never better.

Two more figures show what the odds assume and what more boots could buy:

- ``Claim.p_at_machine``: the P of the same claim where the organisers' machine reads a known 1%, 2%, 4% or 8%
  from yours (``MACHINE_TERMS``; the term exact, infinite degrees of freedom, in place of the study's own):
  a participant whose organisers run another machine reads the number that fits it;
- ``Claim.ceiling`` (``Ceiling``): the P that infinitely many boots would give, the level's error gone and
  the re-run's boot and run noise staying at the values measured (then known: infinite degrees of freedom),
  the machine term and the client offset on the degrees of freedom they carry (boots of one run add none to
  them), at the best claim the rule could make; where it is under the target, no number of boots reaches it,
  and it says how small the re-run's total noise would have to be.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from sweep.claims._between import MachineTerm
from sweep.claims._confirm import ceiling_text
from sweep.claims._fit import Fit, Law, Spread
from sweep.judgement import Z, chance_under_gate, over_gate, tps_band
from sweep.store import ClientOffset

__all__ = ["MACHINE_TERMS", "Ceiling", "Claim", "best_claim", "claim_for", "screening_claim"]

_LOW, _HIGH = tps_band()
# The machine terms (sd of the log ratio, taken as known) a claim's P is shown at beside the study's own: the
# challenge's A10G allocations (~1%), two H200 leases of this project (3-4%), same-SKU GPUs on average (8%)
MACHINE_TERMS = (0.01, 0.02, 0.04, 0.08)


@dataclass(frozen=True, kw_only=True)
class Ceiling:
    """The P(VERIFIED) that infinitely many boots would give a configuration (see the module's docstring)."""

    p: float
    claim: float  # where: the best claim the rule could make (never above the public level)
    sd: float  # the re-run's total noise then (log scale): boot, run, machine term, client offset
    df: float  # its degrees of freedom
    target: float
    machine: bool  # the machine term is in the noise (the organisers' re-run); False: a re-run within the run
    needed_sd: float | None  # under the target: the total noise the target needs there; None: it reaches it, or
    # no noise would (the PPL's part alone under the target, or the claim's band off the level)

    @property
    def reaches(self) -> bool:
        return self.p >= self.target

    def describe(self) -> str:
        """ "0.63 at 5.69 tok/s: ...", what boots without end would give and why."""
        head = f"{self.p:.2f} at {self.claim:.2f} tok/s"
        if self.reaches:
            return f"{head}: boots enough reach the target {self.target:g}"
        need = (
            "no noise would reach it there"
            if self.needed_sd is None
            else f"the target needs {self.needed_sd:.1%} or less"
        )
        stays = "a boot's, a run's and the machine term" if self.machine else "a boot's and a run's, within the run"
        return (
            f"{head}: no number of boots reaches the target {self.target:g} (the re-run's noise {self.sd:.1%} stays, "
            f"{stays}; {need})"
        )


def _needed_sd(centre: float, *, df: float, p_ppl: float, target: float, sd: float) -> float | None:
    """The total noise (a Student t of ``df``) at which a re-run lands within 5% of a claim ``centre`` (log) from
    its level with P ``target``, where ``sd`` gives less; None where no noise would."""

    def p(scale: float) -> float:
        return Law(scale=scale, df=df).within(centre + _LOW, centre + _HIGH) * p_ppl

    low, high = 0.0, sd
    if p(high * 1e-9) < target:
        return None  # even a still re-run misses: the band is off the level, or the PPL's part is under the target
    for _ in range(60):  # p falls as the noise grows, the band around the level
        middle = (low + high) / 2
        low, high = (middle, high) if p(middle) >= target else (low, middle)
    return low


def _ceiling(
    fitted: Fit,
    key: Hashable,
    *,
    parts: list[tuple[float, float]],
    shift: float,
    p_ppl: float,
    target: float,
    machine: bool,
) -> Ceiling | None:
    law = fitted.law(key, extra=parts, known=True)
    if law is None:
        return None
    level = fitted.levels[key]
    claim = min(math.exp(level.heldout + shift - (_LOW + _HIGH) / 2), math.exp(level.public))
    p = (fitted.p_within(key, claim, extra=parts, shift=shift, known=True) or 0.0) * p_ppl
    centre = math.log(claim) - level.heldout - shift
    needed = None if p >= target else _needed_sd(centre, df=law.df, p_ppl=p_ppl, target=target, sd=law.scale)
    return Ceiling(p=p, claim=claim, sd=law.scale, df=law.df, target=target, machine=machine, needed_sd=needed)


@dataclass(frozen=True, kw_only=True)
class Claim:
    """What to report for one configuration, and how likely a private re-run verifies it."""

    trial_number: int
    boots: int
    claim: float  # the TPS to report
    public: float  # exp(L_P): a fresh boot's first public run, in the middle
    heldout: float  # exp(L_H): a fresh boot's first held-out run, in the middle
    # None below: the noise is not measured (fewer than one degree of freedom); ``unmeasured`` says why
    rerun_low: float | None  # the 90% interval of one private re-run's TPS
    rerun_high: float | None
    p_verified: float | None  # at the claim: the TPS within 5% of it, times the PPL under the gate
    p_tps: float | None
    p_ppl: float
    p_within_run: float | None  # the same for a re-run within the claim's own run of boots (no machine term)
    machine: MachineTerm | None  # in the odds: the organisers' re-run; None: a screening figure, within the run
    df: float | None  # the degrees of freedom of the re-run's law
    offset: ClientOffset | None  # the organisers' client's offset carried into the odds; None: not measured
    spread: Spread  # the noise it was judged by
    own_noise: bool  # judged by its own boots (its noise differs from the others')
    unmeasured: str | None
    meets: bool  # p_verified reaches the study's target
    target: float
    ppl: float
    ppl_tol: float  # Z pooled boot-to-boot sd, in PPL units
    gate: float | None
    ppl_over_gate: bool  # the median PPL over the gate (or no gate known): never recommended
    # (machine term, P at the claim) with the term known exactly in place of the study's (MACHINE_TERMS); () unmeasured
    p_at_machine: tuple[tuple[float, float], ...] = ()
    ceiling: Ceiling | None = None  # the P infinitely many boots would give; None unmeasured

    @property
    def basis(self) -> str:
        """What its odds are of: the organisers' re-run (a machine term in), or a re-run within its own run of
        boots, which screens candidates and promises nothing of another machine."""
        return "organisers' re-run" if self.machine is not None else "screening, within its run"

    def rerun_text(self) -> str:
        """The 90% interval of a private re-run as printed: "low..high", or "-" where the noise is not measured."""
        return "-" if self.rerun_low is None else f"{self.rerun_low:.1f}..{self.rerun_high:.1f}"

    def odds_text(self) -> str:
        """P(VERIFIED) as printed: two decimals, or "-" where the noise is not measured."""
        return "-" if self.p_verified is None else f"{self.p_verified:.2f}"

    def ceiling_text(self) -> str:
        """The ceiling's P as printed, "<" where it is under the target; "-" unmeasured."""
        return ceiling_text(self.ceiling)


def _unmeasured(spread: Spread, boots: int) -> str:
    return (
        f"no P(VERIFIED): the noise is not measured ({boots} boot(s); {spread.df_y:g} degree(s) of freedom left for "
        f"the boot's noise, {spread.df_d:g} for the run's; at least one each is needed)"
    )


def _claim_rule(p: Callable[[float], float], *, level: float, ceiling: float, target: float) -> float:
    """The claim, by the one rule every claim is made by: ``ceiling`` (what was measured) where a re-run lands
    within 5% of it with P ``p(ceiling)`` reaching ``target``; else the largest lower claim that does; where none
    does, the most likely one. ``level``: the re-run's own level (log TPS), where P is highest 5% around."""
    if p(ceiling) >= target:
        return ceiling
    peak = math.exp(level - (_LOW + _HIGH) / 2)  # where P(TPS within 5%) is highest
    if peak >= ceiling:
        return ceiling
    if p(peak) < target:
        return peak  # no claim meets the target: the most likely one
    low, high = peak, ceiling  # P falls from the peak to the ceiling: the largest claim that still meets the target
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if p(middle) >= target else (low, middle)
    return low


def screening_claim(tps: float, runs: Sequence[float], *, floor: float, target: float) -> float:
    """What one trial of the search (one boot, its ``runs`` timed runs) is worth by the estimator's own law of a
    re-run: the TPS one re-run reaches with probability ``target``, the law a Student t on the runs' spread
    (never below ``floor``; the floor alone, as a normal, for a single run). A screening figure that ranks the
    candidates for promotion (a fast configuration whose runs scatter ranks below a steady one it barely beats):
    one boot cannot measure a boot's noise, so it is no claim and carries no odds."""
    logs = [math.log(r) for r in runs if r > 0]
    spread = statistics.stdev(logs) * math.sqrt(1 + 1 / len(logs)) if len(logs) > 1 else 0.0
    law = Law(scale=max(spread, floor), df=len(logs) - 1 if len(logs) > 1 else math.inf)
    return tps * math.exp(law.quantile(1 - target))


def claim_for(
    fitted: Fit,
    key: Hashable,
    *,
    gate: float | None,
    target: float,
    machine: MachineTerm | None = None,
    offset: ClientOffset | None = None,
) -> Claim:
    """The claim of one configuration of ``fitted`` (see the module's docstring for the rule); ``machine``: its
    odds are of the organisers' re-run, a later run on another machine (else a screening figure, within the
    run); ``offset``: the re-run is timed by the organisers' client, which reads this far from the one the boots
    were timed by."""
    level, spread = fitted.levels[key], fitted.spreads[key]
    p_ppl = 0.0 if gate is None else chance_under_gate(level.ppls, gate=gate, sd=fitted.ppl_sd, df=fitted.ppl_df)
    ceiling = math.exp(level.public)  # what was measured: never raised by an offset, however it reads
    shift = offset.log_mean if offset else 0.0
    within = [offset.part()] if offset else []
    parts = [*within, *([machine.part()] if machine else [])]
    bounded = machine is not None  # the odds acted on: the run's own noise at its upper bound (module docstring)
    law = fitted.law(key, extra=parts, bounded=bounded)
    claim = ceiling
    if law is not None:
        claim = _claim_rule(
            lambda c: (fitted.p_within(key, c, extra=parts, shift=shift, bounded=bounded) or 0.0) * p_ppl,
            level=level.heldout + shift,
            ceiling=ceiling,
            target=target,
        )
    p_tps = fitted.p_within(key, claim, extra=parts, shift=shift, bounded=bounded)
    p_verified = None if p_tps is None else p_tps * p_ppl
    # what the P would be within the run, or at a known machine term: estimates beside the decision, not bounded
    in_run = fitted.p_within(key, claim, extra=within, shift=shift)
    at_machine = (
        (sd, fitted.p_within(key, claim, extra=[*within, (sd**2, math.inf)], shift=shift)) for sd in MACHINE_TERMS
    )
    rerun = (None, None) if law is None else law.interval(level.heldout + shift)
    return Claim(
        trial_number=level.trial_number,
        boots=level.boots,
        claim=claim,
        public=ceiling,
        heldout=math.exp(level.heldout),
        rerun_low=rerun[0],
        rerun_high=rerun[1],
        p_verified=p_verified,
        p_tps=p_tps,
        p_ppl=p_ppl,
        p_within_run=None if in_run is None else in_run * p_ppl,
        machine=machine,
        df=None if law is None else law.df,
        offset=offset,
        spread=spread,
        own_noise=not fitted.shared,
        unmeasured=None if law is not None else _unmeasured(spread, level.boots),
        meets=p_verified is not None and p_verified >= target,
        target=target,
        ppl=level.ppl,
        ppl_tol=Z * fitted.ppl_sd * level.ppl,
        gate=gate,
        ppl_over_gate=gate is None or over_gate(level.ppl, gate),
        p_at_machine=tuple((sd, p * p_ppl) for sd, p in at_machine if p is not None),
        ceiling=_ceiling(
            fitted, key, parts=parts, shift=shift, p_ppl=p_ppl, target=target, machine=machine is not None
        ),
    )


def best_claim(claims: Sequence[Claim]) -> Claim | None:
    """The recommended point: the highest claim that meets the target under the gate; None when none does."""
    meeting = [c for c in claims if c.meets and not c.ppl_over_gate]
    return max(meeting, key=lambda c: (c.claim, -c.trial_number), default=None)
