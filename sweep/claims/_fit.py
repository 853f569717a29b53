"""The model of a run of fresh boots: each configuration's levels and the noise it is judged by (``fit``).

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

**The law a decision is taken on** (``bounded``). That Student t is the re-run's law averaged over what the
noise might be, honest over all the runs it is computed for; but a point is recommended when its P passes
the target, and among runs of few degrees of freedom P passes it mostly where the boots happened to read
steadier than the configuration is: over the points that pass, such a P reads above the truth. So the odds
acted on (the organisers' re-run's, ``sweep.claims._claim``) take the run's own noise (``s^2``'s parts, the
level's error in them) at the upper end of its 90% interval, ``s^2 df / chi2_df(0.05)`` (``df`` the parts'
Welch-Satterthwaite degrees of freedom), as known; the other parts (the machine term, a client's offset)
keep the degrees of freedom they carry. Such a P is a 95% lower bound as far as the run's noise goes: a
point is recommended where its boots show, at that confidence, that it reaches the target, and P reads
below the truth where the noise rests on few degrees of freedom (more boots lift it).

**Another figure, the same law.** The fit models whatever a boot reads (``Reading``): by default its TPS
(``tps_reading``: the held-out run and the public one, in their order), or one reading a boot of another figure, as
a serving claim reads a load level's goodput and its SLO percentile over the bound (``sweep.claims._serving``): one
law per figure, a boot's noise on ``n - 1`` degrees of freedom a configuration, the re-run's Student t around the
fitted level, the floor below it. The level's fields keep the TPS's names (``heldout``, ``heldout_tps``) whatever
the figure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from scipy import special, stats

from sweep.judgement import pooled_log_sd, tps_band
from sweep.store import BootRecord

__all__ = ["HETEROGENEITY", "INTERVAL", "Fit", "Law", "Level", "Reading", "Spread", "fit", "tps_reading"]

INTERVAL = 0.90  # the two-sided coverage of every interval reported
HETEROGENEITY = 0.05  # Bartlett's test at this level: configurations whose noise differs are judged apart
# A decision's noise: the run's own, at the upper end of its 90% interval (one-sided 95%)
UPPER = 0.5 + INTERVAL / 2
_LOW, _HIGH = tps_band()


def _trial(boot: BootRecord) -> Hashable:
    return boot.trial_number


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One boot's reading of the figure a fit models (positive: the fit takes its log): ``heldout``, what a private
    re-run would read; ``public`` and ``first``, the boot's other run of it and which of the two ran first (None:
    one reading a boot, fitted on it alone)."""

    heldout: float
    public: float | None = None
    first: str | None = None


def tps_reading(boot: BootRecord) -> Reading | None:
    """A boot's TPS: its held-out run's and its public run's, in the order they ran (a boot stored before boots
    timed both: its held-out run alone); None where the boot did not measure it (with its PPL)."""
    if boot.measured:
        return Reading(heldout=boot.tps or 1.0, public=boot.public_tps, first=boot.first)
    if boot.status == "complete" and boot.tps is not None and boot.ppl is not None and boot.first is None:
        return Reading(heldout=boot.tps)
    return None


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

    def interval(self, centre: float) -> tuple[float, float]:
        """Its 90% interval around ``centre`` (a log figure), on the figure's own scale."""
        q = self.quantile(0.5 + INTERVAL / 2)
        return math.exp(centre - q), math.exp(centre + q)


