"""``python -m benchmarks.cost_of_honesty``: what a recommended point that then verifies costs, three ways.

Replayed on the recorded grids (``benchmarks._surface``: each configuration's TPS and PPL, its noise, what a
trial took), 20 seeds each:

- **this tool**: the study's search (``benchmarks._replay``: the driver's own core and sampler), its promotion
  (``sweep.claims.select``), the sequential confirmation of its choice beside a control, stopped by the tool's
  own rule (``benchmarks._draw.confirmed``), and, where a point is recommended, a verification of 3 fresh boots
  judged by ``sweep.claims.judge``;
- **random search** with the same stages after it;
- **the community's method**: every configuration at full fidelity, three runs each (a boot each), the
  fastest mean under the gate claimed, then the same verification.

A boot of a run of fresh boots costs what the configuration's recorded trial took, and one more timed run (a
boot times its public and its held-out prompts). Boots are drawn from the grid's own noise (one boot's TPS
moves by the grid's pooled relative spread, a run's by ``RUN_SD``), its held-out prompts reading as its public
ones; the verification is a later run on the same machine. What a participant submits: this tool's recommendation,
and where it recommends nothing, its best claim anyway with the P it shows (``sweep.submission.choose`` with
unverified points allowed); the community's fastest mean. For each way it prints the boots and hours a seed
took, the share of seeds whose answer was recommended, VERIFIED and submitted, the P shown beside the true odds
that the organisers' one re-run passes the submission (over the submissions that show a P: its calibration),
and the hours per verified answer and per organisers' pass (what a seed costs over that share or those odds:
the cost of trying until one passes), as ratios to the community's method.
``--live STUDY`` adds one live run: the boots and hours the study's database holds (its trials, promotion,
confirmation and verification) and whether its answer verified.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import optuna
from scipy.stats import norm

from benchmarks._draw import confirmed, drawn_boots
from benchmarks._replay import full_cost_s, replay, surface_spec
from benchmarks._report import RESULTS_DIR, emit, table
from benchmarks._surface import Surface, load_surface
from sweep.claims import ConfirmationPlan, PromotionPlan, claims_of, judge, load_evidence, select
from sweep.judgement import Gate, over_gate
from sweep.search import StudySpec, load_study
from sweep.store import DEFAULT_STORAGE_URL, BootRecord, TrialRecord, open_existing
from sweep.submission import choose

__all__ = ["Seeded", "main", "replay_seed"]

GRIDS = {
    "cpu": (RESULTS_DIR / "fidelity_grid.json", "joint"),
    "gpu": (RESULTS_DIR / "vllm_h200_grid.json", "vllm-h200"),
}
RUN_SD = 0.01  # a run's noise inside a boot
VERIFY_BOOTS = 3
COMMUNITY_RUNS = 3
METHODS = ("this tool", "random search, same stages", "community: every point x 3")


@dataclass(frozen=True)
class Seeded:
    """One seed of one way: what it booted, what that took, and what a participant submits: this tool's
    recommendation (VERIFIED or not by its verification), else its best claim with the P it shows (``shown``; None
    where it shows none: the community's method), and the true odds that the organisers' one re-run verifies the
    submission (0 with none)."""

    boots: int
    seconds: float
    recommended: bool = False
    verified: bool = False
    submitted: bool = False
    shown: float | None = None
    p_organisers: float = 0.0


class _Grid:
    """The recorded truth of a grid, and fresh boots drawn from it."""

    def __init__(self, surface: Surface, spec: StudySpec) -> None:
        self.surface, self.spec = surface, spec
        self.boot_sd = max(surface.tps_rel_sd, spec.promotion.noise_floor / 2)
        baseline = surface.point(dict(zip(surface.knobs, surface.baseline)))
        gate = spec.gate.limit([baseline.ppl])
        assert gate is not None  # the grid records its baseline's PPL
        self.gate = gate

    def truth(self, knobs: dict) -> tuple[float, float]:
        point = self.surface.point({k: knobs[k] for k in self.surface.knobs})
        assert point.tps is not None and point.ppl is not None  # replayed trials name recorded points
        return point.tps, point.ppl

    def boot_s(self, knobs: dict) -> float:
        """A fresh boot of a run of boots: the configuration's recorded trial, and a second timed run."""
        trace = self.surface.traces.get(tuple(knobs[k] for k in self.surface.knobs))
        trace = trace or next(iter(self.surface.traces.values()))
        return full_cost_s(trace) + trace.timings_s["tps"]

    def trial_s(self, knobs: dict) -> float:
        trace = self.surface.traces.get(tuple(knobs[k] for k in self.surface.knobs))
        return full_cost_s(trace or next(iter(self.surface.traces.values())))

    def boots(
        self,
        knobs: dict[int, dict],
        *,
        rounds: int,
        run_id: str,
        rng: random.Random,
        claims: dict[int, float],
        start: int = 0,
    ) -> list[BootRecord]:
        levels = {n: (self.truth(k)[0],) * 2 for n, k in knobs.items()}
        drawn = drawn_boots(
            levels,
            rounds=rounds,
            start=start,
            boot_sd=self.boot_sd,
            run_sd=RUN_SD,
            ppl={n: self.truth(k)[1] for n, k in knobs.items()},
            gate=self.gate,
            rng=rng,
            run_id=run_id,
        )
        return [replace(b, claimed_tps=claims.get(b.trial_number, b.claimed_tps)) for b in drawn]


def _pass_odds(grid: _Grid, knobs: dict, claim: float) -> float:
    """The true odds that the organisers' one re-run (a fresh boot on another machine, ``between_prior`` away) lands
    within 5% of ``claim``, under the gate."""
    level, ppl = grid.truth(knobs)
    sd = math.sqrt(grid.boot_sd**2 + RUN_SD**2 + grid.spec.promotion.between_prior**2)
    centre = math.log(claim / level)
    p = norm.cdf((centre + math.log(1.05)) / sd) - norm.cdf((centre + math.log(0.95)) / sd)
    return 0.0 if over_gate(ppl, grid.gate) else float(p)


def _answer(
    grid: _Grid,
    knobs: dict,
    claim: float,
    rng: random.Random,
    *,
    beside: list[BootRecord],
    boots: int,
    seconds: float,
    shown: float | None = None,
) -> Seeded:
    """A recommended answer, verified (this tool's verification: 3 fresh boots, judged) and submitted."""
    verification = grid.boots({-1: knobs}, rounds=VERIFY_BOOTS, run_id="v1", rng=rng, claims={-1: claim})
    spec = grid.spec.promotion
    verdict = judge(verification, beside=beside, floor=spec.noise_floor, target=spec.target).verdict
    return Seeded(
        boots=boots + VERIFY_BOOTS,
        seconds=seconds + VERIFY_BOOTS * grid.boot_s(knobs),
        recommended=True,
        verified=verdict == "VERIFIED",
        submitted=True,
        shown=shown,
        p_organisers=_pass_odds(grid, knobs, claim),
    )


def _staged(grid: _Grid, spec: StudySpec, *, seed: int) -> Seeded:
    """A search of ``spec`` and this tool's stages after it."""
    rng = random.Random(seed)
    replayed = replay(spec, grid.surface, seed=seed, n_trials=spec.n_trials)
    records: list[TrialRecord] = [r.record for r in replayed if r.record is not None]
    seconds, boots = sum(r.cost_s or grid.trial_s(r.knobs) for r in replayed), sum(r.booted for r in records)
    promotion = spec.promotion
    chosen = select(spec, records)
    if not chosen:
        return Seeded(boots=boots, seconds=seconds)  # nothing feasible: nothing to submit
    knobs = {r.trial_number: r.knobs for r in chosen}
    plan = PromotionPlan(
        run_id="p1",
        trials=tuple(knobs),
        boots=promotion.boots,
        profile=spec.profile,
        target=promotion.target,
        noise_floor=promotion.noise_floor,
        gate=Gate(ppl_max=grid.gate),
        confirm_boots=promotion.confirm_boots,
        between_prior=promotion.between_prior,
        between_prior_df=promotion.between_prior_df,
    )
    promoted = grid.boots(knobs, rounds=promotion.boots, run_id="p1", rng=rng, claims={})
    seconds += sum(grid.boot_s(knobs[b.trial_number]) for b in promoted)
    boots += len(promoted)
    done = claims_of(plan, promoted)
    confirming: list[BootRecord] = []
    if done.choice is not None:
        chosen_n, control = done.choice
        pair = {n: knobs[n] for n in done.choice if n is not None and n in knobs}
        confirmation = ConfirmationPlan(
            run_id="c1",
            promotion_run="p1",
            chosen=chosen_n,
            control=control,
            boots=promotion.confirm_boots,
            max_boots=max(promotion.confirm_max_boots, promotion.confirm_boots),
        )
        done, confirming = confirmed(
            plan,
            promoted,
            confirmation,
            lambda rounds, start: grid.boots(pair, rounds=rounds, start=start, run_id="c1", rng=rng, claims={}),
        )
        seconds += sum(grid.boot_s(knobs[b.trial_number]) for b in confirming)
        boots += len(confirming)
    r = done.recommended
    if r is not None:
        return _answer(
            grid,
            knobs[r.trial_number],
            r.claim,
            rng,
            beside=[*promoted, *confirming],
            boots=boots,
            seconds=seconds,
            shown=r.p_verified,
        )
    # nothing recommended: the participant submits the tool's best claim anyway (``sweep.submit
    # --allow-unverified``: the point of the highest P it shows), unverified
    pick = choose(records, verdicts={}, claims=done.best_claims(), allow_unverified=True)
    return Seeded(
        boots=boots,
        seconds=seconds,
        submitted=True,
        shown=pick.claim.p_verified if pick.claim else None,
        p_organisers=_pass_odds(grid, pick.record.knobs, pick.tps),
    )


def _community(grid: _Grid, *, seed: int) -> Seeded:
    """Every configuration three times at full fidelity, the fastest mean under the gate claimed, verified."""
    rng = random.Random(seed)
    surface = grid.surface
    best: tuple[float, dict] | None = None
    seconds, boots = 0.0, 0
    for key, point in surface.points.items():
        if point.tps is None or point.ppl is None:
            continue
        knobs = dict(zip(surface.knobs, key))
        runs = [point.tps * math.exp(rng.gauss(0, grid.boot_sd)) for _ in range(COMMUNITY_RUNS)]
        seconds += COMMUNITY_RUNS * grid.trial_s(knobs)
        boots += COMMUNITY_RUNS
        if not over_gate(point.ppl, grid.gate) and (best is None or statistics.fmean(runs) > best[0]):
            best = (statistics.fmean(runs), knobs)
    if best is None:
        return Seeded(boots=boots, seconds=seconds)
    claim, knobs = best
    return _answer(grid, knobs, claim, rng, beside=[], boots=boots, seconds=seconds)


def replay_seed(grid: _Grid, method: str, *, seed: int) -> Seeded:
    if method == METHODS[2]:
        return _community(grid, seed=seed)
    spec = grid.spec if method == METHODS[0] else replace(grid.spec, sampler="random")
    return _staged(grid, spec, seed=seed)


def _grid(path: Path, study: str, target: float) -> _Grid:
    surface = load_surface(path)
    spec = surface_spec(load_study(study), surface)
    # the search's budget as the study states it, within the grid; the target the run asks for
    spec = replace(spec, n_trials=min(spec.n_trials, len(surface.points) + 1))
    return _Grid(surface, replace(spec, promotion=replace(spec.promotion, target=target)))


def _calibration(runs: list[Seeded]) -> str:
    """The P shown beside the organisers' true pass odds, over the submissions that show one: "shown / true"."""
    shown = [r for r in runs if r.submitted and r.shown is not None]
    if not shown:
        return "-"
    return (
        f"{statistics.fmean(r.shown or 0.0 for r in shown):.2f} / {statistics.fmean(r.p_organisers for r in shown):.2f}"
    )


def _report(name: str, grid: _Grid, seeds: int) -> str:
    rows, per = [], {}
    results = {m: [replay_seed(grid, m, seed=s) for s in range(seeds)] for m in METHODS}
    for method, runs in results.items():
        hours = statistics.fmean(r.seconds for r in runs) / 3600
        odds = statistics.fmean(r.p_organisers for r in runs)
        share = sum(r.verified for r in runs) / len(runs)
        per[method] = (hours / share if share else math.inf, hours / odds if odds else math.inf)
        rows.append(
            [
                method,
                f"{statistics.fmean(r.boots for r in runs):.1f}",
                f"{hours:.2f}",
                f"{sum(r.recommended for r in runs)}/{len(runs)}",
                f"{sum(r.verified for r in runs)}/{len(runs)}",
                f"{sum(r.submitted for r in runs)}/{len(runs)}",
                _calibration(runs),
                f"{odds:.2f}",
                _hours(per[method][0]),
                _hours(per[method][1]),
            ]
        )
    base = per[METHODS[2]]
    for row, method in zip(rows, METHODS):
        row += [_ratio(per[method][0], base[0]), _ratio(per[method][1], base[1])]
    promotion = grid.spec.promotion
    return "\n".join(
        [
            f"{name}: {len(grid.surface.points)} configurations, a boot's TPS noise {grid.boot_sd:.1%}, study "
            f"{grid.spec.name} ({grid.spec.sampler}, {grid.spec.n_trials} trials; promotion {promotion.candidates} x "
            f"{promotion.boots}, confirmation 2 x {promotion.confirm_boots} then a pair at a time up to "
            f"{max(promotion.confirm_max_boots, promotion.confirm_boots)}, target {promotion.target:g}, between_prior "
            f"{promotion.between_prior:.0%} on {promotion.between_prior_df:g} degrees of freedom); {seeds} seeds",
            table(
                [
                    "way",
                    "boots a seed",
                    "hours a seed",
                    "recommended",
                    "VERIFIED (ours)",
                    "submitted",
                    "P shown / pass",
                    "P organisers' pass",
                    "h / VERIFIED",
                    "h / organisers' pass",
                    "ratio (ours)",
                    "ratio (organisers')",
                ],
                rows,
            ),
        ]
    )


def _hours(value: float) -> str:
    return "-" if math.isinf(value) else f"{value:.2f}"


def _ratio(value: float, base: float) -> str:
    return "-" if math.isinf(value) or math.isinf(base) or not base else f"{value / base:.2f}"


def _live(study: str, storage_url: str) -> str:
    """One live run: what the study's database holds of its boots and their hours, and its verdicts."""
    storage = open_existing(storage_url)
    try:
        evidence = load_evidence(storage, study)
    finally:
        storage.close()
    trials = [r for r in evidence.records if r.booted]
    seconds = sum(r.timings.get("total", 0.0) for r in trials)
    lines = [f"live: study {study}: {len(trials)} trials booted, {seconds / 3600:.2f} h"]
    for kind, boots in evidence.boots.items():
        took = sum(b.timings.get("total", 0.0) for b in boots)
        seconds += took
        lines.append(f"  {kind}: {len(boots)} boots, {took / 3600:.2f} h")
    verdicts = ", ".join(f"trial {n} {v.verdict}" for n, v in evidence.verdicts.items()) or "none"
    recommended = evidence.claims.recommended if evidence.claims else None
    lines.append(
        f"  in all {seconds / 3600:.2f} h; recommended "
        + (f"trial {recommended.trial_number}" if recommended else "none")
        + f"; verdicts: {verdicts}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cost_of_honesty", description=__doc__.splitlines()[0])
    parser.add_argument("--grids", nargs="+", default=list(GRIDS), choices=list(GRIDS), help="default: both")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument(
        "--targets",
        nargs="+",
        type=float,
        default=[0.9, 0.8],
        help="the P(VERIFIED) a recommendation needs, one table each (default 0.9 0.8)",
    )
    parser.add_argument("--live", metavar="STUDY", help="also count one live run of this study from its database")
    parser.add_argument(
        "--storage", default=DEFAULT_STORAGE_URL, help=f"the live study's (default {DEFAULT_STORAGE_URL})"
    )
    parser.add_argument("--out", type=Path, help="also write the report there, under its command line")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # thousands of studies in memory, one a replay
    if not all(0 < t < 1 for t in args.targets):
        parser.error("--targets: each a probability between 0 and 1")
    parts = [_report(name, _grid(*GRIDS[name], t), args.seeds) for name in args.grids for t in args.targets]
    if args.live:
        parts.append(_live(args.live, args.storage))
    emit("\n\n".join(parts), out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
