"""A verification: fresh boots of chosen points as the organisers' private re-run would make them, judged.

``plan_verification`` chooses what to boot: the trials named, or the N best (by claim where the study was
promoted, the recommended point first, else the fastest feasible trials), or every feasible front point;
each at the promotion's profile where it was promoted (its own otherwise), its held-out prompts and
references; and, where a relative gate must be resolved on references the sweep never scored, the baseline,
booted first. ``verify`` runs that plan through ``FreshBoots`` (A B A B ..., each boot timing the held-out
prompts and, in alternating order, the public ones, then PPL) and judges every trial
(``sweep.claims.judge``) with the floor and the target its promotion's plan stored.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from engine.config import BenchProfile, get_profile, parse_knobs
from engine.launch import build_launch
from engine.secrets import redact_argv, redact_env
from errors import NoCompletedTrialsError, UsageError
from sweep.claims._evidence import StudyEvidence
from sweep.claims._runner import FreshBoots, PlannedBoot, interleave
from sweep.claims._verdict import Verdict, judge
from sweep.judgement import front_records
from sweep.search import StudySpec
from sweep.store import Storage, TrialRecord, ppl_limit

__all__ = ["VerificationPlan", "plan_verification", "print_plan", "select_trials", "verify"]


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
            return r.trial_number not in claims, -claims.get(r.trial_number, r.tps or 0.0), r.trial_number

        chosen = sorted(feasible, key=rank)[:top]
    else:
        chosen = front_records(records)
    if not chosen:
        raise NoCompletedTrialsError(f"study {study_name!r} has no feasible measured trial to verify")
    ungated = [r.trial_number for r in chosen if r.gate is None]
    if ungated:
        raise NoCompletedTrialsError(f"trial(s) {ungated} of study {study_name!r} have no gate to verify against")
    return chosen


@dataclass(frozen=True, kw_only=True)
class VerificationPlan:
    """What a verification boots: the trials in order (the baseline first where it resolves the gate), each
    one's profile and claim, and the gate where it is known before a boot."""

    targets: list[TrialRecord]
    profiles: dict[int, BenchProfile]
    claims: dict[int, float]
    baseline: TrialRecord | None  # booted first: its boots resolve a relative gate on the held-out references
    gates: dict[int, float | None]
    repeats: int
    baseline_boots: int

    @property
    def order(self) -> list[TrialRecord]:
        return [*([self.baseline] if self.baseline else []), *self.targets]

    @property
    def expected(self) -> list[int]:
        """The trial of every boot of the run, in order."""
        first = [self.baseline.trial_number] * self.baseline_boots if self.baseline else []
        return first + [r.trial_number for _ in range(self.repeats) for r in self.targets]

    def _profile(self, record: TrialRecord) -> BenchProfile:
        return self.profiles[record.trial_number]

    def baseline_run(self) -> list[PlannedBoot]:
        if self.baseline is None:
            return []
        return interleave(
            [self.baseline], boots=self.baseline_boots, profile=self._profile, claims=self.claims, gate=lambda _: None
        )

    def targets_run(self, gates: dict[int, float | None]) -> list[PlannedBoot]:
        start = self.baseline_boots if self.baseline else 0
        return interleave(
            self.targets,
            boots=self.repeats,
            profile=self._profile,
            claims=self.claims,
            gate=lambda r: gates[r.trial_number],
            start=start,
        )