def _welch(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance estimates (variance, its df)."""
    total = sum(v for v, _ in parts)
    den = sum(v * v / df for v, df in parts if v > 0 and not math.isinf(df))
    if den == 0:
        return min(df for _, df in parts)
    return total * total / den


def _bounded(parts: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Variance parts (variance, df) a run's boots measured, as one part at the upper end of their sum's 90% interval
    (one-sided ``UPPER``; the sum's degrees of freedom by Welch-Satterthwaite), taken as known: the
    noise a decision on P is taken at, so that the P which passes a threshold is not the one of boots that happened
    to read steady (see the module's docstring)."""
    total, df = sum(v for v, _ in parts), _welch(parts)
    if total == 0 or math.isinf(df):
        return total, math.inf
    return total * df / float(stats.chi2.ppf(1 - UPPER, df)), math.inf


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

    def error_parts(self, key: Hashable, *, rerun: bool, known: bool = False) -> list[tuple[float, float]]:
        """The variance parts (variance, its degrees of freedom) of one re-run's log TPS around the fitted level
        (``rerun``), or of the level's own error; ``known``: as infinitely many boots would leave them, the level's
        error gone and the noise known at the value measured (infinite degrees of freedom)."""
        level, spread = self.levels[key], self.spreads[key]
        n, k = (math.inf if known else level.boots), 1.0 if rerun else 0.0
        gamma = ((level.order_mean + 1) / 2) ** 2 / self.sxx if self.sxx > 0 and not known else 0.0
        df_y, df_d = (math.inf, math.inf) if known else (spread.df_y, spread.df_d)
        return [(spread.s_y**2 * (k + 1 / n), df_y), (spread.s_d**2 * ((k + 1 / n) / 4 + gamma), df_d)]

    def law(
        self,
        key: Hashable,
        *,
        rerun: bool = True,
        extra: Sequence[tuple[float, float]] = (),
        known: bool = False,
        bounded: bool = False,
    ) -> Law | None:
        """The law of one private re-run's log TPS around the fitted held-out level (``rerun``), or of the
        level's own error; ``extra``: more variance parts (variance, df), such as a re-run in another run of
        boots (``Between.part``) or timed by another client (``ClientOffset.part``); ``known``: the level known
        exactly (``error_parts``); ``bounded``: the run's own noise at its upper bound (``_bounded``: the law a
        decision is taken on). None where the noise is not measured (fewer than one degree of freedom)."""
        spread = self.spreads[key]
        if not spread.measured:
            return None
        own = self.error_parts(key, rerun=rerun, known=known)
        parts = [*(own if known or not bounded else [_bounded(own)]), *extra]
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

    def apart(self, a: Hashable, b: Hashable) -> bool:
        """Whether two configurations' held-out levels differ beyond the 90% interval of their difference; where
        either's noise is not measured, they are told apart by their levels alone."""
        la, lb = self.law(a, rerun=False), self.law(b, rerun=False)
        gap = abs(self.levels[a].heldout - self.levels[b].heldout)
        if la is None or lb is None:
            return gap > 0
        both = Law(scale=math.hypot(la.scale, lb.scale), df=_welch([(la.scale**2, la.df), (lb.scale**2, lb.df)]))
        return gap > both.quantile(0.5 + INTERVAL / 2)

    def p_within(
        self,
        key: Hashable,
        claim: float,
        *,
        extra: Sequence[tuple[float, float]] = (),
        shift: float = 0.0,
        known: bool = False,
        bounded: bool = False,
    ) -> float | None:
        """P(one re-run's TPS within 5% of ``claim``), the re-run's level moved by ``shift`` (log: another
        client's offset) and its law widened by ``extra``; ``known``: the level known exactly; ``bounded``: the
        run's own noise at its upper bound (``law``); None unmeasured."""
        law = self.law(key, extra=extra, known=known, bounded=bounded)
        if law is None:
            return None
        centre = math.log(claim) - self.levels[key].heldout - shift
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


def _orders(both: dict[Hashable, list[Reading]]) -> tuple[dict, dict, float, float]:
    """Each configuration's orders (o: +1 public first) and differences (d = log H - log P), and gamma, the
    pooled within-configuration slope of d on o, with the spread of the orders it is fitted from (Sxx)."""
    o = {n: [1.0 if r.first == "public" else -1.0 for r in rs] for n, rs in both.items()}
    d = {n: [math.log(r.heldout / (r.public or 1.0)) for r in rs] for n, rs in both.items()}
    sxx = sum((x - statistics.fmean(xs)) ** 2 for xs in o.values() for x in xs)
    sxy = sum((x - statistics.fmean(o[n])) * (v - statistics.fmean(d[n])) for n in o for x, v in zip(o[n], d[n]))
    return o, d, (sxy / sxx if sxx > 0 else 0.0), sxx


def _pooled(ss: dict[Hashable, tuple[float, float]], *, less: float = 0.0) -> tuple[float, float]:
    """The pooled sd of sums of squares (ss, df), ``less`` degrees of freedom taken; and its df."""
    df = sum(d for _, d in ss.values()) - less
    return (math.sqrt(sum(s for s, _ in ss.values()) / df) if df > 0 else 0.0), df


def fit(
    boots: Iterable[BootRecord],
    *,
    floor: float,
    key: Callable[[BootRecord], Hashable] = _trial,
    reading: Callable[[BootRecord], Reading | None] = tps_reading,
) -> Fit:
    """Fit the model to the boots ``reading`` reads (those it reads None of, failed boots among them, are left out:
    the callers count and report them); every boot fitted has its PPL. A configuration is the boots of one ``key``:
    the trial, by default; verification keys its own boots apart from a promotion's of the same trial, so that the
    two pool their noise only. ``reading``: the figure, by default the TPS (``tps_reading``); configurations whose
    boots read one figure a boot (stored before boots timed both sets, or another figure) are fitted on it alone."""
    by_key: dict[Hashable, list[tuple[BootRecord, Reading]]] = {}
    for b in boots:
        read = reading(b)
        if read is not None and b.ppl is not None:
            by_key.setdefault(key(b), []).append((b, read))
    both = {
        n: [r for _, r in pairs]
        for n, pairs in by_key.items()
        if all(r.public is not None and r.first for _, r in pairs)
    }
    o, d, gamma, sxx = _orders(both)
    gamma_df = 1 if sxx > 0 else 0
    levels: dict[Hashable, Level] = {}
    ss_y: dict[Hashable, tuple[float, float]] = {}
    ss_d: dict[Hashable, tuple[float, float]] = {}
    for n, pairs in by_key.items():
        heldout = [math.log(r.heldout) for _, r in pairs]
        if n in both:
            y = [(h + math.log(r.public or 1.0)) / 2 for h, (_, r) in zip(heldout, pairs)]
            residual = [v - gamma * x for v, x in zip(d[n], o[n])]
            delta, middle = statistics.fmean(residual), statistics.fmean(y) - gamma / 2
            ss_d[n] = (sum((r - delta) ** 2 for r in residual), len(pairs) - 1)
            public = middle - delta / 2
        else:
            y, middle, delta, public = heldout, statistics.fmean(heldout), 0.0, math.nan
        ss_y[n] = (sum((v - statistics.fmean(y)) ** 2 for v in y), len(pairs) - 1)
        levels[n] = _level(
            pairs, public=public, heldout=middle + delta / 2, order_mean=statistics.fmean(o[n]) if n in both else -1.0
        )
    spreads, pooled, shared = _spreads(levels, ss_y, ss_d, gamma_df=gamma_df)
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


def _level(pairs: list[tuple[BootRecord, Reading]], *, public: float, heldout: float, order_mean: float) -> Level:
    ppls = tuple(b.ppl for b, _ in pairs if b.ppl is not None)  # every one: fitted boots have their PPL
    return Level(
        trial_number=pairs[0][0].trial_number,
        boots=len(pairs),
        public=public,
        heldout=heldout,
        order_mean=order_mean,
        public_tps=tuple(r.public for _, r in pairs if r.public is not None),
        heldout_tps=tuple(r.heldout for _, r in pairs),
        ppl=statistics.median(ppls),
        ppls=ppls,
    )


def _spreads(
    levels: dict[Hashable, Level],
    ss_y: dict[Hashable, tuple[float, float]],
    ss_d: dict[Hashable, tuple[float, float]],
    *,
    gamma_df: int,
) -> tuple[dict[Hashable, Spread], Spread, bool]:
    """The noise each configuration is judged by: the pooled spread, or (where Bartlett's test says their noise
    differs and each one's own boots measure it) each one's own; the pooled; whether they share it."""
    # gamma uses one degree of freedom of the differences, shared by the configurations that saw both orders
    share = gamma_df / max(len(ss_d), 1)
    s_y, df_y = _pooled(ss_y)
    s_d, df_d = _pooled(ss_d, less=gamma_df)
    pooled = Spread(s_y=s_y, df_y=df_y, s_d=s_d, df_d=df_d if ss_d else math.inf)
    own = {
        n: Spread(
            s_y=math.sqrt(ss_y[n][0] / ss_y[n][1]) if ss_y[n][1] > 0 else 0.0,
            df_y=ss_y[n][1],
            s_d=math.sqrt(ss_d[n][0] / (ss_d[n][1] - share)) if ss_d[n][1] - share > 0 else 0.0,
            df_d=ss_d[n][1] - share,
        )
        for n in ss_d
    }
    if not ss_d:  # one reading a boot (another figure than TPS): each configuration's own noise is its boots' alone
        own = {
            n: Spread(s_y=math.sqrt(ss / df) if df > 0 else 0.0, df_y=df, s_d=0.0, df_d=math.inf)
            for n, (ss, df) in ss_y.items()
        }
    # judged apart only where their noise differs and each configuration's own boots measure its noise
    shared = (
        min(_bartlett(list(ss_y.values())), _bartlett(list(ss_d.values()))) >= HETEROGENEITY
        or len(own) < len(levels)
        or not all(spread.measured for spread in own.values())
    )
    alone = Spread(s_y=pooled.s_y, df_y=pooled.df_y, s_d=0.0, df_d=math.inf)  # boots that timed the held-out set only
    spreads = {n: (pooled if n in ss_d else alone) if shared else own[n] for n in levels}
    return spreads, pooled, shared
