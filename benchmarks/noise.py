"""``python -m benchmarks.noise``: where a stack's TPS noise comes from, arm by arm, over fresh boots.

An arm is a setting of knobs on one manifest (``--arm NAME[:knob=value,...]``, the knobs as
``studies/knobs.toml`` names them: ``cpu_affinity``, ``warmup_prompts``, ``async_scheduling``, ...). Each
arm is booted ``--boots`` times afresh (default 4), the arms interleaved round by round (A B C, A B C,
...), and in every round the anchor (``--anchor``, default ``reference-plain``: the reference stack,
whose noise is known) is booted first: a round that reads slow for every arm and the anchor alike is
the machine's, not an arm's. Every boot warms up as the organisers' harness does and then times the
same ``--runs`` disjoint slices of the profile's prompts (default 4: its first N, its next N, ..., in the
harness's order), each a run of its own, with ``engine.host`` recording the machine and the stack
over each.

It prints each round's TPS per arm beside the anchor's, then each arm's noise taken apart
(``sweep.claims.decompose``: one boot, one run, prompt, request, streaks within a run, 10-second
windows, the stack's step time and acceptance, thread migrations, steal), then how its steps were spread
(the median and 99th percentile step, the share of step time in stalls, the run noise with the stalls'
time taken out, the garbage collections' time a run) and its boot noise with the round effect taken out: each
round's arms divided by how far that round's anchor read from the anchor's mean (a machine that was slow
for a round is slow for the anchor too; where it was not, the anchor's own noise is added instead, and the
column reads higher than the raw one). It writes every boot (its TPS, run by run, and its telemetry) to
``boots.json`` under ``--out`` as it ends, with the report beside it. The same command with the same ``--out`` goes on after the boots stored there, and ``--time-limit S``
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
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from benchmarks._report import table
from benchmarks._sweeps import load_note
from cli import command
from engine.bench import run_trial
from engine.config import BenchProfile, KnobValues, Manifest, get_profile, load_manifest, parse_assignments, parse_knobs
from errors import UsageError
from sweep.claims import NoiseParts, decompose
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


def _profile(name: str, prompts: int, runs: int, client_cpus: str) -> BenchProfile:
    """``runs`` disjoint slices of ``prompts`` each, one PPL record (PPL is not what this measures)."""
    profile = get_profile(name).with_overrides(
        {"num_prompts": prompts, "tps_repeats": runs, "ppl_records": 1, "client_cpus": client_cpus},
        source="benchmarks.noise",
    )
    profile.load_data()  # missing or short data: an error before anything boots
    return profile


def _boot(arm: Arm, *, number: int, repeat: int, profile: BenchProfile, folder: Path) -> BootRecord:
    outcome = run_trial(arm.manifest, arm.knobs, profile, workdir=folder, cache_dir=folder.parent / "cache")
    m = outcome.measurement
    runs = m.tps_runs if m else []
    measured = outcome.status == "complete" and len(runs) == profile.tps_repeats
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
    """A measured boot's mean of its runs."""
    return statistics.fmean(run["tps"] for run in boot.telemetry.get("runs", []))


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
                stopped = f"time limit: {len(records)} of {boots * len(arms)} boots stored in {out}"
                if out is not None and records:  # what is stored so far, said to be partial; the command goes on
                    partial = _report(arms, records, boots=boots, profile=profile, booted=bool(took), out=out)
                    (out / "noise.txt").write_text(f"{command}\n\n{stopped}: a partial report\n\n{partial}\n")
                print(stopped, file=sys.stderr)
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


def _anchored(records: list[BootRecord], anchor: int) -> list[BootRecord]:
    """Every measured boot with its round's effect taken out: each run's TPS divided by how far the round's
    anchor read from the anchor's mean (geometric); none where a round's anchor failed."""
    levels = {
        b.repeat: statistics.fmean(math.log(run["tps"]) for run in b.telemetry["runs"])
        for b in records
        if b.trial_number == anchor and b.measured
    }
    if len(levels) < 2:
        return []
    mean = statistics.fmean(levels.values())
    out = []
    for b in records:
        if not b.measured or b.repeat not in levels:
            continue
        factor = math.exp(levels[b.repeat] - mean)
        runs = [{**run, "tps": run["tps"] / factor} for run in b.telemetry["runs"]]
        public, second = (b.public_tps or 0.0) / factor, (b.tps or 0.0) / factor
        out.append(replace(b, public_tps=public, tps=second, telemetry={**b.telemetry, "runs": runs}))
    return out


