"""``python -m benchmarks.overhead``: where each trial's wall time goes.

Runs a short study on the reference stack (``joint``, 4 trials, its quick profile) with
``python -m sweep.run``, or reads a study someone already ran (``--storage URL --study NAME``),
and splits each trial into boot, warm-up, TPS, PPL, engine stop, and everything else: Ray
dispatch and return, the worker's own bookkeeping, the driver's database writes and tells, and
the driver's time between one trial's tell and the next one's ask (``benchmarks._timeline``).
The goal: everything else under 2% of a trial. The one-off cost of a run (interpreter, imports,
Ray start, exports) is reported apart, as a share of the whole command.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks._report import emit, table
from benchmarks._sweeps import SweepRun, load_note, run_sweep
from benchmarks._timeline import TrialTiming, load_timeline
from cli import command
from errors import NoCompletedTrialsError, SweepRunError
from sweep.search import load_study, study_path

__all__ = ["Share", "main", "shares"]

GOAL = 0.02
SHOWN = ("boot", "warmup", "tps", "ppl", "stop")


@dataclass(frozen=True, kw_only=True)
class Args:
    study: str
    trials: int
    profile: str | None
    storage: str | None  # given: read that study, run nothing
    out: Path | None


@dataclass(frozen=True, kw_only=True)
class Share:
    """One trial's time: the engine's phases, and the rest, from its ask to the next ask."""

    timing: TrialTiming
    gap_s: float  # the driver's time from this tell to the next ask (sequential studies)

    @property
    def span_s(self) -> float:
        return self.timing.wall_s + self.gap_s

    @property
    def phases(self) -> dict[str, float]:
        p = self.timing.phases
        return {
            "boot": p.get("boot", 0.0),
            "warmup": p.get("warmup", 0.0),
            "tps": p.get("tps", 0.0) + p.get("stream", 0.0),
            "ppl": p.get("ppl", 0.0),
            "stop": p.get("stop", 0.0),
        }

    @property
    def other_s(self) -> float:
        return self.span_s - sum(self.phases.values())


def shares(timeline: list[TrialTiming]) -> tuple[list[Share], bool]:
    """Per trial; the gaps count only when the trials ran one after another (returned flag)."""
    sequential = all(b.asked >= a.told for a, b in zip(timeline, timeline[1:]))
    gaps = [(b.asked - a.told).total_seconds() if sequential else 0.0 for a, b in zip(timeline, timeline[1:])]
    return [Share(timing=t, gap_s=g) for t, g in zip(timeline, [*gaps, 0.0])], sequential


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 else "-"


def report(items: list[Share], *, sequential: bool, study: str, run: SweepRun | None, loads: list[str]) -> str:
    rows = []
    for s in items:
        t = s.timing
        knobs = " ".join(f"{k[:1]}{v}" for k, v in sorted(t.knobs.items()))
        label = f"{t.number}{' (baseline)' if t.is_baseline else ''}{'' if t.status == 'complete' else ' FAILED'}"
        rows.append(
            [
                label,
                knobs,
                f"{s.span_s:.1f}",
                *(_pct(s.phases[p], s.span_s) for p in SHOWN),
                _pct(s.other_s, s.span_s),
                f"{s.other_s:.2f}",
            ]
        )
    total = sum(s.span_s for s in items)
    phase_total = {p: sum(s.phases[p] for s in items) for p in SHOWN}
    other_total = sum(s.other_s for s in items)
    rows.append(
        [
            "all",
            "",
            f"{total:.1f}",
            *(_pct(phase_total[p], total) for p in SHOWN),
            _pct(other_total, total),
            f"{other_total:.2f}",
        ]
    )
    headers = ["trial", "knobs (c=CTK n=spec s=window)", "span s", *SHOWN, "other", "other s"]
    worst = max(s.other_s / s.span_s for s in items)
    lines = [
        f"study {study!r}: {len(items)} trials; span = ask to the next trial's ask "
        f"({'sequential: the driver between trials counts as other' if sequential else 'overlapping trials: ask to tell'})",
        "",
        table(headers, rows),
        "",
        "other = orchestration: Ray dispatch and return, run_trial's bookkeeping outside the phases,",
        "        the driver's row write and tell, and its time from one tell to the next ask",
        f"goal: other < {GOAL:.0%} of a trial; worst trial {worst:.2%}, all trials {other_total / total:.2%}: "
        f"{'met' if worst < GOAL else 'NOT met'}",
        "orchestration split (all trials): "
        f"dispatch/return before the row {sum(s.timing.before_row_s for s in items):.2f} s, "
        f"row to tell {sum(s.timing.row_to_tell_s for s in items):.2f} s, "
        f"run_trial bookkeeping {sum(s.timing.in_trial_rest_s for s in items):.2f} s, "
        f"tell to next ask {sum(s.gap_s for s in items):.2f} s",
    ]
    if run is not None:
        fixed = run.wall_s - total
        lines.append(
            f"the whole command took {run.wall_s:.1f} s: {fixed:.1f} s ({_pct(fixed, run.wall_s)}) once per run "
            "outside the trials (interpreter, imports, Ray start, study setup, exports)"
        )
    lines += [f"load {load}" for load in loads]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--study",
        default="joint",
        help="study to run (a name in studies/ or a .toml), or to read "
        "with --storage (its name in the database); default joint",
    )
    parser.add_argument("--trials", type=int, default=4, help="trials to run, the baseline included (default 4)")
    parser.add_argument("--profile", help="benchmark profile (default: the study's)")
    parser.add_argument("--storage", help="read this database's study instead of running one")
    parser.add_argument("--out", type=Path, help="also write the result there, under its command line")
    ns = parser.parse_args(argv)
    if ns.trials < 1:
        parser.error(f"--trials must be at least 1, got {ns.trials}")
    return Args(study=ns.study, trials=ns.trials, profile=ns.profile, storage=ns.storage, out=ns.out)


@command(parse_args, usage=(SweepRunError,))
def main(args: Args) -> int:
    folder = None
    try:
        if args.storage is not None:
            run, url, name, loads = None, args.storage, args.study, []
        else:
            study = study_path(args.study)  # absolute: sweep.run runs in its own folder
            name = load_study(study, profile=args.profile).name  # bad input fails before anything boots
            folder = Path(tempfile.mkdtemp(prefix="gsb", dir="/tmp"))  # short: Ray's socket paths live under it
            url = f"sqlite:///{folder / 'overhead.db'}"
            extra = ["--profile", args.profile] if args.profile else []
            loads = [f"before: {load_note()}"]
            run = run_sweep(
                "--study", str(study), "--trials", str(args.trials), "--storage", url, *extra, folder=folder
            )
            loads.append(f"after: {load_note()}")
        timeline = load_timeline(url, name)
        if not timeline:
            raise NoCompletedTrialsError(f"study {name!r} in {url} has no finished trial to time")
        items, sequential = shares(timeline)
        emit(report(items, sequential=sequential, study=name, run=run, loads=loads), out=args.out)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
