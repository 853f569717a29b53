"""``python -m benchmarks.scaling``: one short study with 1, 2 and 4 Ray workers, wall time and
parallel efficiency per worker count.

The stack is the stub test stack (``tests/stacks``) set to sleep, not compute: a known boot
delay and a known time per request, every knob value alike. So each trial takes the same known
time whatever the CPU does, and what changes with the worker count is the orchestration alone
(Ray actors, the driver's ask/tell, SQLite writes, the engine processes' start and stop), which
is what a 2-core machine can measure honestly.

The driver runs the baseline trial alone (the gate and the identity check are judged against
it), so efficiency is reported over the part after the baseline, where every worker is busy:
``E(n) = T1 / (n * Tn)``, T the time from the baseline's tell to the last tell. The whole
command's wall time (interpreter, Ray start, exports included) is reported beside it.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks._report import emit, table
from benchmarks._sweeps import SweepRun, load_note, run_sweep
from benchmarks._timeline import TrialTiming, load_timeline
from cli import command
from errors import SweepRunError

__all__ = ["main"]

STUDY = "scaling"


@dataclass(frozen=True, kw_only=True)
class ScalingArgs:
    workers: tuple[int, ...]
    trials: int
    boot_s: float
    request_s: float
    repeats: int
    out: Path | None
    keep: bool

    def order(self) -> list[int]:
        """Worker counts to run: forwards, then backwards, ... so that a load that drifts over
        the measurement weighs on every count alike (1,2,4,4,2,1 for two repeats)."""
        return [n for r in range(self.repeats) for n in (self.workers if r % 2 == 0 else self.workers[::-1])]


@dataclass(frozen=True, kw_only=True)
class Point:
    workers: int
    run: SweepRun
    timeline: list[TrialTiming]
    sleep_s: float  # the stub's known sleep in one trial
    load_before: str
    load_after: str

    @property
    def parallel(self) -> list[TrialTiming]:
        return [t for t in self.timeline if not t.is_baseline]

    @property
    def parallel_span_s(self) -> float:
        """From the baseline's tell to the last tell: the part where all workers may be busy."""
        baseline = next(t for t in self.timeline if t.is_baseline)
        return (max(t.told for t in self.timeline) - baseline.told).total_seconds()

    @property
    def loop_span_s(self) -> float:
        return (max(t.told for t in self.timeline) - min(t.asked for t in self.timeline)).total_seconds()

    def mean(self, value: str) -> float:
        trials = self.parallel
        return sum(getattr(t, value) for t in trials) / len(trials)

    @property
    def idle_share(self) -> float:
        """Worker time in the parallel part with no trial on it (waiting on the driver, or the
        last round's imbalance)."""
        busy = sum(t.wall_s for t in self.parallel)
        return 1 - busy / (self.workers * self.parallel_span_s)


def _write_study(folder: Path, args: ScalingArgs) -> tuple[Path, float]:
    """The study file, and the stub's known sleep in one of its trials."""
    # The test kit owns the stub and the study-file writer; the benchmark only sets them to sleep.
    from tests.stacks import stub_profile
    from tests.sweep.kit import write_manifest, write_study

    profile = stub_profile(folder)
    requests = profile.warmup_requests + profile.num_prompts + profile.ppl_records
    sleep_s = args.boot_s + profile.warmup_pause_s + requests * args.request_s
    manifest = write_manifest(
        folder,
        STUB_BOOT_DELAY_S=str(args.boot_s),
        STUB_REQUEST_OVERHEAD_S=str(args.request_s),
        STUB_DECODE_STEP_S="0",  # every request sleeps request_s whatever the knobs
    )
    study = write_study(
        folder,
        manifest=manifest,
        profile=profile,
        space={"centroid_top_k": {"low": 1, "high": 64}, "num_speculative_tokens": {"low": 1, "high": 8}},
        name=STUDY,
        sampler="random",
        seed=1,
        n_trials=args.trials,
        # A sleeping trial needs no core of its own: 4 workers fit on this 2-core machine.
        resources={"num_cpus": 0.25},
    )
    return study, sleep_s


