"""Claims of goodput: what a serving study reports for a promoted configuration, and how likely a re-run on another
machine still meets its SLO at that load (``serving_claims``).

A serving study's promotion and confirmation boot each configuration afresh, interleaved, as a TPS claim's do, and
every boot runs the study's load levels (``BootRecord.load``: one run a level). Per level, two figures of a boot
are read (``Reading``), each fitted by the claims' one model (``sweep.claims._fit``: a boot's noise pooled over the
configurations unless Bartlett's test says theirs differ, the re-run's Student t around the fitted level, the
noise floor below it) and widened by its own machine term (``sweep.claims._between``: the study's stated prior
pooled with how far that figure moved between the study's runs of boots):

- **log goodput**, the requests a second that met every bound over the run's wall time (``sweep.judgement``'s);
  a run where none met reads half a request over its wall time (a log needs a positive figure, and less than one
  request is what was seen);
- **log ratio**, the largest bounded figure at the SLO's percentile over its bound (``Slo.ratio``): at most 1
  where a run holds the SLO.

A re-run **meets the SLO at that load** when its ratio is at most 1; its odds are ``P(log ratio_new <= 0)`` under
the ratio's law, times the PPL's chance under the gate (``sweep.judgement.chance_under_gate``): ``p_verified``, the
odds that verify a serving claim. The goodput to report is the fitted level's (``exp`` of the mean log goodput),
with the 90% interval of one re-run's. Each configuration's **chosen level** is the one of the most goodput among
those whose odds reach the target, else the one of the highest odds. A claim is **recommended** when its
confirmation's odds (the machine terms in) reach the target under the gate, as a TPS claim is.

``held_load`` is the highest load a configuration holds under the SLO from the same boots: the max-load search
(``sweep.judgement.max_load``), each level decided over the configuration's boots' runs of it (a run a boot, so a
boot's noise is in the decision).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from engine.measurement import LoadLevel
from sweep.claims._between import MachineTerm, machine_term
from sweep.claims._confirm import ceiling_text
from sweep.claims._fit import Fit, Reading, fit
from sweep.judgement import BETWEEN_PRIOR, BETWEEN_PRIOR_DF, MaxLoad, Slo, chance_under_gate, max_load, over_gate
from sweep.store import BootRecord

__all__ = ["ServingClaim", "SloCeiling", "goodput_reading", "held_load", "ratio_reading", "serving_claims"]

# a run where no request met the SLO reads this many requests over its wall time: a log needs a positive figure
_NONE_MET = 0.5


def _level(boot: BootRecord, workload: str) -> LoadLevel | None:
    """The boot's run of ``workload``, where the boot measured everything (its runs, its PPL, its levels)."""
    if not boot.measured:
        return None
    return next((level for level in boot.load if level.workload == workload), None)


def goodput_reading(workload: str, slo: Slo) -> Callable[[BootRecord], Reading | None]:
    """A boot's goodput at ``workload`` under ``slo`` as a fit reads it (see the module's docstring)."""

    def read(boot: BootRecord) -> Reading | None:
        level = _level(boot, workload)
        if level is None:
            return None
        return Reading(heldout=max(sum(slo.met(r) for r in level.requests), _NONE_MET) / level.wall_s)

    return read


def ratio_reading(workload: str, slo: Slo) -> Callable[[BootRecord], Reading | None]:
    """A boot's ratio at ``workload`` of its SLO percentile to the bound (the largest over the bounds)."""

    def read(boot: BootRecord) -> Reading | None:
        level = _level(boot, workload)
        return None if level is None else Reading(heldout=slo.ratio(level))

    return read


@dataclass(frozen=True, kw_only=True)
class SloCeiling:
    """The odds infinitely many boots would give (the level known, a boot's noise known at the value measured, the
    machine term on the degrees of freedom it carries): where under the target, no number of boots reaches it."""

    p: float
    target: float

    @property
    def reaches(self) -> bool:
        return self.p >= self.target


