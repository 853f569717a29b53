"""``python -m benchmarks.time_to_optimum``: GPU time until the best feasible configuration, before and after.

No server runs. A study (default ``joint``, its sampler replaced by the default one) is replayed on
a grid recorded with every trial's prompt timings and phases (``benchmarks/results/fidelity_grid.json``,
``python -m benchmarks.record_grid --grid fidelity``; ``--grid STUDY=PATH`` adds another, such as a
GPU grid over the ``vllm-h200`` space), twice per seed through the driver's own core
(``benchmarks._replay``):

- old: full fidelity, every proposal booted (``repeats = "allow"``, no PPL memo): the sweep before
  the no-double-measurement rules;
- new: the default: the study's fidelity (multi-fidelity where it is safe), a proposal of measured
  knobs a copy and one whose PPL-moving knobs measured over the gate a PPL-memo hit, neither booted
  (``sweep.search``).

Each trial costs what it cost when recorded (boot, warm-up, TPS run, PPL, stop), its TPS run cut
where the rule stopped it; a trial closed without a boot costs nothing. Both get the same budget of
booted trials. Per seed and mode: the seconds spent until a trial measured to the end tried a
feasible configuration within 1% of the grid's best feasible TPS (the recorded means judge), and
the configuration the study ends on, as ``sweep.run`` ends one: its promotion's best (``promoted_best``:
the study's ``[promotion]`` candidates, as ``sweep.claims.select`` picks them from the search's noisy
figures, each booted afresh with the grid's noise, the highest mean), or the search's own best where
the study promotes nothing; the search's best is reported beside it. Reported: the
ratio of the median times (old / new), the per-seed ratios paired by seed (their median and
geometric mean, over the seeds where both found the best), and how many seeds end on a best more
than 1% slower than the old sweep's. And the ceiling of the per-seed ratio (``least_time_s``): whatever
it skips, a sweep boots the baseline (its PPL sets the gate) and measures a best configuration to the
end, so the old sweep's time to the best over those two trials' recorded phases bounds what any new
rule could reach on that grid.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna

from benchmarks._efficiency import best_feasible_tps
from benchmarks._replay import Replayed, full_cost_s, replay, surface_spec
from benchmarks._report import RESULTS_DIR, emit, table
from benchmarks._surface import Surface, load_surface
from benchmarks._sweeps import load_note
from cli import command
from engine.config import KnobValue
from errors import ConfigError, DataError
from sweep.claims import select
from sweep.judgement import over_gate
from sweep.search import DEFAULT_SAMPLER, SAMPLERS, FidelitySpec, StudySpec, front_rule_for, load_study, stage_counts

__all__ = ["Outcome", "Paired", "main", "paired_ratio", "promoted_best", "slower_seeds", "time_to_best"]

GRID = RESULTS_DIR / "fidelity_grid.json"
GPU_GRID = RESULTS_DIR / "vllm_h200_grid.json"  # replayed as study vllm-h200, by default once it is recorded
SHARE = 0.99
TARGET_RATIO = 3.0
TARGET_SLOWER = 1


@dataclass(frozen=True, kw_only=True)
class GridArg:
    study: str
    path: Path


@dataclass(frozen=True, kw_only=True)
class Args:
    grids: tuple[GridArg, ...]
    sampler: str
    seeds: int
    trials: int
    stages: tuple[float, ...] | None
    processes: int
    out: Path | None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """One replayed study: when it found the best, what it ended on, what it spent."""

    time_to_best_s: float | None  # None: no trial measured to the end tried a best configuration
    boots_to_best: int | None  # booted trials until then, the baseline included
    final_best: tuple[tuple[str, KnobValue], ...] | None  # what it ends on: its fastest feasible full trial,
    # or, once promoted (promoted_best), the promotion's best
    total_s: float
    pruned: int = 0
    gate_stopped: int = 0
    copies: int = 0  # closed without a boot: the same knobs as an earlier trial
    memo_hits: int = 0  # closed without a boot: the PPL memo
    search_best: tuple[tuple[str, KnobValue], ...] | None = None  # the search's own best, where it was promoted


def time_to_best(run: list[Replayed], *, best_tps: float, share: float = SHARE) -> Outcome:
    spent, boots = 0.0, 0
    found: tuple[float, int] | None = None
    for t in run:
        spent += t.cost_s
        boots += t.record is not None and t.record.booted
        if found is None and t.record is not None and t.record.full and t.feasible and t.tps >= share * best_tps:  # type: ignore[operator]
            found = (spent, boots)
    records = [t.record for t in run if t.record is not None]
    feasible = [r for r in records if r.full and r.feasible]
    best = max(feasible, key=lambda r: (r.tps, -r.trial_number), default=None)
    return Outcome(
        time_to_best_s=found[0] if found else None,
        boots_to_best=found[1] if found else None,
        final_best=tuple(sorted(best.knobs.items())) if best else None,
        total_s=spent,
        pruned=sum(1 for r in records if r.status == "pruned" and r.booted),
        gate_stopped=sum(1 for r in records if r.gate_stopped),
        copies=sum(1 for r in records if r.reuse == "copy"),
        memo_hits=sum(1 for r in records if r.reuse == "ppl_memo"),
    )


def promoted_best(
    run: list[Replayed], spec: StudySpec, surface: Surface, *, seed: int
) -> tuple[tuple[str, KnobValue], ...] | None:
    """The configuration the replayed study ends on once promoted: ``sweep.claims.select``'s candidates
    from the search's records, each booted ``spec.promotion.boots`` times afresh, a boot's TPS the recorded
    mean times exp(N(0, sd)) with the grid's pooled relative noise, and the highest mean log TPS among them
    (what the claims rank by; their P(VERIFIED) target aside). None where nothing was promoted."""
    knobs = {t.record.trial_number: t.knobs for t in run if t.record is not None}
    chosen = select(spec, [t.record for t in run if t.record is not None])
    if not spec.promotion.candidates or not chosen:
        return None
    rng = random.Random(f"promotion {seed}")  # the same draws for both modes' candidates, seed by seed
    levels = {}
    for record in chosen:
        tps = surface.point(knobs[record.trial_number]).tps
        assert tps is not None  # a candidate was measured to the end: its configuration ran when recorded
        draws = [math.log(tps) + rng.gauss(0, surface.tps_rel_sd) for _ in range(spec.promotion.boots)]
        levels[record.trial_number] = statistics.fmean(draws)
    best = max(levels, key=lambda n: (levels[n], -n))
    return tuple(sorted(knobs[best].items()))


@dataclass(frozen=True, kw_only=True)
class Paired:
    """Old / new time to the best, seed by seed."""

    ratios: tuple[float, ...]  # per seed where both found the best, in seed order
    only_old: int  # seeds where only the old sweep found it
    only_new: int
    neither: int

    @property
    def median(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def geometric_mean(self) -> float | None:
        return math.exp(statistics.fmean(math.log(r) for r in self.ratios)) if self.ratios else None


def paired_ratio(old: Sequence[Outcome], new: Sequence[Outcome]) -> Paired:
    """The per-seed ratios old / new of the time to the best; a seed where either never found it has no ratio."""
    pairs = [(o.time_to_best_s, n.time_to_best_s) for o, n in zip(old, new, strict=True)]
    return Paired(
        ratios=tuple(o / n for o, n in pairs if o is not None and n),
        only_old=sum(o is not None and n is None for o, n in pairs),
        only_new=sum(o is None and n is not None for o, n in pairs),
        neither=sum(o is None and n is None for o, n in pairs),
    )


def slower_seeds(old: Sequence[Outcome], new: Sequence[Outcome], surface: Surface, *, share: float = SHARE) -> int:
    """Seeds whose new final best is more than 1 - ``share`` slower than the old one's, by the recorded
    means (ending on none where the old sweep ended on one counts as slower)."""

    def truth(o: Outcome) -> float | None:
        return None if o.final_best is None else surface.point(dict(o.final_best)).tps

    slower = 0
    for o, n in zip(old, new, strict=True):
        was, now = truth(o), truth(n)
        slower += was is not None and (now is None or now < share * was)
    return slower


def least_time_s(surface: Surface, best: Sequence[Mapping[str, KnobValue]]) -> float | None:
    """The least time any rule that decides what to boot could take to find the best: the baseline booted
    for its PPL alone (the gate rests on it: its boot, PPL and stop) and the cheapest best configuration
    measured to the end, at their recorded phases; a best baseline measured to the end alone. None on a
    grid without traces."""
    base = surface.traces.get(surface.baseline)
    if base is None or not best:
        return None
    costs = []
    for knobs in best:
        trace = surface.traces.get(surface.key(knobs))
        if trace is None:
            return None
        if surface.key(knobs) == surface.baseline:
            costs.append(full_cost_s(trace))
        else:
            costs.append(sum(base.timings_s.get(p, 0.0) for p in ("boot", "ppl", "stop")) + full_cost_s(trace))
    return min(costs)


def _median(values: list[float | None]) -> float | None:
    """The median, a run that never got there counting as later than any that did."""
    ranked = sorted(values, key=lambda v: float("inf") if v is None else v)
    middle = ranked[(len(ranked) - 1) // 2], ranked[len(ranked) // 2]
    return None if None in middle else (middle[0] + middle[1]) / 2  # type: ignore[operator]


def _knobs(best: tuple[tuple[str, KnobValue], ...] | None, varying: tuple[str, ...]) -> str:
    return "-" if best is None else " ".join(f"{k}={v}" for k, v in best if k in varying)


def _minutes(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds / 60:.1f}"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


@dataclass(frozen=True, kw_only=True)
class Replays:
    """One grid's replays: the specs, the noise, and the outcomes per seed."""

    grid: GridArg
    surface: Surface
    old: StudySpec
    new: StudySpec
    cuts: tuple[int, ...]
    best_tps: float
    old_runs: list[Outcome]
    new_runs: list[Outcome]


