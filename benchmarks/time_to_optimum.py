"""``python -m benchmarks.time_to_optimum``: GPU time until the best feasible configuration, full vs multi-fidelity.

No server runs. A study (default ``joint``, its sampler replaced by the default one) is replayed on
a grid recorded with every trial's prompt timings and phases (``benchmarks/results/fidelity_grid.json``,
``python -m benchmarks.record_grid --grid fidelity``), twice per seed through the driver's own core
(``benchmarks._replay``): at full fidelity, and with the study's multi-fidelity rule. Each trial
costs what it cost when recorded (boot, warm-up, TPS run, PPL, stop), its TPS run cut where the
rule stopped it. Per seed and mode: the seconds spent until a trial measured to the end tried a
feasible configuration within 1% of the grid's best feasible TPS (the recorded means judge), and
the configuration the study ends on as its best (its own noisy measurements judge).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import optuna

from benchmarks._efficiency import best_feasible_tps
from benchmarks._replay import Replayed, replay, surface_spec
from benchmarks._report import RESULTS_DIR, emit, table
from benchmarks._surface import Surface, load_surface
from benchmarks._sweeps import load_note
from errors import ConfigError
from sweep.fidelity import FidelitySpec, front_rule_for
from sweep.judgement import over_gate
from sweep.spec import DEFAULT_SAMPLER, SAMPLERS, StudySpec, load_study

__all__ = ["Outcome", "main", "time_to_best"]

GRID = RESULTS_DIR / "fidelity_grid.json"
SHARE = 0.99
TARGET_RATIO = 3.0


@dataclass(frozen=True, kw_only=True)
class Args:
    study: str
    grid: Path
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
    trials_to_best: int | None
    final_best: tuple[tuple[str, object], ...] | None  # the knobs of its fastest feasible full trial
    total_s: float
    pruned: int
    gate_stopped: int


def time_to_best(run: list[Replayed], *, best_tps: float, share: float = SHARE) -> Outcome:
    spent = 0.0
    found: tuple[float, int] | None = None
    for i, t in enumerate(run, start=1):
        spent += t.cost_s
        if found is None and t.record is not None and t.record.full and t.feasible and t.tps >= share * best_tps:  # type: ignore[operator]
            found = (spent, i)
    feasible = [t.record for t in run if t.record is not None and t.record.full and t.record.feasible]
    best = max(feasible, key=lambda r: (r.tps, -r.trial_number), default=None)
    return Outcome(
        time_to_best_s=found[0] if found else None, trials_to_best=found[1] if found else None,
        final_best=tuple(sorted(best.knobs.items())) if best else None, total_s=spent,
        pruned=sum(1 for t in run if t.record is not None and t.record.status == "pruned"),
        gate_stopped=sum(1 for t in run if t.record is not None and t.record.gate_stopped),
    )  # fmt: skip


def _one(spec: StudySpec, surface: Surface, seed: int, trials: int, best_tps: float) -> Outcome:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return time_to_best(replay(spec, surface, seed=seed, n_trials=trials), best_tps=best_tps)


def _median(values: list[float | None]) -> float | None:
    """The median, a run that never got there counting as later than any that did."""
    ranked = sorted(values, key=lambda v: float("inf") if v is None else v)
    middle = ranked[(len(ranked) - 1) // 2], ranked[len(ranked) // 2]
    return None if None in middle else (middle[0] + middle[1]) / 2  # type: ignore[operator]


def _knobs(best: tuple[tuple[str, object], ...] | None, varying: tuple[str, ...]) -> str:
    return "-" if best is None else " ".join(f"{k}={v}" for k, v in best if k in varying)


def _minutes(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds / 60:.1f}"


def report(full: list[Outcome], multi: list[Outcome], *, spec: StudySpec, surface: Surface, best_tps: float,
           args: Args, wall_s: float) -> str:  # fmt: skip
    varying = tuple(k for k in surface.knobs if len(surface.values(k)) > 1)
    gate = spec.gate.resolve(surface.point(dict(zip(surface.knobs, surface.baseline))).ppl)
    best = [dict(zip(surface.knobs, key)) for key, p in surface.points.items()
            if p.tps is not None and p.ppl is not None and not over_gate(p.ppl, gate) and p.tps >= SHARE * best_tps]  # type: ignore[operator]
    rows = [[seed, _minutes(f.time_to_best_s), _minutes(m.time_to_best_s), f.trials_to_best or "-", m.trials_to_best or "-",
             f"{m.pruned}/{m.gate_stopped}", _knobs(f.final_best, varying),
             "same" if m.final_best == f.final_best else _knobs(m.final_best, varying)]
            for seed, (f, m) in enumerate(zip(full, multi))]  # fmt: skip
    med_full, med_multi = _median([o.time_to_best_s for o in full]), _median([o.time_to_best_s for o in multi])
    differ = [(f, m) for f, m in zip(full, multi) if f.final_best != m.final_best]
    slower = [m for f, m in differ if m.final_best is None or surface.point(dict(m.final_best)).tps < SHARE * best_tps]  # type: ignore[operator]
    ratio = None if med_full is None or not med_multi else med_full / med_multi
    trace = next(iter(surface.traces.values()))
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in trace.timings_s.items() if k in ("boot", "warmup", "tps", "ppl", "stop"))
    lines = [
        f"study {spec.name!r} ({spec.gate.describe()}, sampler {spec.sampler}, {args.trials} trials) replayed on "
        f"{args.grid.name}: {len(surface.points)} configurations, {len(trace.latencies_s)} prompts x "
        f"{surface.profile.get('output_len') if surface.profile else '?'} tokens a trial; {args.seeds} seeds",
        *(f"grid: {note}" for note in surface.notes if not note.startswith("command")),
        f"a baseline trial as recorded: {phases}",
        f"noise: TPS x (1 + N(0, {surface.tps_rel_sd:.4f})) per trial (pooled over {surface.repeated} repeated configurations)",
        f"best feasible TPS {best_tps:.3f} (gate PPL {gate:.4f}); within 1%: "
        + "; ".join(_knobs(tuple(sorted(b.items())), varying) for b in best),
        f"rule: {spec.fidelity.describe()}",
        "",
        table(["seed", "full: min to best", "multi: min to best", "full: trials", "multi: trials",
               "multi: pruned/gate-stopped", "full: final best", "multi: final best"], rows),  # fmt: skip
        "",
        table(["", "full fidelity", "multi-fidelity"], [
            ["median minutes to the best", _minutes(med_full), _minutes(med_multi)],
            ["seeds that found it", sum(o.time_to_best_s is not None for o in full),
             sum(o.time_to_best_s is not None for o in multi)],
            ["median minutes, whole study", f"{statistics.median(o.total_s for o in full) / 60:.1f}",
             f"{statistics.median(o.total_s for o in multi) / 60:.1f}"],
            ["trials pruned / gate-stopped (all seeds)", "0 / 0",
             f"{sum(o.pruned for o in multi)} / {sum(o.gate_stopped for o in multi)}"],
        ]),  # fmt: skip
        "",
        f"ratio of median times to the best (full / multi): {'n/a' if ratio is None else f'{ratio:.2f}'} "
        f"(target >= {TARGET_RATIO:g}: {'met' if ratio is not None and ratio >= TARGET_RATIO else 'NOT met'})",
        f"seeds whose final best differs: {len(differ)} of {args.seeds} ({len(slower)} of them ending on a configuration "
        f"more than 1% slower than the grid's best, by the recorded means; target at most 1 differing)",
        f"replays took {wall_s:.1f} s wall ({args.processes} process(es)); {load_note()}",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.time_to_optimum", description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="joint", help="the study whose setup and fidelity rule are replayed (default joint)")
    parser.add_argument("--grid", type=Path, default=GRID, help=f"recorded grid with traces (default {GRID.name})")
    parser.add_argument("--sampler", default=DEFAULT_SAMPLER, choices=SAMPLERS, help=f"default {DEFAULT_SAMPLER}")
    parser.add_argument("--seeds", type=int, default=20, help="seeds (default 20)")
    parser.add_argument("--trials", type=int, default=30, help="trials per replayed study, the baseline included (default 30)")
    parser.add_argument("--stages", type=_fractions, metavar="F,F,...",
                        help="replay the rule with these stages instead of the study's (e.g. 0.125,0.25,0.5)")
    parser.add_argument("--processes", type=int, default=2, help="replays in parallel (default 2)")
    parser.add_argument("--out", type=Path, help="also write the report there, under its command line")
    ns = parser.parse_args(argv)
    if ns.seeds < 1 or ns.trials < 2 or ns.processes < 1:
        parser.error("--seeds and --processes must be at least 1, --trials at least 2")
    return Args(study=ns.study, grid=ns.grid, sampler=ns.sampler, seeds=ns.seeds, trials=ns.trials,
                stages=ns.stages, processes=ns.processes, out=ns.out)  # fmt: skip


def _fractions(text: str) -> tuple[float, ...]:
    try:
        stages = tuple(float(f) for f in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of fractions: {text!r}") from None
    if not all(0 < f < 1 for f in stages) or list(stages) != sorted(set(stages)):
        raise argparse.ArgumentTypeError(f"stages must be increasing fractions between 0 and 1, got {text!r}")
    return stages


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    try:
        surface = load_surface(args.grid)
        if not surface.traces:
            raise ConfigError(f"{args.grid}: the grid records no prompt timings; record one with "
                              "`python -m benchmarks.record_grid --grid fidelity`")  # fmt: skip
        spec = surface_spec(load_study(args.study), surface)
        # the replayed sampler's own rule: the study's sampler may be one the front rule cannot serve
        spec = replace(spec, sampler=args.sampler,
                       fidelity=replace(spec.fidelity, front_rule_off=front_rule_for(args.sampler)))  # fmt: skip
        if spec.fidelity.mode != "multi":
            raise ConfigError(f"study {spec.name!r} runs at {spec.fidelity.describe()}: nothing to compare")
        if args.stages is not None:
            spec = replace(spec, fidelity=replace(spec.fidelity, stages=args.stages))
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    full_spec = replace(spec, fidelity=FidelitySpec(mode="full"))
    gate = spec.gate.resolve(surface.point(dict(zip(surface.knobs, surface.baseline))).ppl)
    best_tps = best_feasible_tps(surface, gate)
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        jobs = {(mode, seed): pool.submit(_one, s, surface, seed, args.trials, best_tps)
                for mode, s in (("full", full_spec), ("multi", spec)) for seed in range(args.seeds)}  # fmt: skip
        done = {key: job.result() for key, job in jobs.items()}
    full = [done["full", seed] for seed in range(args.seeds)]
    multi = [done["multi", seed] for seed in range(args.seeds)]
    emit(report(full, multi, spec=spec, surface=surface, best_tps=best_tps, args=args, wall_s=time.monotonic() - began),
         out=args.out)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
