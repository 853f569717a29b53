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
import shlex
import signal
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from engine.profiles import BenchProfile, get_profile
from errors import ConfigError, NoCompletedTrialsError, StudyMismatchError, UsageError
from sweep.interrupts import raise_interrupt

if TYPE_CHECKING:
    from sweep.claims import PromotionPlan, Verdict
    from sweep.search import StudySpec
    from sweep.store import BootRecord, TrialRecord

__all__ = ["VerifyArgs", "main", "parse_args", "print_verdicts", "select_trials"]
RUN_DIR = Path("runs")


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
    )


def select_trials(
    records: list[TrialRecord],
    *,
    study_name: str,
    top: int | None = None,
    trials: tuple[int, ...] = (),
    claims: dict[int, float] | None = None,
) -> list[TrialRecord]:
    """The rows to verify: ``trials`` by number, else the ``top`` best (by ``claims`` where given, which
    then rank first, else by TPS; feasible trials measured to the end), else the front."""
    from sweep.judgement import front_records

    claims = claims or {}
    if trials:
        # A trial multi-fidelity stopped early has no full-fidelity figure to verify a claim against.
        complete = {r.trial_number: r for r in records if r.full}
        missing = [n for n in trials if n not in complete]
        if missing:
            raise UsageError(
                f"--trials: no trial measured to the end numbered {missing} in study {study_name!r}; "
                f"measured to the end: {sorted(complete)}"
            )
        chosen = [complete[n] for n in trials]
    elif top:
        # A lossless knob (ctk) leaves every trial at one PPL, so its front is a single point:
        # "the N best" means the feasible trials, not only the non-dominated ones.
        feasible = [r for r in records if r.full and r.feasible]

        def rank(r: TrialRecord) -> tuple[bool, float, int]:
            tps = claims.get(r.trial_number, r.tps)
            assert tps is not None  # a trial measured to the end has its TPS
            return r.trial_number not in claims, -tps, r.trial_number

        chosen = sorted(feasible, key=rank)[:top]
    else:
        chosen = front_records(records)
    if not chosen:
        raise NoCompletedTrialsError(f"study {study_name!r} has no feasible measured trial to verify")
    ungated = [r.trial_number for r in chosen if r.gate is None]
    if ungated:
        raise NoCompletedTrialsError(f"trial(s) {ungated} of study {study_name!r} have no gate to verify against")
    return chosen


def print_verdicts(
    out: Console, verdicts: list[Verdict], *, knobs: dict[int, dict[str, Any]], swept: list[str], title: str
) -> None:
    """One row per trial, then each INVALID verdict's reasons in full (they are long)."""
    table = Table(title=title, title_justify="left")
    columns = [
        "trial",
        *swept,
        "claimed TPS",
        "held-out TPS min/med/max",
        "gap (90% interval)",
        "P(a re-run within 5%)",
        "public gap",
        "PPL",
        "gate",
        "verdict",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column == "verdict" else "right")
    colour = {"VERIFIED": "green", "INVALID": "red", "UNDECIDED": "yellow"}
    for v in verdicts:
        spread = "-" if v.tps_median is None else f"{v.tps_min:.2f}/{v.tps_median:.2f}/{v.tps_max:.2f}"
        gap = "-" if v.tps_gap_pct is None else f"{v.tps_gap_pct:+.1f}%"
        if v.gap_low_pct is not None:
            gap += f" ({v.gap_low_pct:+.1f}..{v.gap_high_pct:+.1f})"
        table.add_row(
            str(v.trial_number),
            *(str(knobs[v.trial_number].get(k, "")) for k in swept),
            f"{v.claimed_tps:.2f}",
            spread,
            gap,
            "-" if v.p_rerun is None else f"{v.p_rerun:.2f}",
            "-" if v.public_gap_pct is None else f"{v.public_gap_pct:+.1f}%",
            "-" if v.ppl_median is None else f"{v.ppl_median:.4f}",
            "-" if v.gate is None else f"{v.gate:.4f}",
            f"[{colour[v.verdict]}]{v.verdict}[/]",
        )
    out.print(table)
    for v in verdicts:
        if v.reasons:
            out.print(f"  trial {v.trial_number} [red]INVALID[/]: {escape(v.reason)}")
        elif v.undecided:
            out.print(f"  trial {v.trial_number} [yellow]UNDECIDED[/]: {escape(v.undecided)}")


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """What a verification boots: the trials in order (the baseline first when it resolves the gate),
    each one's profile and claim, and the gate where it is known before a boot."""

    targets: list[TrialRecord]
    profiles: dict[int, BenchProfile]
    claims: dict[int, float]
    baseline: TrialRecord | None  # booted first: its boots resolve a relative gate on the held-out references
    gates: dict[int, float | None]


