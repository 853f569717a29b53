"""How far a level moves from one run of boots to the next, and to the organisers' machine: ``MachineTerm``.

A run of boots is fitted on its own, its boots minutes apart on one machine. A run made later (a
confirmation, a verification, a calibration, another lease) can find the whole machine faster or slower,
and the organisers' re-run is a later run on another machine. ``between_runs`` measures how far a
configuration's held-out level moves from run to run beyond what each run's own boots explain; the
**machine term** that widens the odds of the organisers' re-run is an estimate of that move (the sd of the
difference of two runs) with its uncertainty: the study's stated prior ``s0`` (``[promotion] between_prior``:
how far a run on another machine reads from one of yours; default ``sweep.judgement.BETWEEN_PRIOR``, 1%,
rounded up from the challenge's own measured 0.7-0.96% between allocations of its A10G stack), worth ``nu0``
degrees of freedom (``[promotion] between_prior_df``; default ``sweep.judgement.BETWEEN_PRIOR_DF``, 2), pooled
with what the study's runs measured (``m`` on ``d`` degrees of freedom) as a scaled-inverse-chi-square update::

    s^2 = (nu0 s0^2 + d m^2) / (nu0 + d)    on nu0 + d degrees of freedom

With nothing measured it is ``s0`` on ``nu0`` degrees of freedom: a finite number, so the re-run's law (a
Student t whose degrees of freedom combine its parts') keeps the tails of a term nobody measured. Neither
part wins outright: a prior that reads high is pulled down by runs that read low, and the other way round.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from sweep.claims._fit import Fit, Reading, fit, tps_reading
from sweep.store import BootRecord

__all__ = ["Between", "MachineTerm", "between_runs", "machine_term"]


@dataclass(frozen=True, kw_only=True)
class Between:
    """How far one configuration's held-out level moves from one run of boots to another (log scale), beyond
    what each run's own boots explain; and what says so."""

    measured_sd: float  # a run's shift (0 where the runs scatter less than their boots explain)
    measured_df: int  # the runs less one (a run's shift is shared by its configurations)
    configurations: int  # measured in more than one run
    runs: int  # the runs those configurations were measured in
    machines: int | None  # the machines those runs ran on (engine.host's boot id); None: a boot did not say
    within: Fit  # every run's boots fitted on their own levels: the boot's and run's noise pooled over all of them

    def describe(self) -> str:
        where = (
            "machines not recorded"
            if self.machines is None
            else "one machine"
            if self.machines == 1
            else f"{self.machines} machines"
        )
        return (
            f"a configuration's level moved {math.sqrt(2) * self.measured_sd:.1%} between two runs of boots "
            f"({self.configurations} configuration(s) over {self.runs} runs on {where}, {self.measured_df} degrees "
            "of freedom)"
        )


def between_runs(
    boots: Iterable[BootRecord], *, floor: float, reading: Callable[[BootRecord], Reading | None] = tps_reading
) -> Between | None:
    """The run-to-run spread of the configurations measured in more than one run of ``boots`` (each run
    fitted on its own levels, the noise pooled); None where no configuration was. Give boots of one
    profile and prompt sets: another set reads at another level. ``reading``: the figure (``fit``'s), the TPS
    by default."""
    boots = list(boots)
    fitted = fit(boots, floor=floor, key=lambda b: (b.run_id, b.trial_number), reading=reading)
    runs: dict[int, dict[str, Hashable]] = {}  # a configuration's key in each run that measured it
    for key in fitted.levels:
        run_id, trial = cast(tuple[str, int], key)
        runs.setdefault(trial, {})[run_id] = key
    squares = within = 0.0
    df, configurations, used = 0, 0, set[str]()
    for by_run in runs.values():
        if len(by_run) < 2:
            continue
        keys = list(by_run.values())
        mean = statistics.fmean(fitted.levels[k].heldout for k in keys)
        squares += sum((fitted.levels[k].heldout - mean) ** 2 for k in keys)
        # what each run's level would scatter by with no run-to-run shift at all: E[squares] = (R - 1)
        # sigma_between^2 + sum(se_i^2) (R - 1) / R
        errors = [fitted.error_parts(k, rerun=False) for k in keys]
        within += sum(sum(v for v, _ in e) for e in errors) * (len(keys) - 1) / len(keys)
        df, configurations, used = df + len(keys) - 1, configurations + 1, used | set(by_run)
    if not df:
        return None
    # runs on one machine cannot show how far another machine moves (two H200 leases: 3-8%)
    machines = {b.provenance.get("machine") for b in boots if b.run_id in used}
    return Between(
        measured_sd=math.sqrt(max(squares - within, 0.0) / df),
        # A run's shift is mostly the whole machine's, shared by every configuration in it: the configurations'
        # deviations are then one draw per run, not one each, so the degrees of freedom are the runs'
        measured_df=min(df, len(used) - 1),
        configurations=configurations,
        runs=len(used),
        machines=None if None in machines else len(machines),
        within=fitted,
    )