def measure(workers: int, *, folder: Path, args: ScalingArgs) -> Point:
    folder.mkdir(parents=True)
    study, sleep_s = _write_study(folder, args)
    url = f"sqlite:///{folder / 'sweep.db'}"
    before = load_note()
    run = run_sweep("--study", str(study), "--storage", url, "--workers", str(workers), folder=folder)
    after = load_note()
    timeline = load_timeline(url, STUDY)
    return Point(workers=workers, run=run, timeline=timeline, sleep_s=sleep_s, load_before=before, load_after=after)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def report(points: list[Point], *, args: ScalingArgs) -> str:
    sleep_s = points[0].sleep_s
    ones = [p for p in points if p.workers == 1]
    t1 = _mean([p.parallel_span_s for p in ones]) if ones else None
    c1 = _mean([p.run.wall_s for p in ones]) if ones else None

    def eff(p: Point) -> float | None:
        return None if t1 is None else t1 / (p.workers * p.parallel_span_s)

    rows = []
    for p in points:
        cmd_eff = "-" if c1 is None else f"{c1 / (p.workers * p.run.wall_s):.1%}"
        e = eff(p)
        rows.append(
            [
                p.workers,
                f"{p.run.wall_s:.1f}",
                cmd_eff,
                f"{p.loop_span_s:.1f}",
                f"{p.parallel_span_s:.1f}",
                f"{math.ceil(len(p.parallel) / p.workers) * sleep_s:.1f}",
                "-" if e is None else f"{e:.1%}",
                f"{p.mean('wall_s'):.2f}",
                f"{p.mean('engine_s'):.2f}",
                f"{p.mean('orchestration_s'):.3f}",
                f"{p.mean('before_row_s'):.3f}",
                f"{p.mean('row_to_tell_s'):.3f}",
                f"{p.idle_share:.1%}",
            ]
        )
    summary = []
    if t1 is not None:
        for n in args.workers:
            runs = [e for p in points if p.workers == n and (e := eff(p)) is not None]
            summary.append(
                f"{n} worker(s): parallel efficiency {_mean(runs):.1%} (runs: {', '.join(f'{e:.1%}' for e in runs)})"
            )
    headers = [
        "workers",
        "command s",
        "cmd eff",
        "loop s",
        "parallel s",
        "ideal par. s",
        "efficiency",
        "trial wall s",
        "engine s",
        "orch. s",
        "to row s",
        "row-tell s",
        "idle",
    ]
    lines = [
        f"study: 1 baseline + {args.trials - 1} trials on the sleeping stub stack (random sampler, seed 1); "
        f"known sleep per trial {sleep_s:.2f} s (boot {args.boot_s:g} s, {args.request_s:g} s per request)",
        "",
        table(headers, rows),
        "",
        *summary,
        "",
        "command s     the whole `python -m sweep.run` (interpreter, imports, Ray start, trials, exports)",
        "cmd eff       command s of 1 worker (mean) / (workers x command s)",
        "loop s        first ask to last tell; parallel s: the baseline's tell to the last tell",
        "ideal par. s  ceil(trials after the baseline / workers) x the known sleep per trial",
        "efficiency    parallel s of 1 worker (mean) / (workers x parallel s)",
        "trial wall s  ask to tell per trial after the baseline (mean); engine s: boot+warmup+tps+ppl+stop",
        "orch. s       trial wall minus run_trial's total (mean): Ray dispatch and return, row write, tell;",
        "              to row s: its part before the row (dispatch, worker imports, return, waiting while",
        "              the driver closes other trials); row-tell s: the driver's database work after the row",
        "idle          share of worker time in the parallel part with no trial in flight",
        "",
        *(
            f"load, run {i + 1} ({p.workers} worker(s)): before {p.load_before}; after {p.load_after}"
            for i, p in enumerate(points)
        ),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> ScalingArgs:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated (default 1,2,4)")
    parser.add_argument("--trials", type=int, default=13, help="trials per study, the baseline included (default 13)")
    parser.add_argument("--boot-s", type=float, default=2.0, help="the stub's boot sleep (default 2)")
    parser.add_argument("--request-s", type=float, default=0.5, help="the stub's sleep per request (default 0.5)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="passes over the worker counts, alternately forwards and backwards (default 1)",
    )
    parser.add_argument("--out", type=Path, help="also write the result there, under its command line")
    parser.add_argument("--keep", action="store_true", help="keep the run folders (databases, logs)")
    ns = parser.parse_args(argv)
    try:
        workers = tuple(int(w) for w in ns.workers.split(","))
    except ValueError:
        parser.error(f"--workers must be integers separated by commas, got {ns.workers!r}")
    if any(w < 1 for w in workers) or ns.trials < 2 or ns.repeats < 1 or ns.boot_s < 0 or ns.request_s < 0:
        parser.error("--workers and --repeats must be >= 1, --trials >= 2, --boot-s and --request-s >= 0")
    return ScalingArgs(
        workers=workers,
        trials=ns.trials,
        boot_s=ns.boot_s,
        request_s=ns.request_s,
        repeats=ns.repeats,
        out=ns.out,
        keep=ns.keep,
    )


@command(parse_args, usage=(SweepRunError,))
def main(args: ScalingArgs) -> int:
    root = Path(tempfile.mkdtemp(prefix="gsb", dir="/tmp"))  # short: Ray's socket paths live under it
    try:
        points = [measure(n, folder=root / f"run{i}-w{n}", args=args) for i, n in enumerate(args.order())]
        emit(report(points, args=args), out=args.out)
    finally:
        if args.keep:
            print(f"run folders kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
