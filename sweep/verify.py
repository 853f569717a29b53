"""``python -m sweep.verify --study ctk``: re-run points as the organisers' private re-run would, and judge them.

Each selected trial (the ``--trials`` named; or with ``--top N`` the N best: by claim where the study
was promoted, the recommended point first, else the N fastest feasible trials; by default every
feasible front point) is booted fresh ``--repeats`` times (default 3) on a Ray worker pinned like the
sweep's own, the boots of the trials interleaved (A B A B ...). Every boot times one run of the
held-out prompts (the profile's ``heldout_prompts``, or ``--prompts``) and, in alternating order,
one of the public prompts, then scores PPL on the held-out references (``heldout_refs``, or
``--refs``). A trial is held to its promotion claim (``sweep.claims``) and measured at the
promotion's profile, or, never promoted, to its sweep TPS at its own profile (``--profile``
overrides the sizes). A relative gate (``ppl_max_ratio``) is re-resolved on the held-out
references from the baseline's boots, run first, unless those references are the sweep's own.
Every boot is a row of ``verifications``; the verdict (VERIFIED, INVALID or UNDECIDED, with its 90%
interval and the odds of one more re-run) is ``sweep.claims.judge``, with the study's noise floor
and target. An unfinished promotion's claims are nothing to verify: only ``--trials`` goes on then.
``--dry-run`` prints the plan and each boot's argv and env, and boots nothing. ``--baseline-boots N``
boots the baseline N times instead of ``--repeats`` (its PPL moves far less than a TPS). ``--time-limit S`` starts no boot that the boots so far say
would end after S seconds; ``--resume RUN`` goes on with run RUN's stored boots (the same plan),
so a verification longer than one sitting (or one command on a lent machine) is not lost.

Exit status: 0 every trial VERIFIED, 1 at least one INVALID or UNDECIDED, 2 bad input (one line on
stderr, nothing booted), 3 stopped at ``--time-limit`` with boots left (those run are stored;
``--resume RUN`` goes on), 130 interrupted (likewise).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from cli import command
from sweep.runs import RUN_DIR

__all__ = ["VerifyArgs", "main", "parse_args"]


@dataclass(frozen=True, kw_only=True)
class VerifyArgs:
    study: str
    storage: str
    prompts: str | None  # None: the profile's held-out sets
    refs: str | None
    top: int | None
    trials: tuple[int, ...]
    repeats: int
    profile: str | None
    manifest: str | None
    ray_address: str | None
    dry_run: bool = False
    baseline_boots: int | None = None  # None: --repeats
    time_limit: float | None = None
    resume: str | None = None
    accelerator: str | None = None  # None: the study's [resources] accelerator_type


def _absolute(value: str | None) -> str | None:
    """A path the user typed is relative to where they typed it; profiles resolve the rest."""
    return None if value is None else str(Path(value).expanduser().resolve())


def parse_args(argv: list[str] | None = None) -> VerifyArgs:
    from sweep.store import DEFAULT_STORAGE_URL

    parser = argparse.ArgumentParser(prog="python -m sweep.verify", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="the study as sweep.run was given it (name or .toml path)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--prompts", help="held-out prompt set, ShareGPT JSON (default: the profile's heldout_prompts)")
    parser.add_argument("--refs", help="held-out PPL reference set, JSONL (default: the profile's heldout_refs)")
    parser.add_argument(
        "--top", type=int, help="the N best (by claim where promoted, else by TPS) instead of the front"
    )
    parser.add_argument("--trials", help="comma-separated trial numbers to verify instead of the front")
    parser.add_argument("--repeats", type=int, default=3, help="fresh boots per trial (default 3)")
    parser.add_argument("--profile", help="measure with this profile's sizes (default: the claim's profile)")
    parser.add_argument("--manifest", help="the study's manifest, if sweep.run was given --manifest")
    parser.add_argument("--ray-address", help="join this Ray cluster (default: start a local one)")
    parser.add_argument(
        "--accelerator",
        metavar="TYPE",
        help="pin the boots to this accelerator type instead of the study's (any: none)",
    )
    parser.add_argument(
        "--baseline-boots",
        type=int,
        help="fresh boots of the baseline that resolve a relative gate (default --repeats)",
    )
    parser.add_argument("--time-limit", type=float, help="start no boot that would end after S seconds")
    parser.add_argument("--resume", metavar="RUN", help="go on with this verification run's stored boots")
    parser.add_argument("--dry-run", action="store_true", help="print what would boot; boot nothing")
    ns = parser.parse_args(argv)
    if ns.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {ns.repeats}")
    if ns.baseline_boots is not None and ns.baseline_boots < 1:
        parser.error(f"--baseline-boots must be at least 1, got {ns.baseline_boots}")
    if ns.time_limit is not None and not ns.time_limit > 0:
        parser.error(f"--time-limit must be a positive number of seconds, got {ns.time_limit}")
    if ns.top is not None and ns.top < 1:
        parser.error(f"--top must be at least 1, got {ns.top}")
    trials: tuple[int, ...] = ()
    if ns.trials:
        try:
            trials = tuple(int(part) for part in ns.trials.split(","))
        except ValueError:
            parser.error(f"--trials must be comma-separated trial numbers, got {ns.trials!r}")
        if ns.top is not None:
            parser.error("--top and --trials exclude each other")
    return VerifyArgs(
        study=ns.study,
        storage=ns.storage,
        prompts=_absolute(ns.prompts),
        refs=_absolute(ns.refs),
        top=ns.top,
        trials=trials,
        repeats=ns.repeats,
        profile=ns.profile,
        manifest=ns.manifest,
        ray_address=ns.ray_address,
        dry_run=ns.dry_run,
        baseline_boots=ns.baseline_boots,
        time_limit=ns.time_limit,
        resume=ns.resume,
        accelerator=ns.accelerator,
    )


def _verify(args: VerifyArgs, out: Console) -> int:
    # Imported here: Ray and Optuna take seconds to import, and bad input should fail fast.
    from sweep.claims import plan_verification, print_plan, print_verdicts, verify
    from sweep.reading import open_study

    with open_study(args.study, storage=args.storage, manifest=args.manifest, accelerator=args.accelerator) as opened:
        spec, storage, evidence = opened.spec, opened.storage, opened.evidence
        plan = plan_verification(
            spec,
            evidence,
            top=args.top,
            trials=args.trials,
            repeats=args.repeats,
            baseline_boots=args.baseline_boots,
            profile=args.profile,
            prompts=args.prompts,
            refs=args.refs,
        )
        if args.dry_run:
            print_plan(spec, plan, out)
            return 0
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the engines it starts must not reach a hub
        run_id, verdicts = verify(
            spec,
            storage,
            evidence,
            plan,
            out=out,
            run_dir=RUN_DIR,
            resume=args.resume,
            ray_address=args.ray_address,
            deadline=None if args.time_limit is None else time.monotonic() + args.time_limit,
        )
    if verdicts is None:
        return 3
    if not verdicts:
        return 1
    title = (
        f"Verification of {spec.name}, run {run_id}: VERIFIED when the 90% interval of the held-out TPS lies within 5% "
        f"of the claim, one more re-run lands within 5% with P >= {evidence.target:g}, and the PPL is under the gate "
        f"({spec.gate.describe(lengths=False)} on the held-out references); INVALID when the interval lies outside, UNDECIDED "
        "otherwise"
    )
    print_verdicts(
        out, verdicts, knobs={r.trial_number: r.knobs for r in plan.order}, swept=list(spec.space), title=title
    )
    return 0 if all(v.verdict == "VERIFIED" for v in verdicts) else 1


@command(parse_args, interrupted=True)
def main(args: VerifyArgs) -> int:
    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = max(out.width, 160)  # a log file has no width to fit: keep the table's rows whole
    return _verify(args, out)


if __name__ == "__main__":
    sys.exit(main())