@dataclass(frozen=True, kw_only=True)
class MachineTerm:
    """How far the organisers' re-run (a later run, on another machine) may read from a run's level: the study's
    stated prior pooled with what its own runs measured, each by the degrees of freedom it is worth (see the
    module's docstring).

    Why ``nu0`` = 2 by default: the prior is a guess from another stack's machines, and this project's own runs
    read several times further apart than it (3-4% between two H200 leases, 7.9% for vLLM on the H200, ~5% between
    a study's CPU runs and its 20 re-runs where the study measured 1-2%). At ``nu0`` = 2 the prior gives a machine
    five times its value (5% against 1%) a chance of about 4% (``P(chi2_2 <= 2 / 25)``), where ``nu0`` = 4 gives
    it 0.3% and an exact prior none; and a study's usual measurement (a promotion and its confirmation: one
    degree of freedom) counts a third of the pooled estimate, four runs more than half. A value chosen against
    that evidence, not fitted: too few machines are measured to fit it."""

    prior: float  # the study's stated sd, s0
    prior_df: float  # the degrees of freedom it is worth, nu0 (0: the measurement alone; math.inf: taken as exact)
    between: Between | None  # what its runs measured; None: one run only

    def __post_init__(self) -> None:
        if not (self.prior_df >= 0 and self.df > 0):
            raise ValueError(
                f"a machine term rests on some degrees of freedom: its prior's ({self.prior_df!r}) or a measurement's"
            )

    @property
    def measured(self) -> float | None:
        """The sd of a level's move between two runs: both runs' shifts."""
        return None if self.between is None else math.sqrt(2) * self.between.measured_sd

    @property
    def measured_df(self) -> int:
        return 0 if self.between is None else self.between.measured_df

    @property
    def df(self) -> float:
        """The pooled estimate's degrees of freedom: the prior's and the measurement's."""
        return self.prior_df + self.measured_df

    @property
    def sd(self) -> float:
        if math.isinf(self.prior_df):
            return self.prior
        measured = self.measured or 0.0
        return math.sqrt((self.prior_df * self.prior**2 + self.measured_df * measured**2) / self.df)

    def part(self) -> tuple[float, float]:
        """As a variance part of a re-run's law: the pooled variance on its pooled degrees of freedom."""
        return self.sd**2, self.df

    def describe(self) -> str:
        measured = "no later run measured it" if self.between is None else self.between.describe()
        return (
            f"machine term {self.sd:.1%} on {self.df:g} degrees of freedom: the study's between_prior "
            f"{self.prior:.1%}, worth {self.prior_df:g} degrees of freedom (an assumption), pooled with what its runs "
            f"measured ({measured})"
        )


def machine_term(
    boots: Sequence[BootRecord],
    *,
    prior: float,
    prior_df: float,
    floor: float,
    reading: Callable[[BootRecord], Reading | None] = tps_reading,
) -> MachineTerm:
    """The machine term of the configurations of ``boots`` (every run at one profile and prompt sets) for the figure
    ``reading`` reads (the TPS by default): the study's one prior, pooled with how far that figure moved."""
    return MachineTerm(prior=prior, prior_df=prior_df, between=between_runs(boots, floor=floor, reading=reading))