@dataclass(frozen=True, kw_only=True)
class ServingClaim:
    """What to report for one configuration at its chosen level, and how likely a re-run meets the SLO there."""

    trial_number: int
    boots: int  # boots measured at the level
    workload: str  # the chosen level
    concurrency: int
    goodput: float  # exp of the fitted log goodput: the figure to report, requests a second under the SLO
    # None below: the noise is not measured (fewer than one degree of freedom); ``unmeasured`` says why
    goodput_low: float | None  # the 90% interval of one re-run's goodput
    goodput_high: float | None
    ratio: float  # exp of the fitted log ratio: the SLO percentile over its bound (at most 1: within it)
    ratio_low: float | None  # the 90% interval of one re-run's ratio
    ratio_high: float | None
    figures: tuple[tuple[str, float, float], ...]  # (figure, its bound, the boots' median at the percentile), in ms
    p_verified: float | None  # P(a re-run meets the SLO at this load) x P(its PPL under the gate)
    p_slo: float | None
    p_ppl: float
    p_within_run: float | None  # the same for a re-run within the claim's own run of boots (no machine term)
    machine: MachineTerm | None  # the ratio's machine term; None: a screening figure, within its run
    goodput_machine: MachineTerm | None  # the goodput's
    df: float | None  # the degrees of freedom of the re-run's ratio law
    unmeasured: str | None
    meets: bool  # p_verified reaches the target
    target: float
    ppl: float
    gate: float | None
    ppl_over_gate: bool  # the median PPL over the gate (or no gate known): never recommended
    ceiling: SloCeiling | None  # None unmeasured

    @property
    def claim(self) -> float:
        """The figure claimed: the goodput (what a confirmation chooses among its candidates by)."""
        return self.goodput

    @property
    def basis(self) -> str:
        return "organisers' re-run" if self.machine is not None else "screening, within its run"

    def level_cells(self, slo: Slo) -> list[str]:
        """The cells every table of goodput claims shows, console and markdown alike: the level, its boots, the
        goodput and its interval, the SLO's figures and ratio."""
        return [
            f"{self.workload} ({self.concurrency} in flight)",
            str(self.boots),
            f"{self.goodput:.3f}",
            self.interval_text(),
            self.figures_text(slo),
            self.ratio_text(),
        ]

    def interval_text(self) -> str:
        return "-" if self.goodput_low is None else f"{self.goodput_low:.2f}..{self.goodput_high:.2f}"

    def ratio_text(self) -> str:
        """The SLO ratio and one re-run's 90% interval as printed: "0.62 (0.55..0.70)"; "-" unmeasured."""
        return "-" if self.ratio_low is None else f"{self.ratio:.2f} ({self.ratio_low:.2f}..{self.ratio_high:.2f})"

    def ceiling_text(self) -> str:
        """The ceiling's P as printed, "<" where it is under the target; "-" unmeasured."""
        return ceiling_text(self.ceiling)

    def figures_text(self, slo: Slo) -> str:
        """Each bounded figure at the SLO's percentile, the boots' median, beside its bound: "p99 TTFT 412 ms / 1500"."""
        return ", ".join(
            f"p{slo.percentile} {name.removesuffix('_ms').upper()} {value:.0f} ms / {bound:g}"
            for name, bound, value in self.figures
        )


@dataclass(frozen=True, kw_only=True)
class _Figures:
    """One level's two fits over a run's boots and their machine terms (None: a screening, within the run)."""

    workload: str
    goodput: Fit
    ratio: Fit
    goodput_machine: MachineTerm | None
    ratio_machine: MachineTerm | None


def _workloads(boots: Sequence[BootRecord]) -> list[str]:
    """The load levels the boots ran, in the order they ran."""
    seen: dict[str, None] = {}
    for boot in boots:
        for level in boot.load:
            seen.setdefault(level.workload)
    return list(seen)


