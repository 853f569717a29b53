"""The TPS to claim and how likely the organisers' private re-run is to verify it, from boots.

Every figure here comes from ``sweep.boots.BootRecord``: fresh boots of a configuration, each timing
one public run (P) and one held-out run (H) in alternating order, then PPL. The model, for the log
TPS of one timed run of configuration c in boot b::

    log TPS = L[c, set] + u[b] + gamma * [it is the boot's second run] + e

``L`` is the configuration's level on that prompt set for a boot's first run, ``u`` the boot (one
configuration's TPS moves about 10% from boot to boot on a GPU), ``gamma`` how much faster a boot's
second run reads (a server warms up), ``e`` the run's own noise. Per boot, with ``o = +1`` when the
public run came first and ``-1`` otherwise::

    y = (log P + log H) / 2 = (L_P + L_H) / 2 + gamma / 2 + u + (e_P + e_H) / 2    (order-free)
    d =  log H - log P      = (L_H - L_P)     + gamma * o  + (e_H - e_P)

``gamma`` is the pooled within-configuration slope of ``d`` on ``o`` (0 when no configuration saw
both orders); then ``L_H - L_P`` is the mean of ``d - gamma * o`` and ``(L_P + L_H) / 2`` the mean of
``y`` less ``gamma / 2``. The noise is pooled over the configurations of one run (one stack, one
machine): ``s_d^2`` (the residual variance of ``d``) is twice a run's own variance, ``s_y^2`` is the
boot's variance plus half a run's. A private re-run is a fresh boot's first run on prompts nobody
timed: ``log H_new`` follows a Student t with ``N - C - 1`` degrees of freedom (N boots, C
configurations, one for gamma) around ``L_H``, of scale::

    s = sqrt(sigma_boot^2 + sigma_run^2 + s_y^2 / n + s_d^2 / (4 n))     (n: this configuration's boots)

never below the study's noise floor. Then::

    P(VERIFIED | claim C) = P(0.95 C <= H_new <= 1.05 C) * P(PPL_new <= gate)

the PPL's part from the boots' PPLs alike (``sweep.judgement.chance_under_gate``).

All of that is fitted within one run of boots, minutes apart on one machine. A run made later (a
verification, a calibration, another lease of the machine) can find the whole machine faster or
slower. Where the study holds runs of the same configurations at the same profile after its
promotion, ``between_runs`` measures how far a configuration's held-out level moves from run to run
beyond what each run's own boots explain (``sigma_between``), and ``Claim.p_later`` is P(VERIFIED)
for a re-run in another run of boots: the claim rests on the promotion's run and the re-run on its
own, so the scale gains ``2 sigma_between^2``, with Welch-Satterthwaite degrees of freedom; the boot's
and the run's noise are then pooled over every run's boots, not the promotion's alone.

The claim is the
public level ``exp(L_P)`` (what a fresh boot's first public run reads, in the middle) when that
reaches the target P(VERIFIED); else the largest lower claim that does; when none does, the claim
of the highest P, marked as missing the target. A claim is never above ``exp(L_P)``: it reports what
was measured, never better.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from scipy import stats

from sweep.boots import BootRecord
from sweep.judgement import Noise, Z, chance_under_gate, over_gate, pooled_log_sd

__all__ = [
    "INTERVAL",
    "TPS_TOLERANCE",
    "Between",
    "Claim",
    "Fit",
    "Level",
    "best_claim",
    "between_runs",
    "claim_for",
    "fit",
    "interval",
    "study_noise",
]

TPS_TOLERANCE = 0.05  # the organisers' rule: a re-run within 5% of the reported TPS verifies
_LOW, _HIGH = math.log(1 - TPS_TOLERANCE), math.log(1 + TPS_TOLERANCE)
INTERVAL = 0.90  # the two-sided coverage of every interval reported


def _trial(boot: BootRecord) -> Hashable:
    return boot.trial_number


@dataclass(frozen=True, kw_only=True)
class Level:
    """One configuration's fitted levels (log scale) and what they rest on."""

    trial_number: int
    boots: int  # boots measured (both runs and PPL)
    public: float  # L_P: a first public run's log TPS
    heldout: float  # L_H: a first held-out run's log TPS
    public_tps: tuple[float, ...]  # the boots' public TPS, as measured
    heldout_tps: tuple[float, ...]
    ppl: float  # median of the boots' PPL
    ppls: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Fit:
    """The levels of every configuration of a run and the pooled noise."""

    levels: dict[Hashable, Level]  # by configuration: its trial number, unless fitted with another key
    gamma: float  # a boot's second run reads exp(gamma) times faster
    s_y: float
    s_d: float
    df: int  # degrees of freedom of the pooled noise (0: none measured)
    ppl_sd: float
    ppl_df: int
    floor: float

    @property
    def sigma_run(self) -> float:
        return self.s_d / math.sqrt(2)

    @property
    def sigma_boot(self) -> float:
        return math.sqrt(max(self.s_y**2 - self.sigma_run**2 / 2, 0.0))

    def level_se(self, n: int) -> float:
        """The standard error of a configuration's fitted held-out (or public) level over ``n`` boots."""
        return math.sqrt(self.s_y**2 / n + self.s_d**2 / (4 * n))

    def _within(self, n: int) -> float:
        return self.sigma_boot**2 + self.sigma_run**2 + self.level_se(n) ** 2

    def _estimated(self, n: int, between: Between | None = None) -> float:
        return math.sqrt(self._within(n) + (0.0 if between is None else 2 * between.sd**2))

    def rerun_scale(self, n: int, between: Between | None = None) -> float:
        """The spread (log scale) of one private re-run around the fitted held-out level: in the promotion's
        run of boots, or (``between``) in another one."""
        return max(self._estimated(n, between), self.floor)

    def _law(self, estimated: float, floor: float, df: float | None = None) -> Any:
        """Student t of the pooled degrees of freedom around an estimated spread; normal where the floor
        stands in (a floor is an assumption, not an estimate to widen for its few boots)."""
        df = self.df if df is None else df
        return stats.t(df) if df > 0 and estimated >= floor else stats.norm

    def rerun_law(self, n: int, between: Between | None = None) -> Any:
        if between is None or between.sd == 0.0:
            return self._law(self._estimated(n), self.floor)
        # Welch-Satterthwaite: the within-run part on the promotion's degrees of freedom, the between-run part on its own
        parts = [(self._within(n), self.df), (2 * between.sd**2, between.df)]
        df = sum(v for v, _ in parts) ** 2 / sum(v**2 / d for v, d in parts if d > 0)
        return self._law(self._estimated(n, between), self.floor, df)

    def level_interval(self, level: float, n: int) -> tuple[float, float]:
        """The 90% confidence interval of a fitted level over ``n`` boots (log scale)."""
        se, floor = self.level_se(n), self.floor / math.sqrt(n)
        half = float(self._law(se, floor).ppf(0.5 + INTERVAL / 2)) * max(se, floor)
        return level - half, level + half


