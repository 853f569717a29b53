"""``python -m benchmarks.noise``: where a stack's TPS noise comes from, arm by arm, over fresh boots.

An arm is a setting of knobs on one manifest (``--arm NAME[:knob=value,...]``, the knobs as
``studies/knobs.toml`` names them: ``cpu_affinity``, ``warmup_prompts``, ``async_scheduling``, ...). Each
arm is booted ``--boots`` times afresh (default 4), the arms interleaved round by round (A B C, A B C,
...), and in every round the anchor (``--anchor``, default ``reference-plain``: the reference stack,
whose noise is known) is booted first: a round that reads slow for every arm and the anchor alike is
the machine's, not an arm's. Every boot warms up as the organisers' harness does and then times the
same two disjoint slices of the profile's prompts (its first N and its next N, in the harness's order),
each a run of its own, with ``engine.telemetry`` recording the machine and the stack over each.

It prints each round's TPS per arm beside the anchor's, then each arm's noise taken apart
(``sweep.claims.decompose``: one boot, one run, prompt, request, streaks within a run, 10-second
windows, the stack's step time and acceptance, thread migrations, steal), and writes every boot (its
TPS, run by run, and its telemetry) to ``boots.json`` under ``--out`` as it ends, with the report beside
it. The same command with the same ``--out`` goes on after the boots stored there, and ``--time-limit S``
starts no boot that the boots so far say would end after S seconds (exit 3): a benchmark longer than
one command on a lent machine is made in parts. A boot that fails is reported and left out of its
arm's figures. Nothing here changes the GPU's settings.

On the CPU (the reference stack pinned and not, warmed by the bridge and not)::

    python -m benchmarks.noise --manifest reference --arm plain --arm pinned:cpu_affinity=0 \\
        --arm warm:warmup_prompts=16 --client-cpus rest --out benchmarks/results/noise-cpu
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks._report import table
from benchmarks._sweeps import load_note
from engine.knobs import KnobValues, parse_assignments, parse_knobs
from engine.manifest import Manifest, load_manifest
from engine.profiles import BenchProfile, get_profile
from engine.trial import run_trial
from errors import ConfigError, UsageError
from sweep.claims import decompose
from sweep.store import BootRecord

__all__ = ["Arm", "main", "parse_arm"]

ANCHOR = "anchor"


@dataclass(frozen=True, kw_only=True)
class Arm:
    name: str
    manifest: Manifest
    knobs: KnobValues


def parse_arm(text: str, manifest: Manifest) -> Arm:
    """``NAME`` or ``NAME:knob=value,knob=value``: the knobs checked against the manifest before anything boots."""
    name, _, sets = text.partition(":")
    if not name or name == ANCHOR:
        raise UsageError(f"--arm {text!r}: an arm needs a name (not {ANCHOR!r}), then ':knob=value,...'")
    knobs = parse_knobs(manifest, parse_assignments([s for s in sets.split(",") if s]), where=f"--arm {name}: ")
    return Arm(name=name, manifest=manifest, knobs=knobs)


def _profile(name: str, prompts: int, client_cpus: str) -> BenchProfile:
    """Two disjoint slices of ``prompts`` each, one PPL record (PPL is not what this measures)."""
    profile = get_profile(name).with_overrides(
        {"num_prompts": prompts, "tps_repeats": 2, "ppl_records": 1, "client_cpus": client_cpus},
        source="benchmarks.noise",
    )
    profile.load_data()  # missing or short data: an error before anything boots
    return profile


def _boot(arm: Arm, *, number: int, repeat: int, profile: BenchProfile, folder: Path) -> BootRecord:
    outcome = run_trial(arm.manifest, arm.knobs, profile, workdir=folder, cache_dir=folder.parent / "cache")
    m = outcome.measurement
    runs = m.tps_runs if m else []
    measured = outcome.status == "complete" and len(runs) == 2
    return BootRecord(
        study_name="noise",
        trial_number=number,
        run_id="noise",
        repeat=repeat,
        order=repeat,
        status="complete" if measured else "failed",
        claimed_tps=0.0,
        claimed_ppl=0.0,
        gate=None,
        prompts="slice 2",
        public_prompts="slice 1",
        refs=profile.refs,
        profile=profile.name,
        knobs=dict(arm.knobs),
        first="public",  # slice 1 always first: the second slice's warmth is part of its level
        public_tps=runs[0] if measured else None,
        tps=runs[1] if measured else None,
        ppl=m.ppl if m else None,
        host_steal=m.host_steal if m else None,
        telemetry=m.telemetry if m else {},
        reason=outcome.reason,
        provenance=dict(outcome.provenance),
        timings=dict(outcome.timings_s),
    )


def _level(boot: BootRecord) -> float:
    """A measured boot's mean of its two runs."""
    return statistics.fmean(run for run in (boot.public_tps, boot.tps) if run is not None)


