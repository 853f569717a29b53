"""How far a level moves from one run of boots to the next, and to the organisers' machine: ``MachineTerm``.

A run of boots is fitted on its own, its boots minutes apart on one machine. A run made later (a
confirmation, a verification, a calibration, another lease) can find the whole machine faster or slower,
and the organisers' re-run is a later run on another machine. ``between_runs`` measures how far a
configuration's held-out level moves from run to run beyond what each run's own boots explain; the
**machine term** that widens the odds of the organisers' re-run is the larger of that (as the sd of the
difference of two runs) and the study's stated prior (``[promotion] between_prior``: how far a run on
another machine reads from one of yours; default ``sweep.judgement.BETWEEN_PRIOR``, 1%, rounded up from the challenge's
own measured 0.7-0.96% between allocations of its A10G stack). A stated prior is an assumption, and every
printout that uses it says so; runs of this project read further apart (3-4% between two H200 leases, 7.9%
for vLLM on the H200, ~10% on a shared CPU host), which a study's own later runs measure and the term then
takes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from sweep.claims._fit import Fit, fit
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
    machines: int | None  # the machines those runs ran on (engine.provenance's boot id); None: a boot did not say
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


def between_runs(boots: Iterable[BootRecord], *, floor: float) -> Between | None:
    """The run-to-run spread of the configurations measured in more than one run of ``boots`` (each run
    fitted on its own levels, the noise pooled); None where no configuration was. Give boots of one
    profile and prompt sets: another set reads at another level."""
    boots = list(boots)
    fitted = fit(boots, floor=floor, key=lambda b: (b.run_id, b.trial_number))
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
    """How far the organisers' re-run (a later run, on another machine) may read from a run's level: the larger
    of the study's stated prior and what its own runs measured (see the module's docstring)."""

    prior: float  # the study's stated sd
    between: Between | None  # what its runs measured; None: one run only

    @property
    def measured(self) -> float | None:
        """The sd of a level's move between two runs: both runs' shifts."""
        return None if self.between is None else math.sqrt(2) * self.between.measured_sd

    @property
    def sd(self) -> float:
        return max(self.prior, self.measured or 0.0)

    @property
    def assumed(self) -> bool:
        """The stated prior decides it: no run of the study measured more."""
        return self.measured is None or self.measured <= self.prior

    def part(self) -> tuple[float, float]:
        """As a variance part of a re-run's law: a stated prior is no estimate (infinite degrees of freedom)."""
        if self.assumed or self.between is None:
            return self.prior**2, math.inf
        return self.sd**2, float(self.between.measured_df)

    def describe(self) -> str:
        measured = "no later run measured" if self.between is None else self.between.describe()
        which = "the study's stated between_prior, assumed" if self.assumed else "measured by the study's own runs"
        return f"machine term {self.sd:.1%}, {which} (prior {self.prior:.1%}; {measured})"


def machine_term(boots: Sequence[BootRecord], *, prior: float, floor: float) -> MachineTerm:
    """The machine term of the configurations of ``boots`` (every run at one profile and prompt sets)."""
    return MachineTerm(prior=prior, between=between_runs(boots, floor=floor))