def fit(boots: Iterable[BootRecord], *, floor: float, key: Callable[[BootRecord], Hashable] = _trial) -> Fit:
    """Fit the model to the measured boots (failed boots are left out: the callers count and report
    them). A configuration is the boots of one ``key``: the trial, by default; verification keys its
    own boots apart from a promotion's of the same trial, so that the two pool their noise only."""
    by_trial: dict[Hashable, list[BootRecord]] = {}
    for b in boots:
        if b.measured:
            by_trial.setdefault(key(b), []).append(b)
    o = {n: [1.0 if b.first == "public" else -1.0 for b in bs] for n, bs in by_trial.items()}
    d = {n: [math.log(b.tps / b.public_tps) for b in bs] for n, bs in by_trial.items()}  # type: ignore[operator]
    y = {n: [(math.log(b.tps) + math.log(b.public_tps)) / 2 for b in bs] for n, bs in by_trial.items()}  # type: ignore[arg-type]
    sxx = sum((x - statistics.fmean(o[n])) ** 2 for n in o for x in o[n])
    sxy = sum((x - statistics.fmean(o[n])) * (v - statistics.fmean(d[n])) for n in o for x, v in zip(o[n], d[n]))
    gamma = sxy / sxx if sxx > 0 else 0.0
    boots_n, configs = sum(len(v) for v in d.values()), len(d)
    df = boots_n - configs - (1 if sxx > 0 else 0)
    levels: dict[Hashable, Level] = {}
    squares_d = squares_y = 0.0
    for n, bs in by_trial.items():
        delta = statistics.fmean(v - gamma * x for v, x in zip(d[n], o[n]))
        middle = statistics.fmean(y[n]) - gamma / 2
        squares_d += sum((v - delta - gamma * x) ** 2 for v, x in zip(d[n], o[n]))
        squares_y += sum((v - statistics.fmean(y[n])) ** 2 for v in y[n])
        # the boots are measured: the filters keep every one, and tell the type checker so
        ppls = tuple(b.ppl for b in bs if b.ppl is not None)
        levels[n] = Level(
            trial_number=bs[0].trial_number,
            boots=len(bs),
            public=middle - delta / 2,
            heldout=middle + delta / 2,
            public_tps=tuple(b.public_tps for b in bs if b.public_tps is not None),
            heldout_tps=tuple(b.tps for b in bs if b.tps is not None),
            ppl=statistics.median(ppls),
            ppls=ppls,
        )
    s_d = math.sqrt(squares_d / df) if df > 0 else 0.0
    s_y = math.sqrt(squares_y / (boots_n - configs)) if boots_n > configs else 0.0
    ppl_sd, ppl_df = pooled_log_sd(level.ppls for level in levels.values())
    return Fit(levels=levels, gamma=gamma, s_y=s_y, s_d=s_d, df=max(df, 0), ppl_sd=ppl_sd, ppl_df=ppl_df, floor=floor)


