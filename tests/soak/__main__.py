"""``python -m tests.soak``: the fault-injection soak, seeded sweeps in a row, then the table.

Each sweep is ``tests.soak.run.run_soak_sweep`` with its own seed (faults per trial, sampler,
the moments of the cluster faults). Exit status 0 when every check of every sweep held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.soak.run import SoakSpec, run_soak_sweep
from tests.soak.table import soak_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=20, help="seeded sweeps to run (default 20)")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first sweep; the next ones count up")
    parser.add_argument("--trials", type=int, default=12, help="trial budget of each sweep (default 12)")
    parser.add_argument("--workers", type=int, default=2, help="workers, one single-CPU Ray node each (default 2)")
    parser.add_argument(
        "--folder", type=Path, help="keep every sweep's files here (default: a temporary folder, removed)"
    )
    parser.add_argument("--out", type=Path, help="also write the table, with this command, to this file")
    args = parser.parse_args(argv)
    if args.sweeps < 1 or args.trials < 1 or args.workers < 1:
        parser.error("--sweeps, --trials and --workers must be at least 1")
    folder = args.folder or Path(tempfile.mkdtemp(prefix="gssoakrun"))
    began, reports = time.monotonic(), []
    try:
        for seed in range(args.first_seed, args.first_seed + args.sweeps):
            spec = SoakSpec.seeded(seed, n_trials=args.trials, workers=args.workers)
            report = run_soak_sweep(spec, folder / f"seed-{seed:03d}")
            reports.append(report)
            print(
                f"seed {seed}: {report.duration_s:.0f} s, {sum(report.rows.values())} rows, "
                f"{report.node_removals} node removal(s), {report.driver_kills} driver kill(s), "
                f"{len(report.problems)} problem(s)",
                flush=True,
            )
            for problem in report.problems:
                print(f"  PROBLEM: {problem}", flush=True)
    finally:
        if args.folder is None:
            shutil.rmtree(folder, ignore_errors=True)
    table = soak_table(reports)
    durations = sorted(r.duration_s for r in reports)
    timing = (
        f"{time.monotonic() - began:.0f} s in all; a sweep took {durations[0]:.0f} to {durations[-1]:.0f} s "
        f"(median {durations[len(durations) // 2]:.0f})"
    )
    print(f"\n{table}\n\n{timing}")
    if args.out:
        command = shlex.join(["python", "-m", "tests.soak", *(argv if argv is not None else sys.argv[1:])])
        args.out.write_text(f"$ {command}\n\n{table}\n\n{timing}\n")
    return 1 if any(report.problems for report in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