def _per_run(boots: list[BootRecord], key: str) -> float | None:
    """The mean over the boots' runs of a host figure (``engine.host``'s run figures)."""
    values = [h[key] for b in boots for run in b.telemetry.get("runs", []) if (h := run.get("host")) and key in h]
    return statistics.fmean(values) if values else None


def _slowest(boots: list[BootRecord]) -> str:
    """The slowest step of the boots' runs, as its histogram bucket bounds it (ms)."""
    buckets = [
        tuple(t["max_bucket_s"])
        for b in boots
        for run in b.telemetry.get("runs", [])
        if (t := (run.get("stack") or {}).get("step_times"))
    ]
    if not buckets:
        return "-"
    low, high = max(buckets, key=lambda bound: (bound[0], bound[1] is None))
    return f"> {1000 * low:.0f}" if high is None else f"<= {1000 * high:.1f}"


def _share(value: float | None, digits: str = ".1%") -> str:
    return "-" if value is None else format(value, digits)


_NOISE_COLUMNS = [
    "arm",
    "knobs",
    "boots x runs",
    "TPS",
    "vs anchor",
    "one boot",
    "one boot, anchored",
    "one run",
    "prompt",
    "request",
    "lag-1",
    "10 s windows",
    "migrations/run",
]
_STEP_COLUMNS = [
    "arm",
    "step ms (cv)",
    "p50 ms",
    "p99 ms",
    "slowest ms",
    "stall share",
    "runs stalled",
    "one run",
    "one run, stalls out",
    "gc s/run",
    "longest gc s",
]


def _noise_row(
    arm: Arm, parts: NoiseParts, mine: list[BootRecord], *, base: float | None, against: NoiseParts | None, runs: int
) -> list[str]:
    """One arm's noise taken apart: its level, against the anchor, and its spreads."""
    level = statistics.fmean(_level(b) for b in mine)
    anchor = arm.name == ANCHOR
    return [
        arm.name,
        " ".join(f"{k}={v}" for k, v in sorted(arm.knobs.items())) or "-",
        f"{len(mine)} x {runs}",
        f"{level:.2f}",
        "-" if base is None or anchor else f"{level / base:.3f}",
        f"{parts.boot:.1%}",
        "-" if against is None or anchor else f"{against.boot:.1%}",
        f"{parts.run:.1%}",
        _share(parts.prompt),
        _share(parts.request),
        "-" if parts.lag1 is None else f"{parts.lag1:.2f}",
        _share(parts.window_cv),
        "-" if parts.migrations is None else f"{parts.migrations:.0f}",
    ]


def _steps_row(arm: Arm, parts: NoiseParts, mine: list[BootRecord]) -> list[str]:
    """One arm's engine steps: their time and spread, percentiles, stalls, and the collector's time."""
    gc_s = _per_run(mine, "gc_s")
    return [
        arm.name,
        "-" if parts.step_ms is None else f"{parts.step_ms:.3f} ({(parts.step_cv or 0):.1%})",
        "-" if parts.step_p50_ms is None else f"{parts.step_p50_ms:.3f}",
        "-" if parts.step_p99_ms is None else f"{parts.step_p99_ms:.3f}",
        _slowest(mine),
        _share(parts.stall_share, ".2%"),
        "-" if parts.stalled_runs is None else f"{parts.stalled_runs}/{parts.runs}",
        f"{parts.run:.1%}",
        _share(parts.run_without_stalls),
        "-" if gc_s is None else f"{gc_s:.3f}",
        _share(_per_run(mine, "gc_max_s"), ".3f"),
    ]


