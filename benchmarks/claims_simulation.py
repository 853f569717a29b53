"""``python -m benchmarks.claims_simulation``: are the odds of the recommended point honest where they are used?

Promotions drawn from the claims' own world, cell by cell, each taken through the tool's own path
(``sweep.claims.claims_of``): the promotion's boots screen and choose (``confirmation_pair``), a confirmation
run of the chosen point and its control gives the claim and the odds of the organisers' re-run (the machine
term in), and the point is recommended where those odds reach the target. The confirmation is sequential as
the tool runs it: ``confirm_boots`` (4) of each, then a pair at a time until the tool's own stopping rule
(``sweep.claims.stopping``, asked through ``claims_of``: ``benchmarks._draw.confirmed``) says stop (P reaches the target, its ceiling cannot, the
PPL is over the gate, or ``confirm_max_boots``, 12): optional stopping is scored. Only the **recommended** points
are scored, against the true odds of the organisers' re-run: a fresh boot's first held-out run, in a later
run, on another machine (a shift drawn from the cell's machine spread), its PPL under the gate. Those odds are
counted exactly (a normal probability for the true level and noise); the promotions themselves are sampled,
with fixed seeds.

Three tables of cells, each over a boot's noise, a run's, 1, 3 or 6 candidates (5% apart at most, one of them
three times noisier than the rest), 3 or 5 boots each, a held-out set that reads 3% slower for half of them,
every PPL near the gate:

- **right**: the organisers' machine 0, 2 or 4% from the one the boots ran on, stated by the study as its
  ``between_prior`` (a boot's noise 1, 3 or 10%, a run's 1 or 5%);
- **wrong**: the study states the default prior (1%, on its default degrees of freedom) where the organisers'
  machine reads 0.5, 1, 2 or 4 times that away; where it is 4 times, the P the claim shows at the machine term
  nearest the truth (``Claim.p_at_machine``) is what is held to the truth;
- **drift**: the prior stated right (2%), and the study's machine level moving during its runs by as much: a
  random walk (its sd over 12 boots 2%, through the promotion and the confirmation) or one step of 2%, up or
  down, at a boot drawn over the promotion and the confirmation's first boots; a run's boots are then not
  exchangeable. The organisers' machine is not the study's: its re-run reads the true level, moved by its own
  machine shift.

The wrong and drift tables take the noise where anything is recommended at all (a boot's 1 or 3%, a run's 1%:
where a boot's noise is 10% or a run's 5%, no number of boots lifts a re-run within 5% to the target, and the
right table shows nothing recommended there). For every cell with at least ``--least`` recommendations it prints
the mean predicted P, the true P, the mean claim over the true public level and the P at the machine term
nearest the truth, beside how long the confirmations ran and why they stopped, and what the promotion's own
screening figures would have said (the rule before the confirmation: the promotion's highest claim reaching the
target within its run). It exits 1 when a scored cell's predicted P exceeds its true P by more than 0.03 (where
the truth is 4 times the stated prior: when the P at the matching machine term is more than 0.03 from the
truth), or its mean claim over level exceeds 1.005.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from scipy.stats import norm

from benchmarks._draw import confirmed, drawn_boots
from benchmarks._report import emit, table
from engine.config import get_profile
from sweep.claims import MACHINE_TERMS, Claim, ConfirmationPlan, PromotionPlan, best_claim, claims_of
from sweep.judgement import (
    BETWEEN_PRIOR,
    BETWEEN_PRIOR_DF,
    DEFAULT_CONFIRM_BOOTS,
    DEFAULT_CONFIRM_MAX_BOOTS,
    DEFAULT_TARGET,
    NOISE_FLOOR,
    Gate,
    tps_band,
)
from sweep.store import BootRecord

__all__ = ["DRIFT", "RIGHT", "WRONG", "Cell", "Outcome", "Scored", "drift_path", "main", "simulate"]

GATE = 2.42
GAMMA = 0.02  # a boot's second run reads 2% faster
PPL_SD = 0.002  # a boot's PPL moves 0.2%
NOISY = 3.0  # the noisier candidate's boot noise, times the others'
CONFIRM_BOOTS, CONFIRM_MAX_BOOTS = DEFAULT_CONFIRM_BOOTS, DEFAULT_CONFIRM_MAX_BOOTS  # the study file's defaults
MAX_DIFF, MAX_CLAIM = 0.03, 1.005
# a prior wrong by up to this factor: the P shown is held to MAX_DIFF; beyond it, the P at the machine term nearest
# the truth (no P on a stated term that far off can be honest)
WRONG_BY = 2.0
# a walk's pace: its sd over a run's usual length (3 candidates x 3 boots and a baseline; a confirmation's 6 pairs)
WALK_BOOTS = 12
_LOW, _HIGH = tps_band()

Drift = Literal["walk", "step"]


def _pct(x: float) -> str:
    return f"{100 * x:g}%"


@dataclass(frozen=True)
class Cell:
    boot_sd: float
    run_sd: float
    machine_sd: float  # the organisers' machine: the sd of its log shift from the study's
    candidates: int
    boots: int
    prior: float | None = None  # the between_prior the study states (default degrees of freedom); None: machine_sd
    drift: Drift | None = None  # the study's machine level moves during its runs, by machine_sd (``drift_path``)

    @property
    def stated(self) -> float:
        return self.machine_sd if self.prior is None else self.prior

    @property
    def ratio(self) -> float:
        """The true machine term over the stated one (1 where both are 0)."""
        return 1.0 if self.machine_sd == self.stated else self.machine_sd / self.stated if self.stated else math.inf

    def label(self) -> str:
        stated = "" if self.prior is None else f" stated {_pct(self.prior)}"
        drift = "" if self.drift is None else f" {self.drift} {_pct(self.machine_sd)}"
        return (
            f"boot {_pct(self.boot_sd)} run {_pct(self.run_sd)} machine {_pct(self.machine_sd)}{stated}{drift} "
            f"{self.candidates} cand x {self.boots}"
        )


@dataclass(frozen=True)
class Scored:
    """One recommended point: the P it was shown, the true P of the organisers' re-run, its claim over level, and
    the P it shows at the machine term nearest the true one (``Claim.p_at_machine``)."""

    predicted: float
    true: float
    claim_over_level: float
    at_machine: float


@dataclass(frozen=True)
class Outcome:
    """A cell's promotions: the confirmed rule's recommendations, and the screening rule's, both scored; where and
    after how many boots of each its confirmations stopped."""

    cell: Cell
    promotions: int
    confirmed: list[Scored]
    screening: list[Scored]
    rounds: list[int] = field(default_factory=list)
    stops: Counter[str] = field(default_factory=Counter)


def _world(rng: random.Random, candidates: int) -> tuple[dict[int, tuple[float, float]], dict[int, float]]:
    """Levels 1% apart (the winner's curse needs near-equals), half of them 3% slower on the held-out prompts;
    every PPL near the gate."""
    levels, ppls = {}, {}
    for n in range(candidates):
        public = 1000.0 * (1 - 0.01 * n)
        levels[n] = (public, public * rng.choice([1.0, 0.97]))
        ppls[n] = rng.uniform(2.36, 2.415)
    return levels, ppls


def drift_path(kind: Drift | None, size: float, rng: random.Random, *, span: int, total: int) -> list[float]:
    """The study's machine level (log, from where it stood at its first boot) at each of its ``total`` boots in
    the order they run: still (None); a random walk whose sd over ``WALK_BOOTS`` boots is ``size`` (``walk``); or
    one step of ``size``, up or down, at a boot drawn uniformly after the first and before the ``span``-th
    (``step``: the promotion's boots and the confirmation's minimum)."""
    if kind is None:
        return [0.0] * total
    if kind == "walk":
        pace, level, path = size / math.sqrt(WALK_BOOTS), 0.0, [0.0]
        for _ in range(total - 1):
            level += rng.gauss(0, pace)
            path.append(level)
        return path
    at, sign = rng.randrange(1, span), rng.choice((-1.0, 1.0))
    return [0.0 if k < at else sign * size for k in range(total)]


def _true_p(claim: float, held: float, ppl: float, *, sd: float) -> float:
    """P(the organisers' re-run lands within 5% of ``claim``, its PPL under the gate), exactly."""
    centre = math.log(claim) - math.log(held)
    p_tps = norm.cdf((centre + _HIGH) / sd) - norm.cdf((centre + _LOW) / sd)
    return float(p_tps * norm.cdf((math.log(GATE) - math.log(ppl)) / PPL_SD))


def _plan(cell: Cell) -> PromotionPlan:
    return PromotionPlan(
        run_id="p1",
        trials=tuple(range(cell.candidates)),
        boots=cell.boots,
        profile=get_profile("quick"),
        target=DEFAULT_TARGET,
        noise_floor=NOISE_FLOOR,
        gate=Gate(ppl_max=GATE),
        confirm_boots=CONFIRM_BOOTS,
        between_prior=cell.stated,
        between_prior_df=BETWEEN_PRIOR_DF,
    )


def _at_machine(claim: Claim, truth: float) -> float:
    """The P the claim shows at the machine term nearest ``truth``."""
    return min(claim.p_at_machine, key=lambda entry: abs(entry[0] - truth))[1]


@dataclass(frozen=True)
class _Drawn:
    """One promotion's outcome: each rule's scored recommendation (None: none), and where its confirmation
    stopped (None: nothing to confirm)."""

    confirmed: Scored | None
    screening: Scored | None
    rounds: int | None = None
    stop: str | None = None


def _promotion(cell: Cell, rng: random.Random) -> _Drawn:
    """One promotion and its sequential confirmation, through the tool's own path."""
    levels, ppls = _world(rng, cell.candidates)
    noisy = rng.randrange(cell.candidates)
    boot_sd = {n: cell.boot_sd * (NOISY if n == noisy else 1.0) for n in levels}
    first = cell.candidates * cell.boots  # the promotion's boots; the confirmation's follow them
    pair_size = min(cell.candidates, 2)  # the chosen point and its control, where there is a runner-up
    drift = drift_path(
        cell.drift,
        cell.machine_sd,
        rng,
        span=first + pair_size * CONFIRM_BOOTS,
        total=first + pair_size * CONFIRM_MAX_BOOTS,
    )

    def boots(
        pair: dict[int, tuple[float, float]], *, rounds: int, start: int, at: int, run_id: str
    ) -> list[BootRecord]:
        return drawn_boots(
            pair,
            rounds=rounds,
            start=start,
            shift=drift[at : at + rounds * len(pair)],
            boot_sd={n: boot_sd[n] for n in pair},
            run_sd=cell.run_sd,
            gamma=GAMMA,
            ppl=ppls,
            ppl_sd=PPL_SD,
            gate=GATE,
            rng=rng,
            run_id=run_id,
        )

    promotion = boots(levels, rounds=cell.boots, start=0, at=0, run_id="p1")
    plan = _plan(cell)
    view = claims_of(plan, promotion)

    def scored(claim: Claim) -> Scored:
        n = claim.trial_number
        sd = math.sqrt(boot_sd[n] ** 2 + cell.run_sd**2 + cell.machine_sd**2)
        true = _true_p(claim.claim, levels[n][1], ppls[n], sd=sd)
        at = _at_machine(claim, cell.machine_sd) if claim.p_at_machine else math.nan
        return Scored(
            predicted=claim.p_verified or 0.0, true=true, claim_over_level=claim.claim / levels[n][0], at_machine=at
        )

    screened = best_claim(view.claims)  # the rule before the confirmation: the promotion's own figures
    before = None if screened is None else scored(screened)
    if view.choice is None:
        return _Drawn(None, before)
    chosen, control = view.choice
    pair = {n: levels[n] for n in (chosen, control) if n is not None}
    confirmation = ConfirmationPlan(
        run_id="c1",
        promotion_run="p1",
        chosen=chosen,
        control=control,
        boots=CONFIRM_BOOTS,
        max_boots=CONFIRM_MAX_BOOTS,
    )
    done, _ = confirmed(
        plan,
        promotion,
        confirmation,
        lambda rounds, start: boots(pair, rounds=rounds, start=start, at=first + start * len(pair), run_id="c1"),
    )
    stop = done.confirmation.stop if done.confirmation else None
    assert stop is not None  # ``confirmed`` returns once it stopped
    r = done.recommended
    return _Drawn(None if r is None else scored(r), before, rounds=stop.rounds, stop=stop.reason)


def _cell(job: tuple[Cell, int, int]) -> Outcome:
    cell, promotions, seed = job
    rng = random.Random(seed)
    outcome = Outcome(cell=cell, promotions=promotions, confirmed=[], screening=[])
    for _ in range(promotions):
        drawn = _promotion(cell, rng)
        outcome.confirmed.extend([drawn.confirmed] if drawn.confirmed else [])
        outcome.screening.extend([drawn.screening] if drawn.screening else [])
        if drawn.stop is not None and drawn.rounds is not None:
            outcome.rounds.append(drawn.rounds)
            outcome.stops[drawn.stop] += 1
    return outcome


_NOISE = list(itertools.product((0.01, 0.03, 0.10), (0.01, 0.05)))
_RECOMMENDING = [(0.01, 0.01), (0.03, 0.01)]  # the noise where anything is recommended at all (``right``)
_SHAPES = list(itertools.product((1, 3, 6), (3, 5)))
RIGHT = [Cell(b, r, machine, c, n) for (b, r), machine, (c, n) in itertools.product(_NOISE, (0.0, 0.02, 0.04), _SHAPES)]
WRONG = [
    Cell(b, r, BETWEEN_PRIOR * k, c, n, prior=BETWEEN_PRIOR)
    for (b, r), k, (c, n) in itertools.product(_RECOMMENDING, (0.5, 1.0, 2.0, 4.0), _SHAPES)
]
_DRIFTS: tuple[Drift, ...] = ("walk", "step")
DRIFT = [
    Cell(b, r, 0.02, c, n, drift=kind) for (b, r), kind, (c, n) in itertools.product(_RECOMMENDING, _DRIFTS, _SHAPES)
]


def simulate(cells: Iterable[Cell], *, promotions: int, seed: int, workers: int = 1) -> list[Outcome]:
    """Every cell's outcomes, the i-th cell's promotions drawn from seed ``seed + i``."""
    jobs = [(cell, promotions, seed + i) for i, cell in enumerate(cells)]
    if workers <= 1:
        return [_cell(job) for job in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_cell, jobs))


def _mean(values: Iterable[float]) -> float:
    return statistics.fmean(values)


def _held_to_term(cell: Cell) -> bool:
    """Whether the cell's prior is wrong by more than ``WRONG_BY``: no P but the one at the matching term can hold."""
    return cell.ratio > WRONG_BY


def _fails(o: Outcome) -> bool:
    got = o.confirmed
    if _mean(s.claim_over_level for s in got) > MAX_CLAIM:
        return True
    true = _mean(s.true for s in got)
    if _held_to_term(o.cell):
        return abs(_mean(s.at_machine for s in got) - true) > MAX_DIFF
    return _mean(s.predicted for s in got) - true > MAX_DIFF


def _rows(outcomes: Sequence[Outcome], *, least: int) -> tuple[list[list[str]], list[str]]:
    """A row for every cell, its figures where it recommends at least ``least`` points; what fails the targets."""
    rows, failing = [], []
    for o in outcomes:
        got, before = o.confirmed, o.screening
        screen = (
            f"{len(before)}: {_mean(s.predicted for s in before):.3f} / {_mean(s.true for s in before):.3f}"
            if len(before) >= least
            else f"{len(before)}"
        )
        stops = "/".join(str(o.stops[reason]) for reason in ("target", "ceiling", "gate", "cap"))
        ran = f"{_mean(o.rounds):.1f}" if o.rounds else "-"
        row = [o.cell.label(), f"{len(got)} of {o.promotions}"]
        if len(got) < least:
            rows.append([*row, "-", "-", "-", "-", "-", ran, stops, screen])
            continue
        predicted, true = _mean(s.predicted for s in got), _mean(s.true for s in got)
        if _fails(o):
            failing.append(o.cell.label())
        term = min(MACHINE_TERMS, key=lambda t: abs(t - o.cell.machine_sd))
        rows.append(
            [
                *row,
                f"{predicted:.3f}",
                f"{true:.3f}",
                f"{predicted - true:+.3f}",
                f"{_mean(s.claim_over_level for s in got):.4f}",
                f"{_pct(term)}: {_mean(s.at_machine for s in got):.3f}",
                ran,
                stops,
                screen,
            ]
        )
    return rows, failing


HEAD = [
    "cell",
    "recommended",
    "predicted P",
    "true P",
    "predicted - true",
    "claim / level",
    "P at nearest term",
    "boots of each",
    "stops t/c/g/cap",
    "screening rule: n: predicted / true",
]


def _summary(outcomes: Sequence[Outcome], rows: list[list[str]], failing: list[str], *, least: int) -> str:
    scored = [(o, r) for o, r in zip(outcomes, rows) if r[2] != "-"]
    held = [(o, r) for o, r in scored if not _held_to_term(o.cell)]
    termed = [(o, r) for o, r in scored if _held_to_term(o.cell)]
    parts = [f"{len(scored)} cells recommend at least {least} points"]
    if held:
        worst = max(float(r[4]) for _, r in held)
        parts.append(f"worst predicted - true {worst:+.3f} over {len(held)} (at most {MAX_DIFF:+.3f})")
    if termed:
        worst = max(
            abs(_mean(s.at_machine for s in o.confirmed) - _mean(s.true for s in o.confirmed)) for o, _ in termed
        )
        parts.append(
            f"where the truth is over {WRONG_BY:g}x the stated prior, the P at the matching term is at worst {worst:.3f} "
            f"from the truth over {len(termed)} (at most {MAX_DIFF:.3f})"
        )
    verdict = "met in every scored cell" if not failing else f"NOT met in {len(failing)}: {'; '.join(failing)}"
    return "; ".join(parts) + f" (claim / level at most {MAX_CLAIM}): {verdict}"


TABLES = {
    "right": "the study states its machine spread as it is (between_prior = the cell's machine):",
    "wrong": f"the study states the default between_prior ({_pct(BETWEEN_PRIOR)}, worth {BETWEEN_PRIOR_DF:g} degrees "
    "of freedom) where the organisers' machine reads 0.5x, 1x, 2x or 4x that away:",
    "drift": "the study states its machine spread as it is (2%), and its machine's level moves during its runs by "
    "as much (a random walk, or one step):",
}


def _cells(name: str) -> list[Cell]:
    return {"right": RIGHT, "wrong": WRONG, "drift": DRIFT}[name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.claims_simulation", description=__doc__.splitlines()[0])
    parser.add_argument("--promotions", type=int, default=400, help="promotions drawn per cell (default 400)")
    parser.add_argument("--least", type=int, default=50, help="recommendations a cell needs to be scored (50)")
    parser.add_argument("--seed", type=int, default=20261206)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tables", nargs="+", choices=list(TABLES), default=list(TABLES), help="which (all)")
    parser.add_argument("--out", type=Path, help="also write the report there, under its command line")
    args = parser.parse_args(argv)
    began = time.monotonic()
    cells = {name: _cells(name) for name in args.tables}
    every = simulate(
        [c for name in args.tables for c in cells[name]],
        promotions=args.promotions,
        seed=args.seed,
        workers=args.workers,
    )
    lines = [
        f"{sum(map(len, cells.values()))} cells x {args.promotions} promotions (seed {args.seed}); a sequential "
        f"confirmation of the chosen point and its control ({CONFIRM_BOOTS} boots of each, then a pair at a time up to "
        f"{CONFIRM_MAX_BOOTS}, stopped by the tool's rule); target P(VERIFIED) >= {DEFAULT_TARGET:g}, gate PPL {GATE}",
        "'boots of each': the confirmations' mean length at their stop; 'stops': how many stopped on the target, the "
        "ceiling, the gate, the cap; 'P at nearest term': the recommended claims' P at the machine term nearest the "
        "truth, taken as known",
    ]
    failing: list[str] = []
    for name in args.tables:
        outcomes, every = every[: len(cells[name])], every[len(cells[name]) :]
        rows, failed = _rows(outcomes, least=args.least)
        failing += failed
        lines += ["", TABLES[name], table(HEAD, rows), "", _summary(outcomes, rows, failed, least=args.least)]
    lines += ["", f"{time.monotonic() - began:.0f} s with {args.workers} worker(s)"]
    emit("\n".join(lines), out=args.out)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
