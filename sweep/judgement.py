"""Judging a trial, in one place: the gate, feasibility, the ways a trial stops early, and the front.

The bottom of ``sweep/``: it imports nothing of the package, so that the study spec, the trial
record, multi-fidelity, verification, the console, the dashboards and the benchmarks all judge by
these rules and none keeps its own copy.

- **The gate.** A study's ``Gate`` is absolute (``ppl_max``) or a ratio of the baseline trial's PPL
  (``ppl_max_ratio``); ``Gate.limit`` turns it into a PPL, from the baseline PPL it carries
  (``baseline_ppl``) or the median of those it is given (which apply: ``sweep.store.ppl_limit``).
  ``over_gate`` is the one comparison of a PPL with a gate in the project: a PPL equal to the gate
  passes, as the challenge's ``<=`` does. A gate may also hold one bucket of PPL by context length
  (``length_bucket``, ``engine.measurement``) to a ratio of the baseline trial's PPL in that bucket
  (``length_ratio``): a window that keeps the challenge's short records under the gate can still lose the
  long context. It is a search-time condition (the promotion and verification boots score the gate's own
  references, not the long texts).
- **The organisers' rule** (``TPS_TOLERANCE``, ``verifies``): a re-run VERIFIES a reported TPS when it
  lands within 5% of it with its PPL under the gate. Promotion, verification, the submission check and
  the calibration all hold a re-run to this one rule.
- **Feasibility** (``is_feasible``): measured, under a known gate (and under the length bucket's, where the
  gate holds one), and greedy-identical where the study requires it.
- **Serving SLOs** (``Slo``): latency bounds a request must meet under load (TTFT, TPOT, end-to-end, in ms,
  as bench_serving's ``--goodput`` names them); ``Slo.met`` is the one comparison (a request at a bound
  meets it, one just over does not), ``goodput`` the requests a second that met every bound, over the run's
  wall time, as bench_serving computes it; ``Slo.holds`` judges a run's percentile against a bound
  (``p99 TTFT <= X``). ``judge_serving`` is a serving study's objective and constraint: the highest goodput
  among a trial's load levels (``engine.measurement.LoadLevel``), and how far that level's percentiles stand over
  the bounds; ``serving_front`` is the one choice of a serving study's front, whoever shows it.
- **The highest load** (``max_load``): a bisection over concurrency levels, each decided over repeated runs
  (``verdict``: the one-sided Student-t upper bound of their mean ratio to the SLO's bounds at most 1), whoever ran
  them: ``sweep.serving``'s probes of a running stack, or a serving claim's fresh boots (``sweep.claims``).
- **Stops** (``GATE_STOP``, ``FRONT_STOP``): how multi-fidelity may end a trial before its full
  measurement; such a trial is never a front point.
- **The front**, noise-aware. Each ``FrontPoint`` carries the noise of its own figures: ``tps_sd``,
  the standard deviation of its TPS on a log scale (one boot's, or a mean's over several boots), and
  ``ppl_tol``, how far its PPL may move from boot to boot. ``a`` dominates ``b`` only when ``a`` is
  better beyond the noise in one objective and not worse beyond it in the other: faster means
  ``log(a.tps / b.tps) > Z * hypot(a.tps_sd, b.tps_sd)``; a lower PPL means
  ``b.ppl - a.ppl > hypot(a.ppl_tol, b.ppl_tol)``. Points that cannot be told apart in either are
  ties (``front_ties``): listed and drawn as one group, not as a trade-off. With no noise (every sd
  and tolerance 0) this is the plain Pareto dominance.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

if TYPE_CHECKING:
    from engine.measurement import LoadLevel

__all__ = [
    "BETWEEN_PRIOR",
    "BETWEEN_PRIOR_DF",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_CONFIRM_BOOTS",
    "DEFAULT_CONFIRM_MAX_BOOTS",
    "DEFAULT_TARGET",
    "FRONT_STOP",
    "GATE_STOP",
    "NOISE_FLOOR",
    "TPS_TOLERANCE",
    "Z",
    "FrontPoint",
    "Gate",
    "LevelVerdict",
    "MaxLoad",
    "Noise",
    "Served",
    "Slo",
    "StopKind",
    "chance_under_gate",
    "dominates",
    "faster",
    "front_point",
    "front_records",
    "front_ties",
    "goodput",
    "judge_serving",
    "level_goodput",
    "serving_front",
    "serving_point",
    "is_feasible",
    "lower_ppl",
    "max_load",
    "over_gate",
    "pareto_front",
    "pooled_log_sd",
    "tps_band",
    "verdict",
    "verifies",
    "within_tolerance",
]

GATE_STOP = "gate"  # Measurement.stopped: PPL over the gate, told infeasible with its TPS probe
FRONT_STOP = "front"  # cannot reach the front: stored and told PRUNED
StopKind = Literal["gate", "front"]

# The least relative spread one boot's TPS is given: a few boots that happen to agree closely say
# little about the next, and one boot's TPS moved 2-9% on the 2-core CPU, about 10% on the H200.
NOISE_FLOOR = 0.02
# The odds a claim must reach for the point to be recommended, where a study's [promotion] names none.
DEFAULT_TARGET = 0.9
# The fresh boots of the chosen point (and of its control) whose figures alone make its claim (sweep.claims)
DEFAULT_CONFIRM_BOOTS = 4
# The most boots of each that a sequential confirmation adds before it stops undecided: at 12 a re-run's law is
# within 4% of its width with the level known (sqrt(1 + 1/12)), so more boots would barely move P
DEFAULT_CONFIRM_MAX_BOOTS = 12
# How far a run on another machine reads from one of yours (sd of the log ratio), where a study states nothing
# and its own runs measure less: the challenge's measurements between allocations of its A10G read 0.7-0.96%
BETWEEN_PRIOR = 0.01
# The degrees of freedom BETWEEN_PRIOR is worth beside what a study's runs measure (sweep.claims._between): two,
# chosen, not fitted (see MachineTerm's docstring for why)
BETWEEN_PRIOR_DF = 2.0

# The organisers' rule: a re-run within 5% of the reported TPS (and under the gate) verifies it.
TPS_TOLERANCE = 0.05

# Deviations of the noise a difference must exceed to count: about 95% two-sided for a normal
# difference, so two measurements of one configuration are called a tie 19 times in 20.
Z = 2.0


@dataclass(frozen=True, kw_only=True)
class Gate:
    """Feasible means PPL <= the gate: absolute, or a ratio of the baseline trial's PPL.

    A ratio gate may carry what resolves it on a given set of PPL references: the baseline's PPL on
    them (``baseline_ppl``, where the sweep's baseline trial scored them), or the trial whose boots
    score them (``baseline_trial``: the median of its boots' PPLs)."""

    ppl_max: float | None = None
    ppl_max_ratio: float | None = None
    baseline_ppl: float | None = None
    baseline_trial: int | None = None
    # a length bucket (where it ends, in tokens) whose PPL is held to length_ratio x the baseline trial's PPL there
    length_bucket: int | None = None
    length_ratio: float | None = None

    def limit(self, baseline_ppls: Iterable[float | None] = ()) -> float | None:
        """The gate's PPL: absolute, or the ratio times the baseline's PPL on the references scored, the one it
        carries where it carries one, else the median of ``baseline_ppls`` (one measurement's, or its boots'; None:
        not measured); None while a ratio gate's baseline is unknown. Which PPLs apply: ``sweep.store.ppl_limit``."""
        if self.ppl_max is not None:
            return self.ppl_max
        if self.ppl_max_ratio is None:
            return None
        if self.baseline_ppl is not None:
            return self.baseline_ppl * self.ppl_max_ratio
        measured = [p for p in baseline_ppls if p is not None]
        return statistics.median(measured) * self.ppl_max_ratio if measured else None

    def length_limit(self, baseline_ppl: float | None) -> float | None:
        """The length bucket's PPL limit: the ratio times the baseline's PPL in that bucket (None: not measured, or
        no length bucket gated)."""
        if self.length_ratio is None or baseline_ppl is None:
            return None
        return baseline_ppl * self.length_ratio

    def describe(self, *, lengths: bool = True) -> str:
        """The gate in words; ``lengths=False``: its PPL on the references alone (what a boot scores)."""
        main = (
            f"PPL <= {self.ppl_max:g}"
            if self.ppl_max is not None
            else f"PPL <= {self.ppl_max_ratio:g} x the baseline trial's PPL"
        )
        if self.length_bucket is None or not lengths:
            return main
        return (
            f"{main}, and the PPL at context lengths up to {self.length_bucket} tokens (its length bucket) <= "
            f"{self.length_ratio:g} x the baseline trial's there"
        )


def tps_band() -> tuple[float, float]:
    """The organisers' 5% either side of a reported TPS, on the log scale: where a re-run's log TPS
    less the claim's must fall."""
    return math.log(1 - TPS_TOLERANCE), math.log(1 + TPS_TOLERANCE)


def within_tolerance(tps: float, claim: float) -> bool:
    """One re-run's TPS within 5% of the claim, as the organisers judge it."""
    return abs(tps / claim - 1) <= TPS_TOLERANCE


def verifies(*, tps: float | None, ppl: float | None, claim: float, gate: float | None) -> bool:
    """The organisers' rule for one re-run: measured, within 5% of the claim, its PPL not over a known gate."""
    if tps is None or ppl is None or gate is None:
        return False
    return within_tolerance(tps, claim) and not over_gate(ppl, gate)


def over_gate(ppl: float, gate: float) -> bool:
    """The one comparison of a PPL with the gate: over it fails, equal to it passes."""
    return ppl > gate


def is_feasible(
    *,
    ppl: float | None,
    gate: float | None,
    identity_diff: int | None,
    identity_required: bool,
    length: tuple[float | None, float | None] | None = None,
) -> bool:
    """The one feasibility rule: measured, under a known gate, under the length bucket's (``length``: its PPL and
    its limit, where the gate holds one; either unknown fails), and (where required) greedy-identical."""
    if ppl is None or gate is None:
        return False
    if length is not None:
        length_ppl, length_gate = length
        if length_ppl is None or length_gate is None or over_gate(length_ppl, length_gate):
            return False
    return not over_gate(ppl, gate) and not (identity_required and identity_diff)


class Timed(Protocol):
    """One request under load, as ``engine.bench``'s ``StreamTiming`` times it."""

    @property
    def ttft_s(self) -> float: ...
    @property
    def tpot_s(self) -> float: ...
    @property
    def latency_s(self) -> float: ...


@dataclass(frozen=True, kw_only=True)
class Slo:
    """Latency bounds in milliseconds (None: no bound on that figure); ``percentile`` is the run's percentile a
    serving study holds to them (``holds``)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    percentile: int = 99

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ValueError(f"SLO {name} must be a positive number of milliseconds, got {value!r}")
        if self.percentile not in (50, 90, 99):
            raise ValueError(f"SLO percentile must be 50, 90 or 99, got {self.percentile!r}")

    def bounds(self) -> dict[str, float]:
        """{figure: bound in ms} for the bounds set (the figures named as ``LoadLevel.latency`` names them)."""
        named = {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}
        return {k: v for k, v in named.items() if v is not None}

    def met(self, request: Timed) -> bool:
        """Whether one request met every bound: its TTFT, TPOT and latency each at most the bound."""
        seen = {"ttft_ms": request.ttft_s, "tpot_ms": request.tpot_s, "e2e_ms": request.latency_s}
        return all(1000.0 * seen[k] <= bound for k, bound in self.bounds().items())

    def holds(self, level: LoadLevel) -> bool:
        """Whether a load run keeps every bound at the SLO's percentile."""
        return all(level.latency(k).at(self.percentile) <= bound for k, bound in self.bounds().items())

    def ratio(self, level: LoadLevel) -> float:
        """The largest ratio of a bounded figure at the SLO's percentile to its bound: at most 1 where the run holds
        the SLO (what a serving study's constraint, the max-load search and a claim of goodput judge a run by)."""
        return max(level.latency(k).at(self.percentile) / bound for k, bound in self.bounds().items())

    def text(self) -> str:
        return ", ".join(
            f"p{self.percentile} {k.removesuffix('_ms').upper()} <= {v:g} ms" for k, v in self.bounds().items()
        )


def goodput(requests: Sequence[Timed], slo: Slo, *, wall_s: float) -> float:
    """Requests a second that met every bound of ``slo``, over the run's wall time (bench_serving's goodput)."""
    return sum(slo.met(r) for r in requests) / wall_s


@dataclass(frozen=True)
class Served:
    """A serving study's judgement of one trial's load levels: the level of the highest goodput, that goodput
    (the objective), and how far its percentile figures stand over the SLO's bounds (the constraint: the
    largest relative excess, <= 0 where every bound holds)."""

    level: str
    goodput: float
    excess: float


def serving_point(number: int, served: Served, *, ppl: float, feasible: bool) -> FrontPoint:
    """A serving study's trial as a point of its front: its goodput in the speed slot (one boot, one run a level:
    no noise), feasible under the gate (``feasible``) and the SLO (its best level's percentiles within bounds)."""
    return FrontPoint(number=number, tps=served.goodput, ppl=ppl, feasible=feasible and served.excess <= 0)


def level_goodput(level: LoadLevel, slo: Slo) -> float:
    """The goodput of one load run under ``slo``, from its requests and its wall time."""
    return goodput(level.requests, slo, wall_s=level.wall_s)


def judge_serving(levels: Sequence[LoadLevel], slo: Slo) -> Served | None:
    """``levels``: a measurement's load runs (``Measurement.load``); None where it has none."""
    best: Served | None = None
    for level in levels:
        value = level_goodput(level, slo)
        excess = slo.ratio(level) - 1.0
        if best is None or value > best.goodput:
            best = Served(level=level.workload, goodput=value, excess=excess)
    return best


# --- the highest load a configuration holds ---------------------------------------------------

# The one-sided confidence a level's runs must hold the SLO with (their mean ratio's upper bound at most 1)
DEFAULT_CONFIDENCE = 0.9


@dataclass(frozen=True, kw_only=True)
class LevelVerdict:
    """One level's decision: each run's largest figure-to-bound ratio, their mean's upper confidence bound, and
    whether that bound is at most 1."""

    concurrency: int
    ratios: tuple[float, ...]
    upper: float
    holds: bool


@dataclass(frozen=True, kw_only=True)
class MaxLoad:
    """The highest level that held (None: not even the lowest did), and every level's verdict in the order tested."""

    concurrency: int | None
    verdicts: tuple[LevelVerdict, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "verdicts": [asdict(v) for v in self.verdicts]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MaxLoad:
        verdicts = tuple(
            LevelVerdict(
                concurrency=int(v["concurrency"]),
                ratios=tuple(float(r) for r in v["ratios"]),
                upper=float(v["upper"]),
                holds=bool(v["holds"]),
            )
            for v in data["verdicts"]
        )
        return cls(concurrency=data["concurrency"], verdicts=verdicts)


def verdict(
    concurrency: int, runs: Sequence[LoadLevel], slo: Slo, *, confidence: float = DEFAULT_CONFIDENCE
) -> LevelVerdict:
    """The decision on one level from its repeated runs (see the module's docstring); raises ValueError for fewer
    than two runs (one run has no spread to decide with)."""
    if len(runs) < 2:
        raise ValueError(f"a level is decided over at least 2 runs, got {len(runs)}")
    ratios = tuple(slo.ratio(lv) for lv in runs)
    from scipy import stats  # imported here: the rest of judging needs no scipy

    n = len(ratios)
    upper = statistics.fmean(ratios) + float(stats.t.ppf(confidence, n - 1)) * statistics.stdev(ratios) / math.sqrt(n)
    return LevelVerdict(concurrency=concurrency, ratios=ratios, upper=upper, holds=upper <= 1.0)


def max_load(
    levels: Sequence[int],
    measure: Callable[[int], Sequence[LoadLevel]],
    slo: Slo,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
) -> MaxLoad:
    """The bisection over ``levels`` (concurrencies, any order); ``measure(c)`` runs level ``c`` its repeats."""
    ordered = sorted(set(levels))
    if not ordered:
        raise ValueError("the max-load search needs at least one level")
    tested: list[LevelVerdict] = []

    def holds(i: int) -> bool:
        tested.append(verdict(ordered[i], measure(ordered[i]), slo, confidence=confidence))
        return tested[-1].holds

    if not holds(0):
        return MaxLoad(concurrency=None, verdicts=tuple(tested))
    held, failed = 0, len(ordered)  # the highest index known to hold; the lowest known to fail (none: past the end)
    while failed - held > 1:
        middle = (held + failed) // 2
        if holds(middle):
            held = middle
        else:
            failed = middle
    return MaxLoad(concurrency=ordered[held], verdicts=tuple(tested))


def chance_under_gate(ppls: Sequence[float], *, gate: float, sd: float, df: int) -> float:
    """How likely a fresh boot's PPL is not over the gate, from these boots' PPLs and the pooled
    log-scale sd of one boot's PPL (``df`` its degrees of freedom): a Student t around their mean.
    PPLs that never moved (sd 0, or nothing to pool) are taken as exact."""
    center = statistics.fmean(math.log(p) for p in ppls)
    if sd == 0 or df == 0:
        return 0.0 if over_gate(math.exp(center), gate) else 1.0
    from scipy import stats  # imported here: the rest of judging needs no scipy

    return float(stats.t.cdf((math.log(gate) - center) / (sd * math.sqrt(1 + 1 / len(ppls))), df))


# --- noise ---------------------------------------------------------------------------------


def pooled_log_sd(groups: Iterable[Sequence[float]]) -> tuple[float, int]:
    """The pooled standard deviation of log values within groups (repeated measurements of one
    configuration each) and its degrees of freedom; (0.0, 0) when no group has two values."""
    squares, df = 0.0, 0
    for group in groups:
        logs = [math.log(v) for v in group if v > 0]
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
    return (math.sqrt(squares / df), df) if df else (0.0, 0)


@dataclass(frozen=True, kw_only=True)
class Noise:
    """How much one boot's figures of one configuration move, and what says so.

    ``tps_sd`` and ``ppl_sd`` are relative (log-scale) standard deviations of one boot's TPS and
    PPL; ``basis`` says what they were measured from (or that a floor stood in)."""

    tps_sd: float
    ppl_sd: float
    basis: str

    def point(self, *, number: int, tps: float, ppl: float, feasible: bool, boots: int = 1) -> FrontPoint:
        """A front point measured over ``boots`` boots: the noise of their mean."""
        scale = 1 / math.sqrt(max(boots, 1))
        return FrontPoint(
            number=number,
            tps=tps,
            ppl=ppl,
            feasible=feasible,
            tps_sd=self.tps_sd * scale,
            ppl_tol=Z * self.ppl_sd * ppl * scale,
        )


# --- the front ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FrontPoint:
    number: int  # the trial number
    tps: float
    ppl: float
    feasible: bool
    tps_sd: float = 0.0  # log-scale sd of this TPS (0: taken as exact)
    ppl_tol: float = 0.0  # how far this PPL may move from boot to boot, in PPL units


def faster(a: FrontPoint, b: FrontPoint) -> bool:
    """``a``'s TPS is above ``b``'s beyond their noise."""
    margin = Z * math.hypot(a.tps_sd, b.tps_sd)
    if margin == 0 or min(a.tps, b.tps) <= 0:  # exact figures, or a zero no ratio can be taken of
        return a.tps > b.tps
    return math.log(a.tps / b.tps) > margin


def lower_ppl(a: FrontPoint, b: FrontPoint) -> bool:
    """``a``'s PPL is below ``b``'s beyond their tolerances."""
    return b.ppl - a.ppl > math.hypot(a.ppl_tol, b.ppl_tol)


def dominates(a: FrontPoint, b: FrontPoint) -> bool:
    """``a`` is better than ``b`` beyond the noise in one objective and not worse beyond it in the other."""
    return (faster(a, b) or lower_ppl(a, b)) and not faster(b, a) and not lower_ppl(b, a)


def _tied(a: FrontPoint, b: FrontPoint) -> bool:
    return not (faster(a, b) or faster(b, a) or lower_ppl(a, b) or lower_ppl(b, a))


def pareto_front(points: Iterable[FrontPoint]) -> list[FrontPoint]:
    """Feasible points no other feasible point dominates, fastest first.

    Equal points do not dominate each other, so repeated measurements of one value all stay.
    """
    feasible = [p for p in points if p.feasible]
    front = [p for p in feasible if not any(dominates(q, p) for q in feasible)]
    return sorted(front, key=lambda p: (-p.tps, p.ppl, p.number))


def front_ties(front: Sequence[FrontPoint]) -> list[list[FrontPoint]]:
    """The front in groups of points that cannot be told apart (each tied to another in its group),
    fastest group first; a point alone is a group of one."""
    groups: list[list[FrontPoint]] = []
    for point in sorted(front, key=lambda p: (-p.tps, p.ppl, p.number)):
        joined = [g for g in groups if any(_tied(point, q) for q in g)]
        merged = [point, *(q for g in joined for q in g)]
        groups = [g for g in groups if g not in joined] + [sorted(merged, key=lambda p: (-p.tps, p.ppl, p.number))]
    return sorted(groups, key=lambda g: (-g[0].tps, g[0].number))


class Judged(Protocol):
    """What the front reads of a trial record: ``sweep.store.TrialRecord`` is one."""

    @property
    def trial_number(self) -> int: ...

    @property
    def feasible(self) -> bool | None: ...

    @property
    def full(self) -> bool: ...

    @property
    def tps(self) -> float | None: ...

    @property
    def ppl(self) -> float | None: ...


R = TypeVar("R", bound=Judged)


def front_records(records: Iterable[R], noise: Noise | None = None) -> list[R]:
    """The feasible, non-dominated trials measured to the end, fastest first; with ``noise``, a
    trial stays unless another beats it beyond one boot's noise."""
    by_number = {r.trial_number: r for r in records if r.full}
    points = [front_point(r, noise) for r in by_number.values()]
    return [by_number[p.number] for p in pareto_front(points)]


def front_point(record: Judged, noise: Noise | None = None) -> FrontPoint:
    """A trial measured to the end as a point of the front, with ``noise`` (exact without); raises ValueError for
    one without figures (the caller passed a trial that was not measured)."""
    tps, ppl = record.tps, record.ppl
    if tps is None or ppl is None:
        raise ValueError(f"trial {record.trial_number} has no figures to place on the front")
    if noise is None:
        return FrontPoint(number=record.trial_number, tps=tps, ppl=ppl, feasible=bool(record.feasible))
    return noise.point(number=record.trial_number, tps=tps, ppl=ppl, feasible=bool(record.feasible))


class ServedRecord(Judged, Protocol):
    """A trial a serving study judges: ``sweep.store``'s ``TrialRecord``."""

    def served(self, slo: Slo) -> Served | None: ...


SR = TypeVar("SR", bound=ServedRecord)


def serving_front(records: Iterable[SR], slo: Slo) -> list[tuple[SR, Served]]:
    """A serving study's front: goodput at each trial's best level against PPL, under the gate and the SLO, by the
    one front rule (one boot, one run a level: no noise model), the most goodput first, each with its judgement.
    Only trials measured to the end by their own boot (``full``): a copy or a PPL-memo hit would count its source's
    boot twice. The console, the exports and the dashboard all show this one."""
    judged = {r.trial_number: (r, s) for r in records if r.full and r.ppl is not None and (s := r.served(slo))}
    points = [
        serving_point(number, s, ppl=r.ppl, feasible=bool(r.feasible))
        for number, (r, s) in judged.items()
        if r.ppl is not None
    ]
    return [judged[p.number] for p in sorted(pareto_front(points), key=lambda p: (-p.tps, p.number))]