def _report(
    arms: list[Arm], records: list[BootRecord], *, boots: int, profile: BenchProfile, booted: bool, out: Path | None
) -> str:
    """Each round's TPS, then each arm's noise taken apart, its steps, and its boot noise against the anchor."""
    names = [a.name for a in arms]
    records.sort(key=lambda b: (b.repeat, b.trial_number))
    cell = {(b.repeat, b.trial_number): b for b in records}
    rounds = [
        [str(r + 1), *(_mean_tps(cell[r, n]) if (r, n) in cell else "-" for n in range(len(arms)))]
        for r in range(boots)
    ]
    anchor = [b for b in records if names[b.trial_number] == ANCHOR and b.measured]
    anchored = {p.trial_number: p for p in decompose(_anchored(records, 0))} if anchor else {}
    base = statistics.fmean(_level(b) for b in anchor) if anchor else None
    noise, steps = [], []
    for parts in decompose(records):
        arm = arms[parts.trial_number]
        mine = [b for b in records if b.trial_number == parts.trial_number and b.measured]
        against = anchored.get(parts.trial_number)
        noise.append(_noise_row(arm, parts, mine, base=base, against=against, runs=profile.tps_repeats))
        steps.append(_steps_row(arm, parts, mine))
    failed = [f"round {b.repeat + 1}, {names[b.trial_number]}: {b.reason}" for b in records if not b.measured]
    return "\n".join(
        [
            f"manifests: {', '.join(sorted({a.manifest.label for a in arms}))}; profile {profile.name}: "
            f"{profile.tps_repeats} slices of {profile.num_prompts} prompts x {profile.output_len} tokens a boot, "
            f"{boots} boots an arm, interleaved ({' '.join(names)} each round)",
            "",
            "each round's TPS (the mean of its slices):",
            table(["round", *names], rounds),
            "",
            "each arm's noise taken apart (log-scale spreads; one boot and one run on the arm's own boots; anchored: "
            "each round divided by its anchor's reading):",
            table(_NOISE_COLUMNS, noise),
            "",
            "each arm's steps (means over its runs; a percentile its histogram's first bucket holds is only under "
            "that bucket's bound: -; a stall: a step slower than 3x the run's median, its time a lower bound; "
            "garbage collections of 1 ms or more, the stack's Python processes):",
            table(_STEP_COLUMNS, steps),
            *(["", "failed boots:", *failed] if failed else []),
            "",
            # the load of the machine that booted them, unless every boot was stored by an earlier command
            load_note()
            if booted
            else f"made from the {len(records)} boots stored in {out}: none booted by this command",
        ]
    )


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.noise", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--manifest", required=True, help="the arms' manifest (a name under studies/manifests, or a path)"
    )
    parser.add_argument("--arm", action="append", required=True, help="NAME[:knob=value,...]; give it once per arm")
    parser.add_argument("--anchor", default="reference-plain", help="booted first every round ('none': no anchor)")
    parser.add_argument("--boots", type=int, default=4, help="fresh boots of every arm (default 4)")
    parser.add_argument("--profile", default="challenge-quick", help="the profile whose prompts are sliced")
    parser.add_argument("--prompts", type=int, default=8, help="prompts in each slice (default 8)")
    parser.add_argument("--runs", type=int, default=4, help="slices a boot times, each a run of its own (default 4)")
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
    if args.runs < 2:
        parser.error(f"--runs must be at least 2 (one run is no spread), got {args.runs}")
    args.command = shlex.join(["python", "-m", "benchmarks.noise", *(sys.argv[1:] if argv is None else argv)])
    return args


@command(_parse)
def main(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.manifest)
    arms = [parse_arm(text, manifest) for text in args.arm]
    if len({a.name for a in arms}) < len(arms):
        raise UsageError(f"--arm names must differ, got {[a.name for a in arms]}")
    if args.anchor != "none":
        anchored = load_manifest(args.anchor)
        arms.insert(0, Arm(name=ANCHOR, manifest=anchored, knobs=parse_knobs(anchored, {})))
    profile = _profile(args.profile, args.prompts, args.runs, args.client_cpus)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # what Ray exports to a trial's engine
    deadline = None if args.time_limit is None else time.monotonic() + args.time_limit
    report = run(arms, boots=args.boots, profile=profile, out=args.out, command=args.command, deadline=deadline)
    if report is None:
        return 3
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