def _at_level(
    figures: _Figures, key: Hashable, boots: Sequence[BootRecord], *, slo: Slo, gate: float | None, target: float
) -> ServingClaim:
    fitted, ratio = figures.goodput, figures.ratio
    level, r_level = fitted.levels[key], ratio.levels[key]
    p_ppl = 0.0 if gate is None else chance_under_gate(level.ppls, gate=gate, sd=fitted.ppl_sd, df=fitted.ppl_df)
    goodput_parts = [figures.goodput_machine.part()] if figures.goodput_machine else []
    ratio_parts = [figures.ratio_machine.part()] if figures.ratio_machine else []
    bounded = figures.ratio_machine is not None  # the odds acted on: the run's own noise at its upper bound
    g_law = fitted.law(key, extra=goodput_parts, bounded=bounded)
    r_law = ratio.law(key, extra=ratio_parts, bounded=bounded)
    within, known = ratio.law(key, bounded=bounded), ratio.law(key, extra=ratio_parts, known=True)
    p_slo = None if r_law is None else r_law.cdf(-r_level.heldout)
    p_verified = None if p_slo is None else p_slo * p_ppl
    runs = [lv for b in boots if b.trial_number == key and (lv := _level(b, figures.workload)) is not None]
    spread = ratio.spreads[key]
    goodput_low, goodput_high = (None, None) if g_law is None else g_law.interval(level.heldout)
    ratio_low, ratio_high = (None, None) if r_law is None else r_law.interval(r_level.heldout)
    return ServingClaim(
        trial_number=level.trial_number,
        boots=level.boots,
        workload=figures.workload,
        concurrency=runs[0].concurrency,
        goodput=math.exp(level.heldout),
        goodput_low=goodput_low,
        goodput_high=goodput_high,
        ratio=math.exp(r_level.heldout),
        ratio_low=ratio_low,
        ratio_high=ratio_high,
        figures=tuple(
            (name, bound, statistics.median(lv.latency(name).at(slo.percentile) for lv in runs))
            for name, bound in slo.bounds().items()
        ),
        p_verified=p_verified,
        p_slo=p_slo,
        p_ppl=p_ppl,
        p_within_run=None if within is None else within.cdf(-r_level.heldout) * p_ppl,
        machine=figures.ratio_machine,
        goodput_machine=figures.goodput_machine,
        df=None if r_law is None else r_law.df,
        unmeasured=None
        if r_law is not None and g_law is not None
        else (
            f"no odds: the noise is not measured ({level.boots} boot(s); {spread.df_y:g} degree(s) of freedom for a "
            "boot's noise; at least one is needed)"
        ),
        meets=p_verified is not None and p_verified >= target,
        target=target,
        ppl=level.ppl,
        gate=gate,
        ppl_over_gate=gate is None or over_gate(level.ppl, gate),
        ceiling=None if known is None else SloCeiling(p=known.cdf(-r_level.heldout) * p_ppl, target=target),
    )


def _chosen(claims: Sequence[ServingClaim]) -> ServingClaim:
    """A configuration's level: the most goodput among those whose odds reach the target, else the highest odds."""
    meeting = [c for c in claims if c.meets]
    if meeting:
        return max(meeting, key=lambda c: (c.goodput, -c.concurrency))
    return max(claims, key=lambda c: (c.p_verified or 0.0, c.goodput, -c.concurrency))


def serving_claims(
    boots: Sequence[BootRecord],
    *,
    slo: Slo,
    gate: float | None,
    target: float,
    floor: float,
    runs: Sequence[BootRecord] | None = None,
    prior: float = BETWEEN_PRIOR,
    prior_df: float = BETWEEN_PRIOR_DF,
) -> dict[int, ServingClaim]:
    """The claim of goodput of every configuration of one run of ``boots`` (by trial), at its chosen level.
    ``runs``: every run's boots of these configurations at the same measure, the machine terms measured over them
    against the stated ``prior`` (on ``prior_df`` degrees of freedom): the odds are then the organisers' re-run's,
    on another machine; None: a screening figure, within the run."""
    by_trial: dict[int, list[ServingClaim]] = {}
    for workload in _workloads(boots):
        read_goodput, read_ratio = goodput_reading(workload, slo), ratio_reading(workload, slo)
        figures = _Figures(
            workload=workload,
            goodput=fit(boots, floor=floor, reading=read_goodput),
            ratio=fit(boots, floor=floor, reading=read_ratio),
            goodput_machine=None
            if runs is None
            else machine_term(runs, prior=prior, prior_df=prior_df, floor=floor, reading=read_goodput),
            ratio_machine=None
            if runs is None
            else machine_term(runs, prior=prior, prior_df=prior_df, floor=floor, reading=read_ratio),
        )
        for key in figures.goodput.levels:
            if key in figures.ratio.levels:
                claim = _at_level(figures, key, boots, slo=slo, gate=gate, target=target)
                by_trial.setdefault(claim.trial_number, []).append(claim)
    return {trial: _chosen(each) for trial, each in by_trial.items()}


def held_load(boots: Sequence[BootRecord], trial: int, slo: Slo) -> MaxLoad | None:
    """The highest concurrency ``trial`` holds under ``slo`` from its boots' load levels (``sweep.judgement.max_load``:
    each level decided over its runs, one a boot); None where fewer than two boots measured every level."""
    runs: dict[int, list[LoadLevel]] = {}
    for boot in boots:
        if boot.trial_number == trial and boot.measured:
            for level in boot.load:
                runs.setdefault(level.concurrency, []).append(level)
    if not runs or min(len(r) for r in runs.values()) < 2:
        return None
    return max_load(list(runs), lambda concurrency: runs[concurrency], slo)