def plan_verification(
    spec: StudySpec,
    evidence: StudyEvidence,
    *,
    top: int | None,
    trials: tuple[int, ...],
    repeats: int,
    baseline_boots: int | None,
    profile: str | None,
    prompts: str | None,
    refs: str | None,
) -> VerificationPlan:
    """The plan (see the module's docstring); raises ConfigError for what cannot be verified, nothing booted."""
    view = evidence.claims
    unfinished = view.unfinished() if view else None
    if unfinished is not None and not trials:
        raise UsageError(
            f"study {spec.name!r}: {unfinished}, so its claims are nothing to verify yet: "
            f"`python -m sweep.run --study {spec.name}` goes on with it (or name --trials)"
        )
    claims = {n: c.claim for n, c in view.best_claims().items()} if view and unfinished is None else {}
    records = list(evidence.records)
    targets = select_trials(records, study_name=spec.name, top=top, trials=trials, claims=claims)
    measured = {r.trial_number: r for r in records if r.full}

    def profile_of(record: TrialRecord) -> BenchProfile:
        if profile is not None:
            base = get_profile(profile)
        elif record.trial_number in claims and evidence.plan is not None:
            base = evidence.plan.profile
        else:
            base = BenchProfile.from_record(record.profile)
        chosen = base.for_boots(verification=True, prompts=prompts, refs=refs)
        chosen.load_data()  # a missing or short file is bad input before anything boots
        chosen.load_heldout()
        return chosen

    profiles = {r.trial_number: profile_of(r) for r in targets}
    searched = next((r for r in measured.values() if r.is_baseline), None)
    # known before a boot where the trial's profile scores the sweep's references; else its baseline's boots tell
    gates = {r.trial_number: ppl_limit(spec.gate, profiles[r.trial_number], baseline=searched) for r in targets}
    baseline = None
    if any(g is None for g in gates.values()):
        baseline = searched
        if baseline is None:
            raise NoCompletedTrialsError(
                f"study {spec.name!r} has a relative gate ({spec.gate.describe()}) but no "
                "measured baseline to resolve it on the held-out references"
            )
        profiles.setdefault(baseline.trial_number, profile_of(baseline))
        targets = [t for t in targets if t.trial_number != baseline.trial_number]
    return VerificationPlan(
        targets=targets,
        profiles=profiles,
        claims=claims,
        baseline=baseline,
        gates=gates,
        repeats=repeats,
        baseline_boots=repeats if baseline_boots is None else baseline_boots,
    )


def print_plan(spec: StudySpec, plan: VerificationPlan, out: Console) -> None:
    """The dry run: what every boot would start, booting nothing."""
    out.print(
        f"dry run of verify {spec.name}: {len(plan.targets)} trial(s) x {plan.repeats} fresh boot(s)"
        + (f", after the baseline's {plan.baseline_boots}" if plan.baseline else "")
        + "; nothing is booted",
        markup=False,
    )
    for r in plan.order:
        p = plan.profiles[r.trial_number]
        claim = plan.claims.get(r.trial_number, r.tps or 0.0)
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


def verify(
    spec: StudySpec,
    storage: Storage,
    evidence: StudyEvidence,
    plan: VerificationPlan,
    *,
    out: Console,
    run_dir: Path,
    resume: str | None = None,
    ray_address: str | None = None,
    deadline: float | None = None,
) -> tuple[str, list[Verdict] | None]:
    """Boot the plan and judge it: the run's id and its verdicts, in the plan's order; None for the verdicts
    when the deadline left boots unrun (the run said how to go on), none when the baseline could not resolve the
    gate (it said so). ``resume``: the run to go on with."""
    run = FreshBoots(
        spec,
        storage,
        kind="verification",
        out=out,
        run_dir=run_dir,
        resume=resume,
        expected=plan.expected,
        go_on="the same command with --resume {run} goes on",
        ray_address=ray_address,
        deadline=deadline,
    )
    out.print(
        f"[bold]verify {spec.name}[/]: {len(plan.targets)} trial(s) x {plan.repeats} fresh boot(s)"
        + (f" after the baseline's {plan.baseline_boots}" if plan.baseline else "")
        + f", each timing the held-out and the public prompts; run {run.run_id}"
        + (f", going on after {run.stored} of {run.total} stored boot(s)" if run.stored else "")
    )
    gates = dict(plan.gates)
    with run:
        if plan.baseline is not None:
            if not run.boot(plan.baseline_run()):
                return run.run_id, None
            on = plan.profiles[plan.baseline.trial_number]
            resolved = ppl_limit(spec.gate, on, baseline=plan.baseline, boots=run.boots)
            if resolved is None:
                out.print("[red]the baseline failed on the held-out set: the relative gate cannot be resolved[/]")
                return run.run_id, []
            gates = {n: resolved if g is None else g for n, g in gates.items()}
        if not run.boot(plan.targets_run(gates)):
            return run.run_id, None
    before = evidence.measured_before()
    verdicts = [
        judge(
            [b for b in run.boots if b.trial_number == r.trial_number],
            beside=[*before, *(b for b in run.boots if b.trial_number != r.trial_number)],
            floor=evidence.floor,
            target=evidence.target,
        )
        for r in plan.order
    ]
    return run.run_id, verdicts