def _mean_tps(boot: BootRecord) -> str:
    return f"{_level(boot):.2f}" if boot.measured else "FAILED"


def _stored(out: Path | None, arms: list[Arm]) -> list[BootRecord]:
    """The boots an earlier run into ``out`` stored, when it had these arms: the same command goes on after them."""
    if out is None or not (out / "boots.json").is_file():
        return []
    stored = json.loads((out / "boots.json").read_text())
    wanted = [[a.name, a.manifest.label, dict(a.knobs)] for a in arms]
    if stored["arms"] != wanted:
        raise UsageError(f"--out {out}: its boots are of other arms ({stored['arms']}); name another folder")
    return [BootRecord(**{**b, "created_at": None}) for b in stored["boots"]]


def _save(out: Path | None, arms: list[Arm], records: list[BootRecord]) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        arms_json = [[a.name, a.manifest.label, dict(a.knobs)] for a in arms]
        data = {"arms": arms_json, "boots": [asdict(b) for b in records]}
        (out / "boots.json").write_text(json.dumps(data, indent=1, default=str) + "\n")


def run(
    arms: list[Arm], *, boots: int, profile: BenchProfile, out: Path | None, command: str, deadline: float | None
) -> str | None:
    """Boot every arm ``boots`` times, going on after what ``out`` holds; the report, or None where the deadline
    (``time.monotonic()``) left boots unrun (each boot is stored as it ends: the same command goes on)."""
    folder = Path(tempfile.mkdtemp(prefix="noise-")) if out is None else out / "boots"
    records = _stored(out, arms)
    took: list[float] = []
    for repeat in range(boots):
        for number, arm in enumerate(arms):
            if any(b.repeat == repeat and b.trial_number == number for b in records):
                continue
            if deadline is not None and time.monotonic() + (statistics.fmean(took) if took else 0.0) > deadline:
                print(f"time limit: {len(records)} of {boots * len(arms)} boots stored in {out}", file=sys.stderr)
                return None
            began = time.monotonic()
            boot = _boot(arm, number=number, repeat=repeat, profile=profile, folder=folder / f"r{repeat}-{arm.name}")
            took.append(time.monotonic() - began)
            records.append(boot)
            _save(out, arms, records)
            print(f"  round {repeat + 1}/{boots}, {arm.name}: {_mean_tps(boot)} tok/s", file=sys.stderr, flush=True)
    report = _report(arms, records, boots=boots, profile=profile, booted=bool(took), out=out)
    if out is not None:
        (out / "noise.txt").write_text(f"{command}\n\n{report}\n")
    return report


