"""``python -m engine.bench``: benchmark one configuration of one stack, as the organisers do.

    python -m engine.bench --manifest studies/manifests/reference.json --profile quick
    python -m engine.bench --manifest reference --set sliding_window=32 --profile quick
    python -m engine.bench --manifest reference --profile quick --repeats 3
    python -m engine.bench --manifest reference --profile challenge-quick   # the organisers' files
    python -m engine.bench --manifest reference --profile quick --prompts my.json --num-prompts 8
    python -m engine.bench --manifest vidraft-w188-ctk49 --set centroid_top_k=44 --dry-run

Boots the stack with the knob values, warms it, measures TPS and PPL, stops it, and prints a
table and a JSON record (``--json``: the full record only). ``--dry-run`` prints the exact argv,
working folder and env overlay that would be started (secrets as ``***``) and boots nothing.
Input errors print one line on stderr and exit 2; a failed trial exits 1.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cli import command
from engine.bench._trial import run_trial
from engine.config import REPO_ROOT, get_profile, load_manifest, parse_assignments, parse_knobs
from engine.launch import LaunchConfig, build_launch
from engine.measurement import TrialOutcome
from engine.secrets import redact_argv, redact_env
from errors import UsageError


@dataclass(frozen=True, kw_only=True)
class BenchArgs:
    manifest: str
    sets: tuple[str, ...]
    profile: str
    repeats: int | None
    data: dict[str, object]  # --prompts, --refs, --num-prompts: the profile's fields, overridden
    dry_run: bool
    json_only: bool
    workdir: Path | None
    host: str


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def parse_args(argv: list[str] | None) -> BenchArgs:
    parser = _Parser(prog="python -m engine.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", required=True, help="manifest file, or a name in studies/manifests/")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        dest="sets",
        help="knob value, e.g. sliding_window=188 (repeatable)",
    )
    parser.add_argument("--profile", default="challenge", help="benchmark profile in studies/profiles.toml")
    parser.add_argument(
        "--repeats",
        type=int,
        metavar="R",
        help="timed TPS runs in the one boot (default: the profile's tps_repeats); TPS is the "
        "slower of the first run and the median",
    )
    parser.add_argument("--prompts", type=Path, help="prompt set to time (ShareGPT JSON) instead of the profile's")
    parser.add_argument("--refs", type=Path, help="PPL reference set (JSONL) instead of the profile's")
    parser.add_argument("--num-prompts", type=int, metavar="N", help="prompts per timed run instead of the profile's")
    parser.add_argument(
        "--ppl-records", type=int, metavar="N", help="the first N reference records scored instead of the profile's"
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would start; boot nothing")
    parser.add_argument("--json", action="store_true", dest="json_only", help="print only the JSON record")
    parser.add_argument("--workdir", type=Path, help="folder for the engine log (default: runs/bench/...)")
    parser.add_argument("--host", default="127.0.0.1", help="address the stack binds (default 127.0.0.1)")
    ns = parser.parse_args(argv)
    data = {
        "prompts": ns.prompts and str(ns.prompts.expanduser().resolve()),
        "refs": ns.refs and str(ns.refs.expanduser().resolve()),
        "num_prompts": ns.num_prompts,
        "ppl_records": ns.ppl_records,
    }
    return BenchArgs(
        manifest=ns.manifest,
        sets=tuple(ns.sets),
        profile=ns.profile,
        repeats=ns.repeats,
        data={k: v for k, v in data.items() if v is not None},
        dry_run=ns.dry_run,
        json_only=ns.json_only,
        workdir=ns.workdir,
        host=ns.host,
    )


def _dry_run_record(launch: LaunchConfig) -> dict:
    return {
        "argv": redact_argv(launch.argv),
        "cwd": str(launch.cwd),
        "env": redact_env(launch.env),
        "host": launch.host,
        "port": launch.port,
        "knobs": launch.knobs,
    }


def _print_dry_run(launch: LaunchConfig, *, json_only: bool) -> None:
    record = _dry_run_record(launch)
    if not json_only:
        print(f"# dry run: nothing started. Would run in {launch.cwd}:")
        print(shlex.join(record["argv"]))
        print("# with this env over the current environment:")
        for key, value in record["env"].items():
            print(f"{key}={shlex.quote(value)}")
    print(json.dumps(record, indent=None if not json_only else 2))


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _table(outcome: TrialOutcome, *, manifest: str, profile: str, workdir: Path) -> str:
    knobs = " ".join(f"{k}={v}" for k, v in outcome.knobs.items()) or "(none)"
    rows = [("manifest", manifest), ("profile", profile), ("knobs", knobs), ("status", outcome.status)]
    m = outcome.measurement
    if m is not None:
        lat = m.latency_s
        rows += [
            (
                "TPS",
                f"{m.tps:.2f} tokens/s ({m.completion_tokens} tokens in {m.tps_wall_s:.2f} s, {m.num_prompts} prompts)",
            ),
        ]
        if m.tps_cv is not None:
            rows.append(("TPS runs", f"median of {' '.join(f'{t:.2f}' for t in m.tps_runs)}; CV {m.tps_cv:.1%}"))
        rows.append(("TPS rule", m.tps_rule))
        rows += [
            (
                "PPL",
                f"{m.ppl:.4f} token-weighted over {m.ppl_target_tokens} tokens of "
                f"{m.num_ppl_records} records; mean per record {m.ppl_mean_record:.4f}",
            ),
            ("latency s", " ".join(f"{k} {lat[k]:.3f}" for k in ("p50", "p90", "p99", "mean") if k in lat)),
            (
                "acceptance",
                f"{_fmt(m.acceptance_rate)} (drafted {m.drafted_tokens}, accepted {m.accepted_tokens})"
                if m.drafted_tokens is not None
                else "n/a (no spec-decoding counters in /metrics)",
            ),
        ]
        if m.stream:
            rows.append(
                ("stream s", " ".join(f"{k} {v:.4f}" for k, v in m.stream.items() if k.endswith(("p50", "p99"))))
            )
    else:
        rows.append(("reason", outcome.reason or ""))
    rows.append(("timings s", " ".join(f"{k} {v:.1f}" for k, v in outcome.timings_s.items())))
    rows.append(("log", str(workdir / "engine.log")))
    width = max(len(name) for name, _ in rows)
    text = "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
    if m is None and outcome.log_tail:
        text += "\n--- engine log tail ---\n" + outcome.log_tail
    return text


# an EngineError reaches the frame from a dry run's preparation only: a trial returns its failures
@command(parse_args)
def main(args: BenchArgs) -> int:
    manifest = load_manifest(args.manifest)
    knobs = parse_knobs(manifest, parse_assignments(args.sets), where="--set: ")
    profile = get_profile(args.profile)
    if args.repeats is not None:
        profile = profile.with_overrides({"tps_repeats": args.repeats}, source="--repeats")
    if args.data:
        profile = profile.with_overrides(args.data, source="--prompts/--refs/--num-prompts/--ppl-records")
    if args.dry_run:
        _print_dry_run(build_launch(manifest, knobs, host=args.host), json_only=args.json_only)
        return 0
    profile.load_data()  # a missing or short data set is bad input, before anything boots
    stamp = time.strftime("%Y%m%d-%H%M%S")
    workdir = args.workdir or REPO_ROOT / "runs" / "bench" / f"{manifest.name}-{stamp}"
    outcome = run_trial(manifest, knobs, profile, workdir=workdir, host=args.host)
    record = outcome.to_dict()
    (workdir / "outcome.json").write_text(json.dumps(record, indent=2))
    if args.json_only:
        print(json.dumps(record, indent=2))
    else:
        print(_table(outcome, manifest=str(manifest.source or manifest.name), profile=profile.name, workdir=workdir))
        if record["measurement"]:
            record["measurement"]["output_token_ids"] = f"(in {workdir / 'outcome.json'})"
        print(json.dumps(record))
    return 0 if outcome.status == "complete" else 1


if __name__ == "__main__":
    sys.exit(main())