def _plan(
    spec: StudySpec,
    args: VerifyArgs,
    records: list[TrialRecord],
    promotion: PromotionPlan | None,
    claims: dict[int, float],
) -> _Plan:
    targets = select_trials(records, study_name=spec.name, top=args.top, trials=args.trials, claims=claims)
    measured = {r.trial_number: r for r in records if r.full}

    def profile_of(record: TrialRecord) -> BenchProfile:
        if args.profile is not None:
            base = get_profile(args.profile)
        elif record.trial_number in claims and promotion is not None:
            base = promotion.profile
        else:
            base = BenchProfile.from_record(record.profile)
        profile = base.for_boots(verification=True, prompts=args.prompts, refs=args.refs)
        profile.load_data()  # a missing or short file is bad input before anything boots
        profile.load_heldout()
        return profile

    profiles = {r.trial_number: profile_of(r) for r in targets}
    baseline = None
    gates: dict[int, float | None] = {}
    for r in targets:
        sweep_refs = BenchProfile.from_record(r.profile)
        same = (sweep_refs.path(sweep_refs.refs), sweep_refs.ppl_records) == (
            profiles[r.trial_number].path(profiles[r.trial_number].refs),
            profiles[r.trial_number].ppl_records,
        )
        gates[r.trial_number] = spec.gate.ppl_max if spec.gate.ppl_max is not None else (r.gate if same else None)
    if any(g is None for g in gates.values()):
        baseline = next((r for r in measured.values() if r.is_baseline), None)
        if baseline is None:
            raise NoCompletedTrialsError(
                f"study {spec.name!r} has a relative gate ({spec.gate.describe()}) but no "
                "measured baseline to resolve it on the held-out references"
            )
        profiles.setdefault(baseline.trial_number, profile_of(baseline))
        targets = [t for t in targets if t.trial_number != baseline.trial_number]
    return _Plan(targets=targets, profiles=profiles, claims=claims, baseline=baseline, gates=gates)


def _dry_run(spec: StudySpec, args: VerifyArgs, plan: _Plan, out: Console) -> int:
    from engine.knobs import parse_knobs
    from engine.launch import build_launch
    from engine.secrets import redact_argv, redact_env

    order = [*([plan.baseline] if plan.baseline else []), *plan.targets]
    out.print(
        f"dry run of verify {spec.name}: {len(plan.targets)} trial(s) x {args.repeats} fresh boot(s)"
        + (f", after the baseline's {_baseline_boots(args)}" if plan.baseline else "")
        + "; nothing is booted",
        markup=False,
    )
    for r in order:
        p = plan.profiles[r.trial_number]
        claim = plan.claims.get(r.trial_number, r.tps)
        role = f"claim {claim:.2f} tok/s" + (
            "; the baseline, booted first: its PPL resolves the gate" if r is plan.baseline else ""
        )
        launch = build_launch(spec.manifest, parse_knobs(spec.manifest, r.knobs))
        out.print(
            f"\ntrial {r.trial_number} ({role}); profile {p.name}: {p.num_prompts} held-out prompts ({p.heldout_prompts}) "
            f"and {p.num_prompts} public ({p.prompts}) x {p.output_len} tokens a boot, PPL on {p.refs}",
            markup=False,
        )
        out.print(f"  argv: {shlex.join(redact_argv(launch.argv))}", markup=False, soft_wrap=True)
        for key, value in redact_env(launch.env).items():
            out.print(f"  env:  {key}={value}", markup=False, soft_wrap=True)
    return 0


def _verify(args: VerifyArgs, out: Console) -> int:
    # Imported here: Ray and Optuna take seconds to import, and bad input should fail fast.
    from sweep.claims import load_evidence
    from sweep.search import load_study
    from sweep.store import open_existing

    spec = load_study(args.study, manifest=args.manifest)
    storage = open_existing(args.storage)
    try:
        evidence = load_evidence(storage, spec.name, floor=spec.promotion.noise_floor)
        stored = evidence.user_attrs.get("manifest")
        if stored is not None and stored != spec.manifest.name:
            raise StudyMismatchError(
                f"study {spec.name!r} was measured with manifest {stored!r}, not {spec.manifest.name!r}: "
                "pass the sweep's --manifest"
            )
        view = evidence.claims
        unfinished = view.unfinished() if view else None
        if unfinished is not None and not args.trials:
            raise UsageError(
                f"study {spec.name!r}: {unfinished}, so its claims are nothing to verify yet: "
                f"`python -m sweep.run --study {args.study}` goes on with it (or name --trials)"
            )
        claims = {c.trial_number: c.claim for c in view.claims} if view and unfinished is None else {}
        plan = _plan(spec, args, list(evidence.records), evidence.plan, claims)
        if args.dry_run:
            return _dry_run(spec, args, plan, out)
        return _boot_and_judge(spec, args, plan, storage, list(evidence.boots["promotion"]), evidence.target, out)
    finally:
        storage.close()


def _baseline_boots(args: VerifyArgs) -> int:
    return args.repeats if args.baseline_boots is None else args.baseline_boots


def _stored_run(args: VerifyArgs, storage: Any, study_name: str, expected: list[int]) -> list[BootRecord]:
    """``--resume``'s stored boots, checked to be the start of this plan (else bad input, nothing booted)."""
    if args.resume is None:
        return []
    stored = [b for b in storage.boots("verification", study_name) if b.run_id == args.resume]
    if not stored:
        raise UsageError(f"--resume {args.resume}: no verification run of that id in study {study_name!r}")
    got = [b.trial_number for b in stored]
    if got != expected[: len(got)]:
        raise UsageError(
            f"--resume {args.resume}: its stored boots (trials {got}) are not the start of this plan "
            f"(trials {expected}): give the run's own --trials/--top, --repeats and --baseline-boots"
        )
    return stored