@dataclass(frozen=True, kw_only=True)
class Claim:
    """What to report for one configuration, and how likely a private re-run verifies it."""

    trial_number: int
    boots: int
    claim: float  # the TPS to report
    public: float  # exp(L_P): a fresh boot's first public run, in the middle
    heldout: float  # exp(L_H): a fresh boot's first held-out run, in the middle
    rerun_low: float  # the 90% interval of one private re-run's TPS
    rerun_high: float
    p_verified: float  # at the claim: the TPS within 5% of it, times the PPL under the gate
    p_tps: float
    p_ppl: float
    p_later: float | None  # the same for a re-run in another run of boots (between_runs); None: not measured
    meets: bool  # p_verified reaches the study's target
    target: float
    ppl: float
    ppl_tol: float  # Z pooled boot-to-boot sd, in PPL units
    gate: float | None
    ppl_over_gate: bool  # the median PPL over the gate (or no gate known): never recommended


def _p_tps(fitted: Fit, level: Level, claim: float, between: Between | None = None) -> float:
    scale, law = fitted.rerun_scale(level.boots, between), fitted.rerun_law(level.boots, between)
    low, high = (math.log(claim) + _LOW - level.heldout) / scale, (math.log(claim) + _HIGH - level.heldout) / scale
    return float(law.cdf(high) - law.cdf(low))


def claim_for(
    fitted: Fit, trial_number: int, *, gate: float | None, target: float, between: Between | None = None
) -> Claim:
    """The claim of one configuration of ``fitted`` (see the module's docstring for the rule); ``between``
    (``between_runs``) gives its P(VERIFIED) in another run of boots too, never the claim itself."""
    level = fitted.levels[trial_number]
    p_ppl = 0.0 if gate is None else chance_under_gate(level.ppls, gate=gate, sd=fitted.ppl_sd, df=fitted.ppl_df)
    ceiling = math.exp(level.public)
    peak = math.exp(level.heldout - (_LOW + _HIGH) / 2)  # where P(TPS within 5%) is highest

    def p(claim: float) -> float:
        return _p_tps(fitted, level, claim) * p_ppl

    if ceiling <= peak or p(ceiling) >= target:  # P rises up to the ceiling, or the ceiling already meets it
        claim = ceiling
    elif p(peak) < target:
        claim = peak  # no claim meets the target: the most likely one
    else:  # P falls from the peak to the ceiling: the largest claim that still meets the target
        low, high = peak, ceiling
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if p(middle) >= target else (low, middle)
        claim = low
    scale, q = fitted.rerun_scale(level.boots), float(fitted.rerun_law(level.boots).ppf(0.5 + INTERVAL / 2))
    return Claim(
        trial_number=trial_number,
        boots=level.boots,
        claim=claim,
        public=ceiling,
        heldout=math.exp(level.heldout),
        rerun_low=math.exp(level.heldout - q * scale),
        rerun_high=math.exp(level.heldout + q * scale),
        p_verified=p(claim),
        p_tps=_p_tps(fitted, level, claim),
        p_ppl=p_ppl,
        # the promotion's level, the noise of every run's boots (more of them than the promotion's alone)
        p_later=None if between is None else _p_tps(between.within, level, claim, between) * p_ppl,
        meets=p(claim) >= target,
        target=target,
        ppl=level.ppl,
        ppl_tol=Z * fitted.ppl_sd * level.ppl,
        gate=gate,
        ppl_over_gate=gate is None or over_gate(level.ppl, gate),
    )


@dataclass(frozen=True, kw_only=True)
class Between:
    """How far one configuration's held-out level moves from one run of boots to another (log scale),
    beyond what each run's own boots explain, and what says so."""

    sd: float
    df: int  # the runs less one (a run's shift is shared by its configurations), at most sum(configurations' runs - 1)
    configurations: int  # measured in more than one run
    runs: int  # the runs those configurations were measured in
    machines: int | None  # the machines those runs ran on (engine.provenance's boot id); None: a boot did not say
    within: Fit  # every run's boots fitted on their own levels: the boot's and run's noise pooled over all of them

    def describe(self) -> str:
        where = (
            "on machines not recorded"
            if self.machines is None
            else "all on one machine: how far another machine (another lease, the organisers') moves is not in it"
            if self.machines == 1
            else f"on {self.machines} machines"
        )
        return (
            f"a configuration's level moves {self.sd:.1%} from one run of boots to the next ({self.configurations} "
            f"configuration(s) over {self.runs} runs, {self.df} degrees of freedom; {where})"
        )


