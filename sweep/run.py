"""``python -m sweep.run --study ctk``: run or resume a study; see ``--help``.

Exit status: 0 done, 1 the study could not go on (its baseline failed for good, or workers
cannot start on the cluster), 2 bad input
(one line on stderr, nothing booted), 130 interrupted (the in-flight trials are re-queued and
the same command resumes).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape

from cli import command
from errors import SweepStopped
from sweep.interrupts import raise_interrupt
from sweep.runs import RUN_DIR
from sweep.search import StudySpec, load_study
from sweep.store import DEFAULT_STORAGE_URL, password_note, shown_url

__all__ = ["RunArgs", "main", "parse_args"]


@dataclass(frozen=True, kw_only=True)
class RunArgs:
    study: str
    storage: str
    trials: int | None
    profile: str | None
    manifest: str | None
    workers: int | None
    fidelity: str | None
    time_limit: float | None
    ray_address: str | None
    accelerator: str | None
    dry_run: bool

    def resume_command(self) -> str:
        """The command that resumes this run, as it may be printed: a storage password as ``***``,
        and then, on a line of its own, the note that says so (``sweep.store``)."""
        parts = ["python", "-m", "sweep.run", "--study", self.study]
        for flag, value in (
            ("--storage", None if self.storage == DEFAULT_STORAGE_URL else shown_url(self.storage)),
            ("--trials", self.trials),
            ("--profile", self.profile),
            ("--manifest", self.manifest),
            ("--workers", self.workers),
            ("--fidelity", self.fidelity),
            ("--time-limit", self.time_limit),
            ("--ray-address", self.ray_address),
            ("--accelerator", self.accelerator),
        ):
            if value is not None:
                parts += [flag, str(value)]
        note = password_note(self.storage)
        return shlex.join(parts) + ("" if note is None else f"\n{note}")


def parse_args(argv: list[str] | None = None) -> RunArgs:
    parser = argparse.ArgumentParser(
        prog="python -m sweep.run",
        description="Run or resume a Pareto sweep (TPS vs PPL under the gate) of a serving stack.",
    )
    parser.add_argument("--study", required=True, help="a study in studies/ (ctk, window, spec, joint) or a .toml path")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--trials", type=int, help="trial budget for this run, the baseline included")
    parser.add_argument("--profile", help="benchmark profile from studies/profiles.toml (quick, challenge, ...)")
    parser.add_argument("--manifest", help="swap the study's stack: a name in studies/manifests/ or a path")
    parser.add_argument("--workers", type=int, help="trials in flight at once (one engine each)")
    parser.add_argument(
        "--fidelity",
        choices=("multi", "full"),
        help="override the study's [fidelity] mode: full measures every trial to the end",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="start no trial that would end after this many seconds (the trials so far say how "
        "long one takes); the same command resumes",
    )
    parser.add_argument("--ray-address", help="join this Ray cluster (default: start a local one)")
    parser.add_argument(
        "--accelerator",
        metavar="TYPE",
        help="pin the trials to nodes of this accelerator type instead of the study's (H100, H200, A10G; any: no "
        "pin), for a lent machine of another card; each trial records the card it ran on",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the trials' argv and env; boot nothing")
    ns = parser.parse_args(argv)
    for name in ("trials", "workers", "time_limit"):
        value = getattr(ns, name)
        if value is not None and not value >= 1:  # NaN included
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    return RunArgs(
        study=ns.study,
        storage=ns.storage,
        trials=ns.trials,
        profile=ns.profile,
        manifest=ns.manifest,
        workers=ns.workers,
        fidelity=ns.fidelity,
        time_limit=ns.time_limit,
        ray_address=ns.ray_address,
        accelerator=ns.accelerator,
        dry_run=ns.dry_run,
    )


def _sweep(spec: StudySpec, args: RunArgs, out: Console) -> int:
    # Imported here: Ray and Optuna take seconds to import, and bad input should fail fast.
    import optuna

    from sweep.claims import confirm, print_claims, print_serving_claims, promote, study_noise
    from sweep.search import SweepConsole, export_results, ray_session, run_study
    from sweep.store import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the console reports every trial itself
    storage = open_storage(args.storage)
    console = SweepConsole(out)
    began = time.monotonic()
    deadline = None if args.time_limit is None else began + args.time_limit
    view = None
    try:
        with ray_session(address=args.ray_address, temp_dir=RUN_DIR / "ray"):
            # After ray.init, which installs its own SIGTERM handler (a bare exit): under
            # `timeout`, systemd or a scheduler, TERM then stops as cleanly as Ctrl-C does.
            signal.signal(signal.SIGTERM, raise_interrupt)
            result = run_study(spec, storage, console=console, run_dir=RUN_DIR, time_limit_s=args.time_limit)
            if not result.stopped_for_time:
                view = promote(spec, storage, out=out, run_dir=RUN_DIR, deadline=deadline)
        if view is not None and view.complete:
            # the confirmation is a later run of its own: its boots, which alone make the claim, start with a new
            # Ray session and new workers (ray_session joins the caller's where it already runs one)
            view = confirm(spec, storage, out=out, run_dir=RUN_DIR, deadline=deadline, ray_address=args.ray_address)
    except KeyboardInterrupt:
        out.print(f"resume with: {args.resume_command()}", markup=False)
        return 130
    except SweepStopped as exc:
        out.print(f"[red]stopped:[/] {escape(str(exc))}")
        out.print(f"once fixed, resume with: {args.resume_command()}", markup=False)
        return 1
    finally:
        storage.close()
    noise = study_noise(result.records, [] if view is None else view.boots, floor=spec.promotion.noise_floor)
    console.front(
        result.records,
        knobs=list(spec.space),
        noise=noise,
        title=f"Pareto front of {spec.name} ({spec.gate.describe()}), from the search: one boot per trial",
        claims=None if view is None else {n: f"{c.claim:.2f} ({c.odds_text()})" for n, c in view.best_claims().items()},
    )
    if spec.serving is not None:
        console.serving_front(result.records, knobs=list(spec.space), slo=spec.serving)
    if view is not None and view.plan.slo is not None:  # a serving study ends with its claim of goodput
        print_serving_claims(out, view, knobs=list(spec.space), study=spec.name)
    elif view is not None:
        print_claims(out, view, knobs=list(spec.space), study=spec.name)
    console.summary(result.progress, db=shown_url(args.storage))
    if result.stopped_for_time:
        out.print(
            f"time limit reached with {result.progress.budget - result.progress.done} trial(s) of the budget left; "
            f"resume with: {args.resume_command()}",
            markup=False,
        )
    elif view is not None and view.unfinished() is not None:
        out.print(f"time limit reached: {view.unfinished()}; resume with: {args.resume_command()}", markup=False)
    export_results(spec.name, args.storage, out=out, run_dir=RUN_DIR)
    return 0


@command(parse_args)
def main(args: RunArgs) -> int:
    # Off a terminal (CI, a log file) rich would wrap at 80 columns: give tables room instead.
    out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    spec = load_study(
        args.study,
        manifest=args.manifest,
        profile=args.profile,
        n_trials=args.trials,
        workers=args.workers,
        fidelity=args.fidelity,
        accelerator=args.accelerator,
    )
    if args.dry_run:
        from sweep.search import print_dry_run

        print_dry_run(spec, out=out)
        return 0
    return _sweep(spec, args, out)


if __name__ == "__main__":
    sys.exit(main())