def _seed_rows(old: list[Outcome], new: list[Outcome], varying: tuple[str, ...]) -> list[list[Any]]:
    """One row a seed: its time and boots to the best in each sweep, and where each ended."""
    return [
        [
            seed,
            _minutes(o.time_to_best_s),
            _minutes(n.time_to_best_s),
            o.boots_to_best or "-",
            n.boots_to_best or "-",
            "-" if not (o.time_to_best_s and n.time_to_best_s) else f"{o.time_to_best_s / n.time_to_best_s:.2f}",
            f"{n.pruned}/{n.gate_stopped}/{n.copies}/{n.memo_hits}",
            _knobs(o.final_best, varying),
            "same" if n.final_best == o.final_best else _knobs(n.final_best, varying),
        ]
        for seed, (o, n) in enumerate(zip(old, new))
    ]


def _totals(old: list[Outcome], new: list[Outcome], *, med_old: float | None, med_new: float | None) -> str:
    """The two sweeps side by side, over every seed."""
    return table(
        ["", "old", "new"],
        [
            ["median minutes to the best", _minutes(med_old), _minutes(med_new)],
            [
                "seeds that found it",
                sum(o.time_to_best_s is not None for o in old),
                sum(o.time_to_best_s is not None for o in new),
            ],
            [
                "median minutes, whole study",
                f"{statistics.median(o.total_s for o in old) / 60:.1f}",
                f"{statistics.median(o.total_s for o in new) / 60:.1f}",
            ],
            [
                "pruned / gate-stopped (all seeds)",
                f"{sum(o.pruned for o in old)} / {sum(o.gate_stopped for o in old)}",
                f"{sum(o.pruned for o in new)} / {sum(o.gate_stopped for o in new)}",
            ],
            [
                "copies / PPL-memo hits, unbooted (all seeds)",
                f"{sum(o.copies for o in old)} / {sum(o.memo_hits for o in old)}",
                f"{sum(o.copies for o in new)} / {sum(o.memo_hits for o in new)}",
            ],
        ],
    )


