"""How far a configuration's level moves from one run of boots to the next: ``between_runs``.

All of that is fitted within one run of boots, minutes apart on one machine. A run made later (a
verification, a calibration, another lease) can find the whole machine faster or slower.
``between_runs`` measures how far a configuration's held-out level moves from run to run beyond what
each run's own boots explain, and combines it with a stated prior (``BETWEEN_PRIOR``: 4% on 2 degrees
of freedom) so that a spread on one or two degrees of freedom that happened to read 0 does not make a
later run as likely to verify as one in the promotion's own; ``Claim.p_later`` widens the re-run's
scale by ``2 sigma_between^2``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import cast

from sweep.claims._fit import Fit, fit
from sweep.store import BootRecord

__all__ = ["BETWEEN_PRIOR", "Between", "between_runs"]

# The spread between runs of boots before any is measured, and the degrees of freedom it counts as: later
# runs moved 3-4% (two H200 leases), 7.9% (vLLM on the H200) and ~10% (a shared CPU host) in the runs so far
BETWEEN_PRIOR = (0.04, 2.0)


@dataclass(frozen=True, kw_only=True)
class Between:
    """How far one configuration's held-out level moves from one run of boots to another (log scale),
    beyond what each run's own boots explain, combined with the stated prior; and what says so."""

    sd: float  # the spread used: the measured one and BETWEEN_PRIOR combined
    measured_sd: float  # the runs' own estimate (0 where they scatter less than their boots explain)
    measured_df: int  # the runs less one (a run's shift is shared by its configurations)
    df: float  # of ``sd``: the measured degrees of freedom and the prior's
    configurations: int  # measured in more than one run
    runs: int  # the runs those configurations were measured in
    machines: int | None  # the machines those runs ran on (engine.provenance's boot id); None: a boot did not say
    within: Fit  # every run's boots fitted on their own levels: the boot's and run's noise pooled over all of them
    promotion_run: str  # the run whose levels the claims rest on

    def part(self) -> tuple[float, float]:
        """A re-run in another run of boots, as a variance part of its law: the two runs' shifts differ by
        ``2 sd^2``."""
        return 2 * self.sd**2, self.df

    def key(self, trial_key: Hashable) -> Hashable:
        """The key of a promoted configuration in ``within``."""
        return (self.promotion_run, trial_key)

    def describe(self) -> str:
        where = (
            "on machines not recorded"
            if self.machines is None
            else "all on one machine: how far another machine (another lease, the organisers') moves is not in it"
            if self.machines == 1
            else f"on {self.machines} machines"
        )
        prior, weight = BETWEEN_PRIOR
        return (
            f"a configuration's level moves {self.sd:.1%} from one run of boots to the next: measured "
            f"{self.measured_sd:.1%} ({self.configurations} configuration(s) over {self.runs} runs, "
            f"{self.measured_df} degrees of freedom; {where}) with a prior of {prior:.0%} on {weight:g}"
        )


def between_runs(boots: Iterable[BootRecord], *, floor: float, promotion_run: str) -> Between | None:
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
    # A run's shift is mostly the whole machine's, shared by every configuration in it: the configurations'
    # deviations are then one draw per run, not one each, so the degrees of freedom are the runs'
    measured_df = min(df, len(used) - 1)
    measured = max(squares - within, 0.0) / df
    prior, weight = BETWEEN_PRIOR
    # runs on one machine cannot show how far another machine moves (two H200 leases: 3-8%)
    machines = {b.provenance.get("machine") for b in boots if b.run_id in used}
    return Between(
        sd=math.sqrt((weight * prior**2 + measured_df * measured) / (weight + measured_df)),
        measured_sd=math.sqrt(measured),
        measured_df=measured_df,
        df=weight + measured_df,
        configurations=configurations,
        runs=len(used),
        machines=None if None in machines else len(machines),
        within=fitted,
        promotion_run=promotion_run,
    )
