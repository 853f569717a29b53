"""The TPS to claim and how likely the organisers' private re-run is to verify it, from boots.

Every figure here comes from ``sweep.store.BootRecord``: fresh boots of a configuration, each timing
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
both orders); ``L_H - L_P`` is the mean of ``d - gamma * o`` and ``(L_P + L_H) / 2`` the mean of
``y`` less ``gamma / 2``. ``s_y^2`` (the variance of ``y``) is the boot's variance plus half a run's,
on ``n - 1`` degrees of freedom a configuration; ``s_d^2`` (the residual variance of ``d``) is twice
a run's, on ``n - 1`` less its share of ``gamma``. Both are pooled over a run's configurations (one
stack, one machine) unless Bartlett's test says their noise differs (``HETEROGENEITY``): then each
configuration is judged by its own boots, so that a noisy configuration cannot borrow a stable one's
odds, nor the other way round.

A private re-run is a fresh boot's first run on prompts nobody timed: ``log H_new - L_H`` has the
variance of one boot and one run plus the error of the fitted level::

    s^2 = s_y^2 (1 + 1/n) + s_d^2 ((1 + 1/n) / 4 + ((o_mean + 1) / 2)^2 / Sxx)

(``o_mean`` the configuration's mean order, ``Sxx`` the spread of the orders that ``gamma`` is
fitted from). It follows a Student t whose degrees of freedom combine the two parts'
(Welch-Satterthwaite), always: the study's noise floor bounds the scale from below, never switches
the law. Where fewer than one degree of freedom is left for either part (a configuration booted
once, two boots of one configuration that ``gamma`` uses up) the noise is not measured and there is
**no** P(VERIFIED): ``Claim.p_verified`` is None and ``Claim.unmeasured`` says why. Then::

    P(VERIFIED | claim C) = P(0.95 C <= H_new <= 1.05 C) * P(PPL_new <= gate)

the PPL's part from the boots' PPLs alike (``sweep.judgement.chance_under_gate``).

All of that is fitted within one run of boots, minutes apart on one machine. A run made later (a
verification, a calibration, another lease) can find the whole machine faster or slower.
``between_runs`` measures how far a configuration's held-out level moves from run to run beyond what
each run's own boots explain, and combines it with a stated prior (``BETWEEN_PRIOR``: 4% on 2 degrees
of freedom) so that a spread on one or two degrees of freedom that happened to read 0 does not make a
later run as likely to verify as one in the promotion's own; ``Claim.p_later`` widens the re-run's
scale by ``2 sigma_between^2``.

The claim is the public level ``exp(L_P)`` (what a fresh boot's first public run reads, in the
middle) when that reaches the target P(VERIFIED); else the largest lower claim that does; when none
does, the claim of the highest P, marked as missing the target. A claim is never above ``exp(L_P)``:
it reports what was measured, never better.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

from scipy import special, stats

from sweep.judgement import Noise, Z, chance_under_gate, over_gate, pooled_log_sd, tps_band
from sweep.store import BootRecord

__all__ = [
    "BETWEEN_PRIOR",
    "HETEROGENEITY",
    "INTERVAL",
    "Between",
    "Claim",
    "ClientOffset",
    "Fit",
    "Law",
    "Level",
    "Spread",
    "best_claim",
    "between_runs",
    "claim_for",
    "fit",
    "study_noise",
]

INTERVAL = 0.90  # the two-sided coverage of every interval reported
HETEROGENEITY = 0.05  # Bartlett's test at this level: configurations whose noise differs are judged apart
# The spread between runs of boots before any is measured, and the degrees of freedom it counts as: later
# runs moved 3-4% (two H200 leases), 7.9% (vLLM on the H200) and ~10% (a shared CPU host) in the runs so far
BETWEEN_PRIOR = (0.04, 2.0)
_LOW, _HIGH = tps_band()


def _trial(boot: BootRecord) -> Hashable:
    return boot.trial_number


@dataclass(frozen=True, kw_only=True)
class Level:
    """One configuration's fitted levels (log scale) and what they rest on."""

    trial_number: int
    boots: int  # boots measured (both runs and PPL)
    public: float  # L_P: a first public run's log TPS
    heldout: float  # L_H: a first held-out run's log TPS
    order_mean: float  # the mean of o over its boots: how much of gamma's error its levels carry
    public_tps: tuple[float, ...]  # the boots' public TPS, as measured
    heldout_tps: tuple[float, ...]
    ppl: float  # median of the boots' PPL
    ppls: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Spread:
    """The noise a configuration is judged by (log scale): ``s_y`` a boot's order-free mean of its two
    runs, ``s_d`` their difference, each with its degrees of freedom."""

    s_y: float
    df_y: float
    s_d: float
    df_d: float  # math.inf: no difference to estimate (boots that timed the held-out set alone)

    @property
    def measured(self) -> bool:
        """At least one degree of freedom for each part: without, no P and no TPS verdict."""
        return self.df_y >= 1 and self.df_d >= 1

    @property
    def df(self) -> float:
        return min(self.df_y, self.df_d)

    @property
    def sigma_run(self) -> float:
        return self.s_d / math.sqrt(2)

    @property
    def sigma_boot(self) -> float:
        return math.sqrt(max(self.s_y**2 - self.sigma_run**2 / 2, 0.0))