def _boot_and_judge(
    spec: StudySpec,
    args: VerifyArgs,
    plan: _Plan,
    storage: Any,
    promoted: list[BootRecord],
    target: float,
    out: Console,
) -> int:
    from sweep.claims import BootRunner, interleave, judge, run_boots
    from sweep.search import check_capacity, ray_session

    started = time.monotonic()
    deadline = None if args.time_limit is None else started + args.time_limit
    order = [*([plan.baseline] if plan.baseline else []), *plan.targets]
    n_base = _baseline_boots(args) if plan.baseline else 0
    expected = [plan.baseline.trial_number] * n_base if plan.baseline else []
    expected += [r.trial_number for _ in range(args.repeats) for r in plan.targets]
    boots = _stored_run(args, storage, spec.name, expected)
    run_id = args.resume or uuid.uuid4().hex[:12]
    total = len(expected)
    out.print(
        f"[bold]verify {spec.name}[/]: {len(plan.targets)} trial(s) x {args.repeats} fresh boot(s)"
        + (f" after the baseline's {n_base}" if n_base else "")
        + f", each timing the held-out and the public prompts; run {run_id}"
        + (f", going on after {len(boots)} of {total} stored boot(s)" if boots else "")
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the engines it starts must not reach a hub
    previous_handler = signal.signal(signal.SIGTERM, raise_interrupt)
    gates = dict(plan.gates)

    def profile(record: TrialRecord) -> BenchProfile:
        return plan.profiles[record.trial_number]

    def go_on(phase: list[Any]) -> bool:
        """Run what the stored boots leave of ``phase`` (its boots' orders are the run's); True when stopped."""
        done = sum(1 for b in boots if b.order in {p.order for p in phase})
        ran, stopped = run_boots(
            phase,
            runner=runner,
            storage=storage,
            kind="verification",
            run_id=run_id,
            out=out,
            done=done,
            deadline=deadline,
            earlier=[b.timings["total"] for b in boots if "total" in b.timings],
            total=total,
        )
        boots.extend(ran)
        return stopped

    try:
        with ray_session(address=args.ray_address, temp_dir=RUN_DIR / "ray"):
            check_capacity(spec.resources)
            runner = BootRunner(spec, run_dir=RUN_DIR)
            try:
                if plan.baseline is not None:
                    first = interleave(
                        [plan.baseline], boots=n_base, profile=profile, claims=plan.claims, gate=lambda _: None
                    )
                    if go_on(first):
                        return _stopped(out, run_id, len(boots), total)
                    ppls = [b.ppl for b in boots if b.measured and b.trial_number == plan.baseline.trial_number]
                    resolved = spec.gate.resolve(statistics.median(ppls) if ppls else None)  # type: ignore[type-var]
                    if resolved is None:
                        out.print(
                            "[red]the baseline failed on the held-out set: the relative gate cannot be resolved[/]"
                        )
                        return 1
                    gates = {n: resolved if g is None else g for n, g in gates.items()}
                laid = interleave(
                    plan.targets,
                    boots=args.repeats,
                    profile=profile,
                    claims=plan.claims,
                    gate=lambda r: gates[r.trial_number],
                    start=n_base,
                )
                if go_on(laid):
                    return _stopped(out, run_id, len(boots), total)
            finally:
                runner.stop()
    except KeyboardInterrupt:
        out.print(f"interrupted: {len(boots)} of {total} boot(s) stored (run {run_id}); --resume {run_id} goes on")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    floor = spec.promotion.noise_floor
    verdicts = [
        judge(
            [b for b in boots if b.trial_number == r.trial_number],
            beside=[*promoted, *(b for b in boots if b.trial_number != r.trial_number)],
            floor=floor,
            target=target,
        )
        for r in order
    ]
    title = (
        f"Verification of {spec.name}, run {run_id}: VERIFIED when the 90% interval of the held-out TPS lies within 5% "
        f"of the claim, one more re-run lands within 5% with P >= {target:g}, and the PPL is under the gate "
        f"({spec.gate.describe()} on the held-out references); INVALID when the interval lies outside, UNDECIDED "
        "otherwise"
    )
    print_verdicts(out, verdicts, knobs={r.trial_number: r.knobs for r in order}, swept=list(spec.space), title=title)
    return 0 if all(v.verdict == "VERIFIED" for v in verdicts) else 1


def _stopped(out: Console, run_id: str, stored: int, total: int) -> int:
    hint = f"the same command with --resume {run_id} goes on" if stored else "nothing to resume: give it more time"
    out.print(f"time limit: {stored} of {total} boot(s) stored (run {run_id}), no verdict yet; {hint}", markup=False)
    return 3


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = max(out.width, 160)  # a log file has no width to fit: keep the table's rows whole
    try:
        return _verify(args, out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