def _ends(r: Replays, *, seeds: int, promoted: bool) -> str:
    """Where the seeds end: slower or faster than the other sweep's, and under the grid's best."""
    surface, old, new = r.surface, r.old_runs, r.new_runs
    slower, faster = slower_seeds(old, new, surface), slower_seeds(new, old, surface)
    old_search, new_search = (
        [replace(o, final_best=o.search_best or o.final_best) for o in runs] for runs in (old, new)
    )
    searched_slower = slower_seeds(old_search, new_search, surface)
    searched_faster = slower_seeds(new_search, old_search, surface)

    def under(runs: list[Outcome], *, search: bool = False) -> int:
        ends = [o.search_best if search and o.search_best is not None else o.final_best for o in runs]
        return sum(e is None or surface.point(dict(e)).tps < SHARE * r.best_tps for e in ends)  # type: ignore[operator]

    return (
        f"{slower} of {seeds} seeds end more than 1% slower (the new final best against the old one's, by the "
        f"recorded means; target at most {TARGET_SLOWER}: {'met' if slower <= TARGET_SLOWER else 'NOT met'}); the other "
        f"way, {faster} of {seeds} (the old final best more than 1% slower than the new one's); ending more than "
        f"1% under the grid's best: old {under(old)}, new {under(new)} of {seeds}"
        + (
            f" (the search's own best, before its promotion: {searched_slower} slower, {searched_faster} the other "
            f"way; under the grid's best old {under(old, search=True)}, new {under(new, search=True)})"
            if promoted
            else ""
        )
    )