@dataclass(frozen=True, kw_only=True)
class Law:
    """A Student t of ``df`` degrees of freedom around 0, of ``scale`` (log TPS)."""

    scale: float
    df: float

    def cdf(self, x: float) -> float:
        return float(special.stdtr(self.df, x / self.scale))  # df infinite: the normal

    def quantile(self, q: float) -> float:
        return float(special.stdtrit(self.df, q)) * self.scale

    def within(self, low: float, high: float) -> float:
        return self.cdf(high) - self.cdf(low)


def _welch(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance estimates (variance, its df)."""
    total = sum(v for v, _ in parts)
    den = sum(v * v / df for v, df in parts if v > 0 and not math.isinf(df))
    if den == 0:
        return min(df for _, df in parts)
    return total * total / den


@dataclass(frozen=True, kw_only=True)
class Fit:
    """The levels of every configuration of a run of boots and the noise each is judged by."""

    levels: dict[Hashable, Level]  # by configuration: its trial number, unless fitted with another key
    spreads: dict[Hashable, Spread]
    pooled: Spread  # over every configuration
    shared: bool  # the configurations share ``pooled``; False: each is judged by its own boots
    gamma: float  # a boot's second run reads exp(gamma) times faster
    sxx: float  # the spread of the orders gamma was fitted from (0: not fitted)
    ppl_sd: float
    ppl_df: int
    floor: float

    def _parts(self, key: Hashable, *, rerun: bool) -> list[tuple[float, float]]:
        level, spread = self.levels[key], self.spreads[key]
        n, k = level.boots, 1.0 if rerun else 0.0
        gamma = ((level.order_mean + 1) / 2) ** 2 / self.sxx if self.sxx > 0 else 0.0
        return [(spread.s_y**2 * (k + 1 / n), spread.df_y), (spread.s_d**2 * ((k + 1 / n) / 4 + gamma), spread.df_d)]

    def law(
        self, key: Hashable, *, rerun: bool = True, between: Between | None = None, offset: ClientOffset | None = None
    ) -> Law | None:
        """The law of one private re-run's log TPS around the fitted held-out level (``rerun``), or of the
        level's own error; ``between``: the re-run in another run of boots; ``offset``: timed by the organisers'
        client, whose offset from this project's is known only so well. None where the noise is not measured
        (fewer than one degree of freedom)."""
        spread = self.spreads[key]
        if not spread.measured:
            return None
        parts = self._parts(key, rerun=rerun)
        if between is not None:
            parts.append((2 * between.sd**2, between.df))
        if offset is not None:
            parts.append((offset.sd**2 / offset.rounds, offset.rounds - 1))
        scale = math.sqrt(sum(v for v, _ in parts))
        floor = self.floor if rerun else self.floor / math.sqrt(self.levels[key].boots)
        return Law(scale=max(scale, floor), df=_welch(parts))

    def level_interval(self, key: Hashable) -> tuple[float, float] | None:
        """The 90% confidence interval of a configuration's held-out level (log scale); None unmeasured."""
        law = self.law(key, rerun=False)
        if law is None:
            return None
        half, level = law.quantile(0.5 + INTERVAL / 2), self.levels[key].heldout
        return level - half, level + half

    def p_within(
        self, key: Hashable, claim: float, *, between: Between | None = None, offset: ClientOffset | None = None
    ) -> float | None:
        """P(one re-run's TPS within 5% of ``claim``); None unmeasured."""
        law = self.law(key, between=between, offset=offset)
        if law is None:
            return None
        centre = math.log(claim) - self.levels[key].heldout - (offset.log_mean if offset else 0.0)
        return law.within(centre + _LOW, centre + _HIGH)


_STILL = 1e-18  # a log-scale variance below this is rounding, not noise (a sd of 1e-9)


def _bartlett(parts: Sequence[tuple[float, float]]) -> float:
    """Bartlett's test that variances (sum of squares, df) are equal: its p-value; 1.0 where it cannot tell."""
    used = [(ss, df) for ss, df in parts if df > 0]
    if len(used) < 2:
        return 1.0
    total_df = sum(df for _, df in used)
    pooled = sum(ss for ss, _ in used) / total_df
    if pooled < _STILL:
        return 1.0
    if any(ss / df < _STILL for ss, df in used):
        return 0.0  # one configuration never moved while others did
    k = len(used)
    statistic = total_df * math.log(pooled) - sum(df * math.log(ss / df) for ss, df in used)
    correction = 1 + (sum(1 / df for _, df in used) - 1 / total_df) / (3 * (k - 1))
    return float(stats.chi2.sf(statistic / correction, k - 1))


def fit(boots: Iterable[BootRecord], *, floor: float, key: Callable[[BootRecord], Hashable] = _trial) -> Fit:
    """Fit the model to the measured boots (failed boots are left out: the callers count and report
    them). A configuration is the boots of one ``key``: the trial, by default; verification keys its
    own boots apart from a promotion's of the same trial, so that the two pool their noise only. Boots
    that timed the held-out set alone (stored before boots timed both) are fitted on it alone."""
    by_key: dict[Hashable, list[BootRecord]] = {}
    for b in boots:
        if b.measured or (b.status == "complete" and b.tps is not None and b.ppl is not None and b.first is None):
            by_key.setdefault(key(b), []).append(b)
    both = {n: bs for n, bs in by_key.items() if all(b.public_tps is not None and b.first for b in bs)}
    o = {n: [1.0 if b.first == "public" else -1.0 for b in bs] for n, bs in both.items()}
    d = {n: [math.log(b.tps / b.public_tps) for b in bs] for n, bs in both.items()}  # type: ignore[operator]
    sxx = sum((x - statistics.fmean(xs)) ** 2 for xs in o.values() for x in xs)
    sxy = sum((x - statistics.fmean(o[n])) * (v - statistics.fmean(d[n])) for n in o for x, v in zip(o[n], d[n]))
    gamma = sxy / sxx if sxx > 0 else 0.0
    gamma_df = 1 if sxx > 0 else 0
    levels: dict[Hashable, Level] = {}
    ss_y: dict[Hashable, tuple[float, float]] = {}
    ss_d: dict[Hashable, tuple[float, float]] = {}
    for n, bs in by_key.items():
        ppls = tuple(b.ppl for b in bs if b.ppl is not None)  # every one: fitted boots have their PPL
        heldout = [math.log(b.tps) for b in bs]  # type: ignore[arg-type]
        if n in both:
            y = [(h + math.log(b.public_tps)) / 2 for h, b in zip(heldout, bs)]  # type: ignore[arg-type]
            residual = [v - gamma * x for v, x in zip(d[n], o[n])]
            delta, middle = statistics.fmean(residual), statistics.fmean(y) - gamma / 2
            ss_d[n] = (sum((r - delta) ** 2 for r in residual), len(bs) - 1)
            public = middle - delta / 2
        else:
            y, middle, delta, public = heldout, statistics.fmean(heldout), 0.0, math.nan
        ss_y[n] = (sum((v - statistics.fmean(y)) ** 2 for v in y), len(bs) - 1)
        levels[n] = Level(
            trial_number=bs[0].trial_number,
            boots=len(bs),
            public=public,
            heldout=middle + delta / 2,
            order_mean=statistics.fmean(o[n]) if n in both else -1.0,
            public_tps=tuple(b.public_tps for b in bs if b.public_tps is not None),
            heldout_tps=tuple(b.tps for b in bs if b.tps is not None),
            ppl=statistics.median(ppls),
            ppls=ppls,
        )
    # gamma uses one degree of freedom of the differences, shared by the configurations that saw both orders
    share = gamma_df / max(len(ss_d), 1)
    df_y_total = sum(df for _, df in ss_y.values())
    df_d_total = sum(df for _, df in ss_d.values()) - gamma_df
    pooled = Spread(
        s_y=math.sqrt(sum(ss for ss, _ in ss_y.values()) / df_y_total) if df_y_total > 0 else 0.0,
        df_y=df_y_total,
        s_d=math.sqrt(sum(ss for ss, _ in ss_d.values()) / df_d_total) if df_d_total > 0 else 0.0,
        df_d=df_d_total if ss_d else math.inf,
    )
    own = {
        n: Spread(
            s_y=math.sqrt(ss_y[n][0] / ss_y[n][1]) if ss_y[n][1] > 0 else 0.0,
            df_y=ss_y[n][1],
            s_d=math.sqrt(ss_d[n][0] / (ss_d[n][1] - share)) if ss_d[n][1] - share > 0 else 0.0,
            df_d=ss_d[n][1] - share,
        )
        for n in ss_d
    }
    # judged apart only where their noise differs and each configuration's own boots measure its noise
    shared = (
        min(_bartlett(list(ss_y.values())), _bartlett(list(ss_d.values()))) >= HETEROGENEITY
        or len(own) < len(levels)
        or not all(spread.measured for spread in own.values())
    )
    alone = Spread(s_y=pooled.s_y, df_y=pooled.df_y, s_d=0.0, df_d=math.inf)  # boots that timed the held-out set only
    spreads = {n: (pooled if n in ss_d else alone) if shared else own[n] for n in levels}
    ppl_sd, ppl_df = pooled_log_sd(level.ppls for level in levels.values())
    return Fit(
        levels=levels,
        spreads=spreads,
        pooled=pooled,
        shared=shared,
        gamma=gamma,
        sxx=sxx,
        ppl_sd=ppl_sd,
        ppl_df=ppl_df,
        floor=floor,
    )


@dataclass(frozen=True, kw_only=True)
class ClientOffset:
    """How the organisers' TPS client (sglang's ``bench_serving``) reads beside this project's, measured on
    one server with the two alternated (``python -m benchmarks.harness_agreement --study``): the mean and
    spread of log(theirs / ours) over its rounds. Boots are timed by this project's client and the private
    re-run by theirs, so a claim's odds carry it; it is stored as the study's ``client_offset``."""

    log_mean: float
    sd: float
    rounds: int
    basis: str  # what it was measured on: the stack, the prompts, the machine

    def describe(self) -> str:
        return (
            f"the organisers' client reads {math.expm1(self.log_mean):+.1%} beside ours (sd {self.sd:.1%} over "
            f"{self.rounds} alternated rounds; {self.basis})"
        )

    def to_attr(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_attr(cls, attr: dict[str, Any]) -> ClientOffset:
        return cls(**attr)


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
    p_later: float | None  # the same for a re-run in another run of boots (between_runs); None: not measured
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

    def rerun_text(self) -> str:
        """The 90% interval of a private re-run as printed: "low..high", or "-" where the noise is not measured."""
        return "-" if self.rerun_low is None else f"{self.rerun_low:.1f}..{self.rerun_high:.1f}"

    def odds_text(self) -> str:
        """P(VERIFIED) as printed: two decimals, or "-" where the noise is not measured."""
        return "-" if self.p_verified is None else f"{self.p_verified:.2f}"


def _unmeasured(spread: Spread, boots: int) -> str:
    return (
        f"no P(VERIFIED): the noise is not measured ({boots} boot(s); {spread.df_y:g} degree(s) of freedom left for "
        f"the boot's noise, {spread.df_d:g} for the run's; at least one each is needed)"
    )


def claim_for(
    fitted: Fit,
    key: Hashable,
    *,
    gate: float | None,
    target: float,
    between: Between | None = None,
    offset: ClientOffset | None = None,
) -> Claim:
    """The claim of one configuration of ``fitted`` (see the module's docstring for the rule); ``between``
    (``between_runs``) gives its P(VERIFIED) in another run of boots too, never the claim itself; ``offset``:
    the re-run is timed by the organisers' client, which reads this far from the one the boots were timed by."""
    level, spread = fitted.levels[key], fitted.spreads[key]
    p_ppl = 0.0 if gate is None else chance_under_gate(level.ppls, gate=gate, sd=fitted.ppl_sd, df=fitted.ppl_df)
    ceiling = math.exp(level.public)  # what was measured: never raised by an offset, however it reads
    shift = offset.log_mean if offset else 0.0
    law = fitted.law(key, offset=offset)
    unmeasured = None if law is not None else _unmeasured(spread, level.boots)
    claim = ceiling
    p_tps = fitted.p_within(key, ceiling, offset=offset)
    if law is not None and p_tps is not None and p_tps * p_ppl < target:
        peak = math.exp(level.heldout + shift - (_LOW + _HIGH) / 2)  # where P(TPS within 5%) is highest

        def p(c: float) -> float:
            return fitted.p_within(key, c, offset=offset) * p_ppl  # type: ignore[operator]

        if peak < ceiling:
            if p(peak) < target:
                claim = peak  # no claim meets the target: the most likely one
            else:  # P falls from the peak to the ceiling: the largest claim that still meets the target
                low, high = peak, ceiling
                for _ in range(60):
                    middle = (low + high) / 2
                    low, high = (middle, high) if p(middle) >= target else (low, middle)
                claim = low
        p_tps = fitted.p_within(key, claim, offset=offset)
    p_verified = None if p_tps is None else p_tps * p_ppl
    q = None if law is None else law.quantile(0.5 + INTERVAL / 2)
    later = (
        None
        if between is None or law is None
        else between.within.p_within(between.key(key), claim, between=between, offset=offset)
    )
    return Claim(
        trial_number=level.trial_number,
        boots=level.boots,
        claim=claim,
        public=ceiling,
        heldout=math.exp(level.heldout),
        rerun_low=None if q is None else math.exp(level.heldout + shift - q),
        rerun_high=None if q is None else math.exp(level.heldout + shift + q),
        p_verified=p_verified,
        p_tps=p_tps,
        p_ppl=p_ppl,
        p_later=None if later is None else later * p_ppl,
        df=None if law is None else law.df,
        offset=offset,
        spread=spread,
        own_noise=not fitted.shared,
        unmeasured=unmeasured,
        meets=p_verified is not None and p_verified >= target,
        target=target,
        ppl=level.ppl,
        ppl_tol=Z * fitted.ppl_sd * level.ppl,
        gate=gate,
        ppl_over_gate=gate is None or over_gate(level.ppl, gate),
    )


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
        errors = [fitted._parts(k, rerun=False) for k in keys]
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


def best_claim(claims: Sequence[Claim]) -> Claim | None:
    """The recommended point: the highest claim that meets the target under the gate; None when none does."""
    meeting = [c for c in claims if c.meets and not c.ppl_over_gate]
    return max(meeting, key=lambda c: (c.claim, -c.trial_number), default=None)


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