def between_runs(boots: Iterable[BootRecord], *, floor: float) -> Between | None:
    """The run-to-run spread of the configurations measured in more than one run of ``boots`` (each run
    fitted on its own levels, the noise pooled); None where no configuration was. Give boots of one
    profile and prompt sets: another set reads at another level."""
    boots = list(boots)
    fitted = fit(boots, floor=floor, key=lambda b: (b.run_id, b.trial_number))
    runs: dict[int, dict[str, Level]] = {}  # a configuration's level in each run that measured it
    for key, level in fitted.levels.items():
        run_id, trial = cast(tuple[str, int], key)
        runs.setdefault(trial, {})[run_id] = level
    squares = within = 0.0
    df, configurations, used = 0, 0, set[str]()
    for by_run in runs.values():
        if len(by_run) < 2:
            continue
        levels = list(by_run.values())
        mean = statistics.fmean(level.heldout for level in levels)
        squares += sum((level.heldout - mean) ** 2 for level in levels)
        # what each run's level would scatter by with no run-to-run shift at all: E[squares] = (R - 1)
        # sigma_between^2 + sum(se_i^2) (R - 1) / R
        within += sum(fitted.level_se(level.boots) ** 2 for level in levels) * (len(levels) - 1) / len(levels)
        df, configurations, used = df + len(levels) - 1, configurations + 1, used | set(by_run)
    if not df:
        return None
    # A run's shift is mostly the whole machine's, shared by every configuration in it: the configurations'
    # deviations are then one draw per run, not one each, so the degrees of freedom are the runs'
    sd = math.sqrt(max(squares - within, 0.0) / df)
    # runs on one machine cannot show how far another machine moves (two H200 leases: 3-8%)
    machines = {b.provenance.get("machine") for b in boots if b.run_id in used}
    return Between(
        sd=sd,
        df=min(df, len(used) - 1),
        configurations=configurations,
        runs=len(used),
        machines=None if None in machines else len(machines),
        within=fitted,
    )


def best_claim(claims: Sequence[Claim]) -> Claim | None:
    """The recommended point: the highest claim that meets the target under the gate; None when none does."""
    meeting = [c for c in claims if c.meets and not c.ppl_over_gate]
    return max(meeting, key=lambda c: (c.claim, -c.trial_number), default=None)


def interval(fitted: Fit, key: Hashable) -> tuple[float, float, float]:
    """A configuration's fitted held-out level and its 90% confidence interval, as TPS: what the
    verdict of a verification compares with the claim."""
    level = fitted.levels[key]
    low, high = fitted.level_interval(level.heldout, level.boots)
    return math.exp(level.heldout), math.exp(low), math.exp(high)


def study_noise(records: Iterable[Any], boots: Iterable[BootRecord], *, floor: float) -> Noise:
    """How much one boot of one configuration moves, from what the study measured more than once:
    trials of the same knobs (``records``, measured to the end), and promoted candidates' boots
    (their public runs). The TPS's is never below ``floor``; with nothing measured twice the floor
    stands in alone, and the PPL is taken as exact."""
    tps: dict[str, list[float]] = {}
    ppl: dict[str, list[float]] = {}
    for r in records:
        if r.full:
            key = repr(sorted(r.knobs.items()))
            tps.setdefault(key, []).append(r.tps)
            ppl.setdefault(key, []).append(r.ppl)
    repeated = sum(1 for v in tps.values() if len(v) > 1)
    promoted: dict[tuple[str, int], list[BootRecord]] = {}
    for b in boots:
        if b.measured:
            promoted.setdefault((b.run_id, b.trial_number), []).append(b)
    # the boots are measured: the filters keep every one, and tell the type checker so
    public = [[b.public_tps for b in bs if b.public_tps is not None] for bs in promoted.values()]
    tps_sd, df = pooled_log_sd([*tps.values(), *public])
    ppl_sd, _ = pooled_log_sd([*ppl.values(), *([b.ppl for b in bs if b.ppl is not None] for bs in promoted.values())])
    if not df:
        return Noise(tps_sd=floor, ppl_sd=0.0, basis=f"no configuration measured twice: the noise floor {floor:.0%}")
    basis = (
        f"pooled over {repeated} configuration(s) measured twice and {len(promoted)} promoted candidate(s)' boots "
        f"({df} degrees of freedom)" + (f", floored at {floor:.0%}" if tps_sd < floor else "")
    )
    return Noise(tps_sd=max(tps_sd, floor), ppl_sd=ppl_sd, basis=basis)