def _ceiling(surface: Surface, best: list[dict[str, Any]], old: list[Outcome]) -> list[str]:
    """The best any rule that decides what to boot could do against the old sweep, where it can be told."""
    least = least_time_s(surface, best)
    found_old = [o.time_to_best_s for o in old if o.time_to_best_s is not None]
    if not least or not found_old:
        return []
    ceiling = statistics.median(t / least for t in found_old)
    return [
        f"the ceiling of the per-seed ratio: any rule that decides what to boot must boot the baseline for its "
        f"PPL and measure a best configuration to the end, {least / 60:.1f} min at their recorded phases; the old "
        f"sweep's time to the best over that, per seed where it found it: median {_x(ceiling)} ({len(found_old)} "
        f"seeds; a new default can do no better than this)"
    ]


def report(r: Replays, *, args: Args) -> str:
    surface, spec, old, new = r.surface, r.new, r.old_runs, r.new_runs
    varying = tuple(k for k in surface.knobs if len(surface.values(k)) > 1)
    gate = spec.gate.limit([surface.point(dict(zip(surface.knobs, surface.baseline))).ppl])
    assert gate is not None  # the grid's baseline has its PPL: best_feasible_tps judged r.best_tps by it
    best = [
        dict(zip(surface.knobs, key))
        for key, p in surface.points.items()
        if p.tps is not None and p.ppl is not None and not over_gate(p.ppl, gate) and p.tps >= SHARE * r.best_tps
    ]
    rows = _seed_rows(old, new, varying)
    med_old, med_new = _median([o.time_to_best_s for o in old]), _median([o.time_to_best_s for o in new])
    ratio = None if med_old is None or not med_new else med_old / med_new
    paired = paired_ratio(old, new)
    promoted = spec.promotion.candidates > 0
    differ = sum(1 for o, n in zip(old, new) if o.final_best != n.final_best)
    trace = next(iter(surface.traces.values()))
    phases = ", ".join(
        f"{k} {v:.1f} s" for k, v in trace.timings_s.items() if k in ("boot", "warmup", "tps", "ppl", "stop")
    )
    excluded = (
        f"{paired.only_old} found it in the old sweep only, {paired.only_new} in the new only, "
        f"{paired.neither} in neither"
    )
    met = paired.median is not None and paired.median >= TARGET_RATIO
    lines = [
        f"grid {r.grid.path.name}, study {spec.name!r} ({spec.gate.describe()}, sampler {spec.sampler}, a budget of "
        f"{args.trials} booted trials): {len(surface.points)} configurations, {len(trace.latencies_s)} prompts x "
        f"{surface.profile.get('output_len') if surface.profile else '?'} tokens a trial; {args.seeds} seeds",
        *(f"grid: {note}" for note in surface.notes if not note.startswith("command")),
        f"a baseline trial as recorded: {phases}",
        f"noise: {surface.run_noise(r.cuts).describe()}",
        f"best feasible TPS {r.best_tps:.3f} (gate PPL {gate:.4f}); within 1%: "
        + "; ".join(_knobs(tuple(sorted(b.items())), varying) for b in best),
        'old: full fidelity, every proposal booted (repeats = "allow", no PPL memo)',
        f"new: {spec.fidelity.describe()}; copies and PPL-memo hits closed without a boot",
        (
            f"both end on their promotion's best: the {spec.promotion.candidates} fastest distinct feasible "
            f"configurations (sweep.claims.select, from the search's noisy figures), {spec.promotion.boots} fresh "
            f"boots each drawn with the grid's {surface.tps_rel_sd:.1%} noise, the highest mean"
            if promoted
            else "both end on the search's best: the study promotes nothing"
        ),
        "",
        table(
            [
                "seed",
                "old: min to best",
                "new: min to best",
                "old: boots",
                "new: boots",
                "old / new",
                "new: pruned/gate-stopped/copies/memo",
                "old: final best",
                "new: final best",
            ],
            rows,
        ),
        "",
        _totals(old, new, med_old=med_old, med_new=med_new),
        "",
        f"ratio of median times to the best (old / new): {_x(ratio)}",
        f"per-seed ratio: median {_x(paired.median)}, geometric mean {_x(paired.geometric_mean)} "
        f"(over the {len(paired.ratios)} seeds where both found the best; {excluded}; target median >= "
        f"{TARGET_RATIO:g}: {'met' if met else 'NOT met'})",
        _ends(r, seeds=args.seeds, promoted=promoted),
        f"seeds whose final best differs: {differ} of {args.seeds}",
    ]
    lines += _ceiling(surface, best, old)
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.time_to_optimum", description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="joint", help="the study of a --grid that names none (default joint)")
    parser.add_argument(
        "--grid",
        action="append",
        metavar="[STUDY=]PATH",
        help=f"a recorded grid with traces, replayed with STUDY's setup; repeatable (default "
        f"{GRID.name}, the CPU grid, and vllm-h200={GPU_GRID.name}, the GPU grid, where it is recorded)",
    )
    parser.add_argument("--sampler", default=DEFAULT_SAMPLER, choices=SAMPLERS, help=f"default {DEFAULT_SAMPLER}")
    parser.add_argument("--seeds", type=int, default=20, help="seeds (default 20)")
    parser.add_argument(
        "--trials", type=int, default=30, help="booted trials per replayed study, the baseline included (default 30)"
    )
    parser.add_argument(
        "--stages",
        type=_fractions,
        metavar="F,F,...",
        help="replay the rule with these stages instead of the study's (e.g. 0.125,0.25,0.5)",
    )
    parser.add_argument("--processes", type=int, default=2, help="replays in parallel (default 2)")
    parser.add_argument("--out", type=Path, help="also write the report there, under its command line")
    ns = parser.parse_args(argv)
    if ns.seeds < 1 or ns.trials < 2 or ns.processes < 1:
        parser.error("--seeds and --processes must be at least 1, --trials at least 2")
    default = [str(GRID), *([f"vllm-h200={GPU_GRID}"] if GPU_GRID.exists() else [])]
    grids = tuple(_grid(text, ns.study) for text in ns.grid or default)
    return Args(
        grids=grids,
        sampler=ns.sampler,
        seeds=ns.seeds,
        trials=ns.trials,
        stages=ns.stages,
        processes=ns.processes,
        out=ns.out,
    )