def _report(
    arms: list[Arm], records: list[BootRecord], *, boots: int, profile: BenchProfile, booted: bool, out: Path | None
) -> str:
    """Each round's TPS, then each arm's noise taken apart."""
    names = [a.name for a in arms]
    records.sort(key=lambda b: (b.repeat, b.trial_number))
    rounds = [[str(r + 1), *(_mean_tps(b) for b in records if b.repeat == r)] for r in range(boots)]
    anchor = [b for b in records if names[b.trial_number] == ANCHOR and b.measured]
    rows = []
    for parts in decompose(records):
        arm = arms[parts.trial_number]
        mine = [b for b in records if b.trial_number == parts.trial_number and b.measured]
        level = statistics.fmean(_level(b) for b in mine)
        base = statistics.fmean(_level(b) for b in anchor) if anchor else None
        rows.append(
            [
                arm.name,
                " ".join(f"{k}={v}" for k, v in sorted(arm.knobs.items())) or "-",
                f"{len(mine)} x 2",
                f"{level:.2f}",
                "-" if base is None or arm.name == ANCHOR else f"{level / base:.3f}",
                f"{parts.boot:.1%}",
                f"{parts.run:.1%}",
                "-" if parts.prompt is None else f"{parts.prompt:.1%}",
                "-" if parts.request is None else f"{parts.request:.1%}",
                "-" if parts.lag1 is None else f"{parts.lag1:.2f}",
                "-" if parts.window_cv is None else f"{parts.window_cv:.1%}",
                "-" if parts.step_ms is None else f"{parts.step_ms:.3f} ({(parts.step_cv or 0):.1%})",
                "-" if parts.migrations is None else f"{parts.migrations:.0f}",
            ]
        )
    failed = [f"round {b.repeat + 1}, {names[b.trial_number]}: {b.reason}" for b in records if not b.measured]
    return "\n".join(
        [
            f"manifests: {', '.join(sorted({a.manifest.label for a in arms}))}; profile {profile.name}: 2 slices of "
            f"{profile.num_prompts} prompts x {profile.output_len} tokens a boot, {boots} boots an arm, interleaved "
            f"({' '.join(names)} each round)",
            "",
            "each round's TPS (the mean of its two slices):",
            table(["round", *names], rounds),
            "",
            "each arm's noise taken apart (log-scale spreads; one boot and one run on the arm's own boots):",
            table(
                [
                    "arm",
                    "knobs",
                    "boots x runs",
                    "TPS",
                    "vs anchor",
                    "one boot",
                    "one run",
                    "prompt",
                    "request",
                    "lag-1",
                    "10 s windows",
                    "step ms (cv)",
                    "migrations/run",
                ],
                rows,
            ),
            *(["", "failed boots:", *failed] if failed else []),
            "",
            # the load of the machine that booted them, unless every boot was stored by an earlier command
            load_note()
            if booted
            else f"made from the {len(records)} boots stored in {out}: none booted by this command",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.noise", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--manifest", required=True, help="the arms' manifest (a name under studies/manifests, or a path)"
    )
    parser.add_argument("--arm", action="append", required=True, help="NAME[:knob=value,...]; give it once per arm")
    parser.add_argument("--anchor", default="reference-plain", help="booted first every round ('none': no anchor)")
    parser.add_argument("--boots", type=int, default=4, help="fresh boots of every arm (default 4)")
    parser.add_argument("--profile", default="challenge-quick", help="the profile whose prompts are sliced")
    parser.add_argument("--prompts", type=int, default=8, help="prompts in each of the two slices (default 8)")
    parser.add_argument(
        "--client-cpus", default="none", help="where the timing client runs: none (default), rest or a CPU list"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="OMP_NUM_THREADS for every stack, as a trial's num_cpus (default 1)"
    )
    parser.add_argument(
        "--out", type=Path, help="write the report and boots.json into this folder (going on after its boots)"
    )
    parser.add_argument(
        "--time-limit", type=float, metavar="S", help="start no boot that would end after S seconds (exit 3)"
    )
    args = parser.parse_args(argv)
    if args.boots < 2:
        parser.error(f"--boots must be at least 2 (one boot is no spread), got {args.boots}")
    if args.prompts < 2:
        parser.error(f"--prompts must be at least 2, got {args.prompts}")
    try:
        manifest = load_manifest(args.manifest)
        arms = [parse_arm(text, manifest) for text in args.arm]
        if len({a.name for a in arms}) < len(arms):
            raise UsageError(f"--arm names must differ, got {[a.name for a in arms]}")
        if args.anchor != "none":
            anchored = load_manifest(args.anchor)
            arms.insert(0, Arm(name=ANCHOR, manifest=anchored, knobs=parse_knobs(anchored, {})))
        profile = _profile(args.profile, args.prompts, args.client_cpus)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # what Ray exports to a trial's engine
        command = shlex.join(["python", "-m", "benchmarks.noise", *(sys.argv[1:] if argv is None else argv)])
        deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
        report = run(arms, boots=args.boots, profile=profile, out=args.out, command=command, deadline=deadline)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if report is None:
        return 3
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
