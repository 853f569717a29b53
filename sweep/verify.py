"""``python -m sweep.verify --study ctk``: re-run the front on held-out prompts, as organisers would.

Each selected trial (every feasible front point; or with ``--top N`` the N fastest feasible
trials, front or not, which is what a submission would pick; or the ``--trials`` named) is
booted fresh ``--repeats`` times on a Ray worker pinned like the sweep's own, and measured the
way the organisers' private re-run measures a submission: a fresh boot, the harness's warm-up,
one timed run, on prompts the sweep never timed (the trial's profile's ``heldout_prompts`` and
``heldout_refs``, or ``--prompts`` / ``--refs``). The verdict compares the median over the fresh
boots with the claimed TPS. A relative gate (``ppl_max_ratio``) is re-resolved on the held-out
references, so the baseline is re-run first; an absolute gate is used as it is. Every re-run is a row of
``verifications``; the verdict rule is ``sweep.verification.judge``. The console shows each
re-run and then one row per trial: verdict, TPS gap, re-run TPS spread (min / median / max,
CV) and PPL against the gate.

Exit status: 0 every trial VERIFIED, 1 at least one INVALID, 2 bad input (one line on stderr,
nothing booted), 130 interrupted (the trials finished so far are stored).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import uuid
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from engine.profiles import BenchProfile, get_profile
from errors import ConfigError, NoCompletedTrialsError, StudyMismatchError, StudyNotFoundError, UsageError
from sweep.verification import Rerun, Verdict, judge

if TYPE_CHECKING:
    from engine.measurement import TrialOutcome
    from sweep.record import TrialRecord
    from sweep.spec import StudySpec

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


def _absolute(value: str | None) -> str | None:
    """A path the user typed is relative to where they typed it; profiles resolve the rest."""
    return None if value is None else str(Path(value).expanduser().resolve())


def parse_args(argv: list[str] | None = None) -> VerifyArgs:
    from sweep.storage import DEFAULT_STORAGE_URL

    parser = argparse.ArgumentParser(prog="python -m sweep.verify", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="the study as sweep.run was given it (name or .toml path)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--prompts", help="held-out prompt set, ShareGPT JSON (default: the profile's heldout_prompts)")
    parser.add_argument("--refs", help="held-out PPL reference set, JSONL (default: the profile's heldout_refs)")
    parser.add_argument("--top", type=int, help="the N fastest feasible trials instead of the front")
    parser.add_argument("--trials", help="comma-separated trial numbers to verify instead of the front")
    parser.add_argument("--repeats", type=int, default=3, help="fresh boots per trial (default 3)")
    parser.add_argument("--profile", help="measure with this profile's sizes (default: the trial's own profile)")
    parser.add_argument("--manifest", help="the study's manifest, if sweep.run was given --manifest")
    parser.add_argument("--ray-address", help="join this Ray cluster (default: start a local one)")
    ns = parser.parse_args(argv)
    if ns.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {ns.repeats}")
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
        study=ns.study, storage=ns.storage, prompts=_absolute(ns.prompts),
        refs=_absolute(ns.refs), top=ns.top, trials=trials, repeats=ns.repeats,
        profile=ns.profile, manifest=ns.manifest, ray_address=ns.ray_address,
    )  # fmt: skip


def _profile(args: VerifyArgs, measured_with: dict[str, Any]) -> BenchProfile:
    """The trial's own profile (or ``--profile``) as a private re-run measures: held-out sets, one
    timed run per boot. The data sets load here, so a missing or short file is bad input before
    anything boots.
    """
    if args.profile is not None:
        base = get_profile(args.profile)
    else:
        known = {f.name for f in fields(BenchProfile)}
        base = BenchProfile(**{k: v for k, v in measured_with.items() if k in known})
    profile = base.for_verification(prompts=args.prompts, refs=args.refs)
    profile.load_data()
    return profile


def select_trials(
    records: list[TrialRecord], *, study_name: str, top: int | None = None, trials: tuple[int, ...] = ()
) -> list[TrialRecord]:
    """The rows to verify: ``trials`` by number, else the ``top`` fastest feasible, else the front."""
    from sweep.judgement import front_records

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
        # "the N fastest" means the feasible trials, not only the non-dominated ones.
        feasible = [r for r in records if r.full and r.feasible]
        chosen = sorted(feasible, key=lambda r: (-r.tps, r.trial_number))[:top]
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
    columns = ["trial", *swept, "claimed TPS", "re-run TPS min/med/max", "CV", "TPS gap", "PPL", "gate", "verdict"]
    for column in columns:
        table.add_column(column, justify="left" if column == "verdict" else "right")
    for v in verdicts:
        spread = "-" if v.tps_median is None else f"{v.tps_min:.2f}/{v.tps_median:.2f}/{v.tps_max:.2f}"
        table.add_row(
            str(v.trial_number),
            *(str(knobs[v.trial_number].get(k, "")) for k in swept),
            f"{v.claimed_tps:.2f}",
            spread,
            "-" if v.tps_cv is None else f"{v.tps_cv:.1%}",
            "-" if v.tps_gap_pct is None else f"{v.tps_gap_pct:+.1f}%",
            "-" if v.ppl_median is None else f"{v.ppl_median:.4f}",
            f"{v.gate:.4f}",
            f"[{'green' if v.verdict == 'VERIFIED' else 'red'}]{v.verdict}[/]",
        )
    out.print(table)
    for v in verdicts:
        if v.reasons:
            out.print(f"  trial {v.trial_number} [red]INVALID[/]: {v.reason}")


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _needs_baseline(spec: StudySpec, targets: list[TrialRecord], profiles: dict[int, BenchProfile]) -> bool:
    """Whether the gate must be re-resolved from the baseline's re-runs.

    PPL moves with the text it is measured on, so the baseline's PPL on the public references
    says nothing about a relative gate on held-out ones; ratio x the baseline's held-out PPL does.
    Where the re-runs score the very references the sweep scored (a profile whose PPL set is the
    organisers' own), each trial's stored gate stands and the baseline is not booted again.
    """
    return spec.gate.ppl_max_ratio is not None and not all(_same_refs(t, profiles[t.trial_number]) for t in targets)


def _with_baseline(spec: StudySpec, records: list[TrialRecord], targets: list[TrialRecord]) -> list[TrialRecord]:
    """The baseline first, then the targets: its re-runs resolve the relative gate."""
    baseline = next((r for r in records if r.is_baseline and r.measured), None)
    if baseline is None:
        raise NoCompletedTrialsError(f"study {spec.name!r} has a relative gate ({spec.gate.describe()}) but no measured baseline")
    return [baseline, *(t for t in targets if t.trial_number != baseline.trial_number)]


def _same_refs(record: TrialRecord, profile: BenchProfile) -> bool:
    measured = BenchProfile(**{k: v for k, v in record.profile.items() if k in {f.name for f in fields(BenchProfile)}})
    return (measured.path(measured.refs), measured.ppl_records) == (profile.path(profile.refs), profile.ppl_records)


class _Rerunner:
    """One Ray worker pinned like the sweep's; boots a trial's knobs fresh for every re-run."""

    def __init__(self, spec: StudySpec, args: VerifyArgs, *, run_id: str, out: Console) -> None:
        import ray

        from sweep.worker import TrialWorker, actor_options

        self.ray, self.spec, self.args, self.run_id, self.out = ray, spec, args, run_id, out
        self._new = lambda: TrialWorker.options(**actor_options(spec.resources)).remote()
        self.worker = self._new()

    def outcomes(self, record: TrialRecord, profile: BenchProfile) -> list[TrialOutcome]:
        from engine.knobs import parse_knobs
        from engine.measurement import TrialOutcome
        from sweep.fidelity import full_plan

        knobs = parse_knobs(self.spec.manifest, record.knobs, where=f"trial {record.trial_number}'s stored knobs: ")
        results = []
        for repeat in range(self.args.repeats):
            folder = RUN_DIR / "verify" / self.spec.name / self.run_id / f"trial-{record.trial_number:04d}-r{repeat}"
            ref = self.worker.run.remote(self.spec.manifest, knobs, profile, workdir=str(folder.resolve()),
                                         cache_dir=str((RUN_DIR / self.spec.name / "cache").resolve()),  # the sweep's
                                         plan=full_plan("a verification re-run: measured to the end"))
            try:
                outcome = TrialOutcome.from_dict(self.ray.get(ref))
            except self.ray.exceptions.RayTaskError as exc:  # the trial code raised: say what
                last = str(exc).strip().splitlines()[-1]
                outcome = TrialOutcome(status="failed", knobs=record.knobs, argv=[], env={},
                                       reason=f"the worker raised: {last}")  # fmt: skip
            except self.ray.exceptions.RayError as exc:  # worker or node lost: a failed re-run
                outcome = TrialOutcome(status="failed", knobs=record.knobs, argv=[], env={},
                                       reason=f"worker lost: {type(exc).__name__}")  # fmt: skip
                self.ray.kill(self.worker, no_restart=True)
                self.worker = self._new()
            m = outcome.measurement
            head = f"  trial {record.trial_number} re-run {repeat + 1}/{self.args.repeats}: "
            if outcome.status == "complete" and m is not None:
                self.out.print(f"{head}TPS {m.tps:.2f} (claimed {record.tps:.2f})  PPL {m.ppl:.4f}")
            else:
                self.out.print(f"{head}[red]FAILED[/]: {outcome.reason}")
            results.append(outcome)
        return results

    def stop(self) -> None:
        try:
            self.ray.get(self.worker.stop_engines.remote(), timeout=30)
        finally:
            self.ray.kill(self.worker, no_restart=True)


def _verify(args: VerifyArgs, out: Console) -> int:
    # Imported here: Ray and Optuna take seconds to import, and bad input should fail fast.
    import optuna

    from sweep.cluster import check_capacity, ray_session
    from sweep.spec import load_study
    from sweep.storage import open_existing
    from sweep.verification import insert_reruns

    spec = load_study(args.study, manifest=args.manifest)
    storage = open_existing(args.storage)
    try:
        try:
            study = optuna.load_study(study_name=spec.name, storage=storage.optuna)
        except KeyError:
            raise StudyNotFoundError(f"study {spec.name!r} not found in {args.storage}: run the sweep first") from None
        stored = study.user_attrs.get("manifest")
        if stored is not None and stored != spec.manifest.name:
            raise StudyMismatchError(
                f"study {spec.name!r} was measured with manifest {stored!r}, not {spec.manifest.name!r}: "
                "pass the sweep's --manifest"
            )
        records = storage.records(spec.name, token_ids=False)
        chosen = select_trials(records, study_name=spec.name, top=args.top, trials=args.trials)
        profiles = {r.trial_number: _profile(args, r.profile) for r in records if r.measured}
        from_baseline = _needs_baseline(spec, chosen, profiles)
        targets = _with_baseline(spec, records, chosen) if from_baseline else chosen
        run_id = uuid.uuid4().hex[:12]
        sets = sorted({f"{p.prompts} / {p.refs}" for p in profiles.values()})
        out.print(
            f"[bold]verify {spec.name}[/]: {len(targets)} trial(s) x {args.repeats} fresh boot(s), one timed run "
            f"each, on {', '.join(sets)}; run {run_id}"
        )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the engines it starts must not reach a hub
        previous_handler = signal.signal(signal.SIGTERM, _raise_interrupt)
        verdicts: list[Verdict] = []
        gate = None  # the gate the re-runs are held to, once known: absolute, or the baseline's re-runs'
        if not from_baseline and spec.gate.ppl_max is not None:
            gate = spec.gate.ppl_max
        with ray_session(address=args.ray_address, temp_dir=RUN_DIR / "ray"):
            check_capacity(spec.resources)
            rerunner = _Rerunner(spec, args, run_id=run_id, out=out)
            try:
                for record in targets:
                    profile = profiles[record.trial_number]
                    outcomes = rerunner.outcomes(record, profile)
                    if from_baseline and gate is None:  # the baseline of a relative gate, measured first
                        ppls = sorted(o.measurement.ppl for o in outcomes if o.measurement is not None)
                        gate = spec.gate.resolve(ppls[len(ppls) // 2] if ppls else None)
                    reruns = [
                        _rerun(record, o, run_id=run_id, repeat=i, args=args, profile=profile,
                               gate=gate if gate is not None else record.gate)  # fmt: skip
                        for i, o in enumerate(outcomes)
                    ]
                    insert_reruns(storage, reruns)
                    verdicts.append(judge(reruns))
                    if from_baseline and gate is None:
                        out.print("[red]the baseline failed on the held-out set: the relative gate cannot be resolved[/]")
                        break
            except KeyboardInterrupt:
                out.print(f"interrupted: {len(verdicts)} trial(s) verified and stored")
                return 130
            finally:
                rerunner.stop()
                signal.signal(signal.SIGTERM, previous_handler)
    finally:
        storage.close()
    title = (
        f"Verification of {spec.name}, run {run_id} (VERIFIED: median re-run TPS within 5% of the "
        f"claimed, median PPL under the gate {spec.gate.describe()} on the held-out references)"
    )
    knobs = {r.trial_number: r.knobs for r in targets}
    print_verdicts(out, verdicts, knobs=knobs, swept=list(spec.space), title=title)
    return 0 if all(v.verdict == "VERIFIED" for v in verdicts) else 1


def _rerun(
    record: TrialRecord, outcome: TrialOutcome, *, run_id: str, repeat: int, args: VerifyArgs,
    profile: BenchProfile, gate: float,
) -> Rerun:  # fmt: skip
    m = outcome.measurement
    return Rerun(
        study_name=record.study_name, trial_number=record.trial_number, run_id=run_id, repeat=repeat,
        status="complete" if outcome.status == "complete" and m is not None else "failed",
        claimed_tps=record.tps, claimed_ppl=record.ppl, gate=gate,
        prompts=profile.prompts, refs=profile.refs, profile=profile.name, knobs=dict(record.knobs),
        tps=m.tps if m else None, ppl=m.ppl if m else None, acceptance_rate=m.acceptance_rate if m else None,
        reason=outcome.reason, node=dict(outcome.node), log_tail=outcome.log_tail,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = max(out.width, 132)  # a log file has no width to fit: keep the table's rows whole
    try:
        return _verify(args, out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