def _grid(text: str, study: str) -> GridArg:
    named, _, path = text.rpartition("=")
    return GridArg(study=named or study, path=Path(path))


def _fractions(text: str) -> tuple[float, ...]:
    try:
        stages = tuple(float(f) for f in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of fractions: {text!r}") from None
    if not all(0 < f < 1 for f in stages) or list(stages) != sorted(set(stages)):
        raise argparse.ArgumentTypeError(f"stages must be increasing fractions between 0 and 1, got {text!r}")
    return stages


def _specs(grid: GridArg, args: Args) -> tuple[Surface, StudySpec, StudySpec]:
    """The grid, and the study replayed on it the new way and the old way."""
    surface = load_surface(grid.path)
    if not surface.traces:
        raise ConfigError(
            f"{grid.path}: the grid records no prompt timings; record one with "
            "`python -m benchmarks.record_grid --grid fidelity`"
        )
    spec = surface_spec(load_study(grid.study), surface)
    # the replayed sampler's own rule: the study's sampler may be one the front rule cannot serve
    new = replace(
        spec,
        sampler=args.sampler,
        repeats="copy",
        ppl_memo=True,
        fidelity=replace(spec.fidelity, front_rule_off=front_rule_for(args.sampler)),
    )
    if args.stages is not None and new.fidelity.mode == "multi":
        new = replace(new, fidelity=replace(new.fidelity, stages=args.stages))
    old = replace(new, fidelity=FidelitySpec(mode="full"), repeats="allow", ppl_memo=False)
    return surface, new, old


def _one(spec: StudySpec, surface: Surface, seed: int, trials: int, best_tps: float, cuts: tuple[int, ...]) -> Outcome:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    run = replay(spec, surface, seed=seed, n_trials=trials, cuts=cuts)
    outcome = time_to_best(run, best_tps=best_tps)
    promoted = promoted_best(run, spec, surface, seed=seed)
    return outcome if promoted is None else replace(outcome, final_best=promoted, search_best=outcome.final_best)


@command(parse_args)
def main(args: Args) -> int:
    began = time.monotonic()
    try:
        loaded = [(grid, *_specs(grid, args)) for grid in args.grids]
    except ValueError as exc:  # a grid whose numbers do not parse: bad input, not a bug of the replay
        raise DataError(str(exc)) from None
    texts = []
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        for grid, surface, new, old in loaded:
            gate = new.gate.limit([surface.point(dict(zip(surface.knobs, surface.baseline))).ppl])
            assert gate is not None  # a ratio gate: the grid records its baseline's PPL
            best_tps = best_feasible_tps(surface, gate)
            # one noise layout for both: the new rule's stages (the old sweep's trials are cut nowhere)
            cuts = stage_counts(new.fidelity, new.profile) if new.fidelity.mode == "multi" else ()
            jobs = {
                (mode, seed): pool.submit(_one, s, surface, seed, args.trials, best_tps, cuts)
                for mode, s in (("old", old), ("new", new))
                for seed in range(args.seeds)
            }
            done = {key: job.result() for key, job in jobs.items()}
            replays = Replays(
                grid=grid,
                surface=surface,
                old=old,
                new=new,
                cuts=cuts,
                best_tps=best_tps,
                old_runs=[done["old", s] for s in range(args.seeds)],
                new_runs=[done["new", s] for s in range(args.seeds)],
            )
            texts.append(report(replays, args=args))
    replayed = "; ".join(f"{g.path.name} (study {g.study})" for g in args.grids)
    only_cpu = [g.path.resolve() for g in args.grids] == [GRID]
    texts.append(
        f"grids replayed: {replayed}"
        + (
            " only: no GPU grid was given (`python -m benchmarks.record_grid --grid vllm-h200` records one "
            "on the GPU machine; it replays with --grid vllm-h200=PATH)"
            if only_cpu
            else ""
        )
        + f". Replays took {time.monotonic() - began:.1f} s wall ({args.processes} process(es)); {load_note()}"
    )
    emit("\n\n".join(texts), out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
