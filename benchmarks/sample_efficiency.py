"""``python -m benchmarks.sample_efficiency``: each sampler replayed on the recorded joint grid.

No server runs: every sampler (tpe, nsga2, gp, random, grid) drives the ``joint`` study, its
space narrowed to the recorded grid (``benchmarks/results/joint_grid.csv``), through the
driver's own Optuna setup (``benchmarks._replay``) for 20 seeds. Per sampler: the median
number of trials (the baseline is trial 1) until a feasible configuration within 99% of the
grid's best feasible TPS was tried, and the hypervolume of the feasible front after 10, 20
and 40 trials as a share of the whole grid's. A chart of hypervolume against trials goes
next to the table (HTML, and PNG through the system Chromium when there is one).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import optuna

from benchmarks._efficiency import Reference, best_feasible_tps, hypervolume_curve, reference_point, trials_to_reach
from benchmarks._replay import replay, surface_spec
from benchmarks._report import RESULTS_DIR, emit, table
from benchmarks._surface import Surface, load_surface
from benchmarks._sweeps import load_note
from cli import command
from errors import BrowserNotFoundError, DataError
from sweep.search import DEFAULT_SAMPLER, SAMPLERS, StudySpec, load_study

__all__ = ["SamplerResult", "main", "run_samplers"]

GRID_CSV = RESULTS_DIR / "joint_grid.csv"
CHECKPOINTS = (10, 20, 40)
SHARE = 0.99


@dataclass(frozen=True, kw_only=True)
class Args:
    study: str
    grid: Path
    samplers: tuple[str, ...]
    seeds: int
    trials: int
    processes: int
    out: Path | None
    chart: Path | None


@dataclass(frozen=True, kw_only=True)
class SamplerResult:
    sampler: str
    reached: list[int | None]  # per seed: trials_to_reach, None when not within the budget
    curves: list[list[float]]  # per seed: hypervolume share after 1..n trials
    cpu_s: float  # CPU time of its replays (wall time depends on the pool and the load)

    def median_reached(self) -> float | None:
        """The median over seeds, a run that never reached counting as later than any that did."""
        ranked = sorted(self.reached, key=lambda r: float("inf") if r is None else r)
        middle = ranked[(len(ranked) - 1) // 2], ranked[len(ranked) // 2]
        if None in middle:
            return None
        return (middle[0] + middle[1]) / 2  # type: ignore[operator]

    def hv_at(self, n: int) -> list[float]:
        """Per seed; a run that ended early (a grid) keeps its last value."""
        return [curve[min(n, len(curve)) - 1] for curve in self.curves]


def _replay_one(
    spec: StudySpec, surface: Surface, seed: int, trials: int, best_tps: float, ref: Reference
) -> tuple[int | None, list[float], float]:
    """One seed of one sampler (a process pool task): trials to reach, curve, CPU seconds."""
    began = time.process_time()
    run = replay(spec, surface, seed=seed, n_trials=trials)
    return (
        trials_to_reach(run, best_tps=best_tps, share=SHARE),
        hypervolume_curve(run, ref),
        time.process_time() - began,
    )


def _init_worker() -> None:
    # The GP sampler's matrices are small: extra threads only fight the other processes for
    # the cores, which tripled its time on this shared 2-core machine.
    import torch

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # thousands of trials: the table says it all


def run_samplers(
    spec: StudySpec,
    surface: Surface,
    *,
    samplers: tuple[str, ...],
    seeds: int,
    trials: int,
    best_tps: float,
    ref: Reference,
    processes: int,
) -> list[SamplerResult]:
    """Every (sampler, seed) replay, spread over ``processes``; each replay is seeded, so the
    result does not depend on how they are spread."""
    tasks = {
        (s, seed): (replace(spec, sampler=s), surface, seed, trials, best_tps, ref)
        for s in samplers
        for seed in range(seeds)
    }
    with ProcessPoolExecutor(max_workers=processes, initializer=_init_worker) as pool:
        futures = {key: pool.submit(_replay_one, *task) for key, task in tasks.items()}
        done = {key: future.result() for key, future in futures.items()}
    return [
        SamplerResult(
            sampler=s,
            reached=[done[s, seed][0] for seed in range(seeds)],
            curves=[done[s, seed][1] for seed in range(seeds)],
            cpu_s=sum(done[s, seed][2] for seed in range(seeds)),
        )
        for s in samplers
    ]


def _roles(spec: StudySpec) -> dict[str, str]:
    """The samplers users get without choosing: the study's own, and a study file's default."""
    roles = {DEFAULT_SAMPLER: "default sampler"}
    roles[spec.sampler] = f"{spec.name}'s sampler" + (", default" if spec.sampler == DEFAULT_SAMPLER else "")
    return roles


def report(
    results: list[SamplerResult],
    *,
    spec: StudySpec,
    surface: Surface,
    best_tps: float,
    ref: Reference,
    args: Args,
    total_s: float,
) -> str:
    roles = _roles(spec)
    rows = []
    for r in results:
        median = r.median_reached()
        hit = sum(1 for x in r.reached if x is not None)
        role = roles.get(r.sampler)
        label = f"{r.sampler} ({role})" if role else r.sampler
        hv = [f"{statistics.median(r.hv_at(n)):.3f}" for n in CHECKPOINTS if n <= args.trials]
        rows.append(
            [
                label,
                f">{args.trials}" if median is None else f"{median:g}",
                f"{hit}/{len(r.reached)}",
                *hv,
                f"{r.cpu_s:.1f}",
            ]
        )
    headers = [
        "sampler",
        f"median trials to {SHARE:.0%}",
        "reached",
        *(f"HV@{n}" for n in CHECKPOINTS if n <= args.trials),
        "CPU s",
    ]
    sizes = " x ".join(f"{k} {surface.values(k)}" for k in surface.knobs)
    lines = [
        f"study {spec.name!r} ({spec.gate.describe()}) replayed on {args.grid.name}: {len(surface.points)} configurations "
        f"({sizes}); {args.seeds} seeds x {args.trials} trials per sampler",
        f"noise added: TPS x (1 + N(0, {surface.tps_rel_sd:.4f})), PPL x (1 + N(0, {surface.ppl_rel_sd:.4f})) "
        f"(pooled over {surface.repeated} repeated configurations)",
        f"best feasible TPS in the grid {best_tps:.3f} (gate PPL {ref.ppl:.4f}); target {SHARE:.0%} of it = {SHARE * best_tps:.3f}",
        f"hypervolume reference point: TPS {ref.tps:.3f} (the grid's slowest), PPL {ref.ppl:.4f} (the gate); "
        f"HV@n = median share of the grid's own hypervolume ({ref.grid_hv:.4f}) after n trials",
        "",
        table(headers, rows),
        "",
        f"median trials: the baseline is trial 1; >{args.trials} when fewer than half the seeds got there within "
        f"{args.trials} trials (reached: how many did)",
        f"total {total_s:.1f} s wall ({args.processes} process(es)); {load_note()} at the end",
    ]
    rand = next((r for r in results if r.sampler == "random"), None)
    for sampler, role in roles.items():
        mine = next((r for r in results if r.sampler == sampler), None)
        if mine is None or rand is None or mine is rand:
            continue
        d, q = mine.median_reached(), rand.median_reached()
        better = d is not None and (q is None or d < q)
        lines.append(
            f"{sampler} ({role}): median {d if d is not None else f'>{args.trials}'} vs random "
            f"{q if q is not None else f'>{args.trials}'}: {'fewer' if better else 'NOT fewer'} trials than random"
        )
    nsga2 = next((r for r in results if r.sampler == "nsga2"), None)
    if nsga2 is not None and rand is not None and nsga2.curves == rand.curves:
        lines.append("nsga2 tried what random tried in every seed: its first generation (50 trials) is random sampling")
    return "\n".join(lines)


def chart(results: list[SamplerResult], *, path: Path, title: str) -> list[Path]:
    """Median hypervolume share against trials per sampler, the interquartile range shaded."""
    from benchmarks._chart import curve_data, curve_figure

    fig = curve_figure(curve_data({r.sampler: r.curves for r in results}), title=title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path.with_suffix(".html"), include_plotlyjs=True)
    written = [path.with_suffix(".html")]
    try:
        from dashboards.images import write_images

        written += write_images(fig, [path.with_suffix(".png")], width=1000, height=600)
    except BrowserNotFoundError as exc:  # no Chromium: the HTML stands alone
        print(f"PNG skipped: {exc}", file=sys.stderr)
    return written


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sample_efficiency", description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="joint", help="the study whose setup is replayed (default joint)")
    parser.add_argument("--grid", type=Path, default=GRID_CSV, help=f"recorded grid (default {GRID_CSV.name})")
    parser.add_argument("--samplers", default=",".join(SAMPLERS), help="comma-separated (default all five)")
    parser.add_argument("--seeds", type=int, default=20, help="seeds per sampler (default 20)")
    parser.add_argument("--trials", type=int, default=max(CHECKPOINTS), help="trials per run (default 40)")
    parser.add_argument(
        "--processes", type=int, default=os.cpu_count() or 1, help="replays run in parallel (default: one per CPU)"
    )
    parser.add_argument("--out", type=Path, help="also write the table there, under its command line")
    parser.add_argument("--chart", type=Path, help="write the chart there (.html, and .png beside it)")
    ns = parser.parse_args(argv)
    samplers = tuple(s.strip() for s in ns.samplers.split(",") if s.strip())
    unknown = [s for s in samplers if s not in SAMPLERS]
    if unknown or not samplers:
        parser.error(f"--samplers: unknown {unknown}; valid: {list(SAMPLERS)}")
    if ns.seeds < 1 or ns.trials < 1 or ns.processes < 1:
        parser.error("--seeds, --trials and --processes must be at least 1")
    return Args(
        study=ns.study,
        grid=ns.grid,
        samplers=samplers,
        seeds=ns.seeds,
        trials=ns.trials,
        processes=ns.processes,
        out=ns.out,
        chart=ns.chart,
    )


@command(parse_args)
def main(args: Args) -> int:
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # thousands of trials: the table says it all
    began = time.monotonic()
    try:
        surface = load_surface(args.grid)
        # The samplers alone, every proposal a trial as the grid was recorded: a copy or a PPL-memo
        # hit (sweep.search) costs no boot, so it would stretch "trials to reach" without costing anything.
        spec = replace(surface_spec(load_study(args.study), surface), repeats="allow", ppl_memo=False)
    except ValueError as exc:  # a grid whose numbers do not parse: bad input, not a bug of the samplers
        raise DataError(str(exc)) from None
    gate = spec.gate.limit([surface.point(dict(zip(surface.knobs, surface.baseline))).ppl])
    assert gate is not None  # a ratio gate: the grid records its baseline's PPL
    best_tps = best_feasible_tps(surface, gate)
    ref = reference_point(surface, gate)
    results = run_samplers(
        spec,
        surface,
        samplers=args.samplers,
        seeds=args.seeds,
        trials=args.trials,
        best_tps=best_tps,
        ref=ref,
        processes=args.processes,
    )
    text = report(
        results, spec=spec, surface=surface, best_tps=best_tps, ref=ref, args=args, total_s=time.monotonic() - began
    )
    emit(text, out=args.out)
    if args.chart is not None:
        for path in chart(
            results, path=args.chart, title=f"{spec.name}: feasible hypervolume vs trials ({args.seeds} seeds)"
        ):
            print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
