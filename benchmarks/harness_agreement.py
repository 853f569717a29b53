"""``python -m benchmarks.harness_agreement``: the organisers' own TPS client beside ours, one server.

Boots one stack (the reference stack by default), then times it in rounds, alternating who goes
first: sglang 0.5.2's ``bench_serving`` exactly as the organisers' harness runs it (installed
unchanged by ``python -m engine.install sglang-bench``: ``--backend vllm-chat --dataset-name
sharegpt --max-concurrency 1 --request-rate inf --warmup-requests 4 --seed 1 --extra-request-body
'{"ignore_eos": true}' --disable-stream``), and this project's client (``engine.bench``: the same
warm-up, then one timed run) on the same prompts in the same order. Prints every round's
``output_throughput`` beside ours, the medians and their difference. The prompts are the
organisers' file (``GEMMA_SWEEP_CHALLENGE_DATA``) unless ``--prompts`` names another.

``--study NAME`` (with ``--storage``) stores what it measured in that study as its client offset
(``sweep.claims.ClientOffset``: the mean and spread of log(theirs / ours) over the rounds): a study's
boots are timed by this project's client and the organisers' private re-run by theirs, so its claims'
re-run interval and P(VERIFIED) carry it. Measure it with the study's own manifest and sizes.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks._report import emit, table
from benchmarks._sweeps import load_note
from cli import command
from engine.bench import bench_serving, harness_warm_up, measure_tps, open_client
from engine.config import BenchProfile, get_profile, load_manifest, parse_knobs
from engine.install import install_stack
from engine.launch import EngineProcess, build_launch

__all__ = ["main"]


@dataclass(frozen=True, kw_only=True)
class Args:
    manifest: str
    prompts: str | None
    num_prompts: int
    output_len: int
    rounds: int
    out: Path | None
    study: str | None = None
    storage: str | None = None


def _profile(args: Args) -> BenchProfile:
    """The harness's sequence (4 warm-up requests of min(32, output) tokens, a 1 s pause) on these sizes."""
    overrides: dict[str, object] = {
        "num_prompts": args.num_prompts,
        "output_len": args.output_len,
        "warmup_requests": 4,
        "warmup_output_len": min(32, args.output_len),
        "warmup_pause_s": 1.0,
        "tps_repeats": 1,
        "shuffle_seed": 1,
    }
    if args.prompts:
        overrides["prompts"] = str(Path(args.prompts).resolve())
    return get_profile("challenge-quick").with_overrides(overrides, source="harness_agreement")


def _ours(base_url: str, *, model: str, profile: BenchProfile) -> float:
    prompts, _ = profile.load_data()
    with open_client(base_url, timeout_s=profile.request_timeout_s) as client:
        harness_warm_up(client, model=model, prompt=prompts[0], profile=profile)
        return measure_tps(client, model=model, prompts=prompts, output_len=profile.output_len).tps


def run(args: Args) -> str:
    from engine.reference.prepare import prepare_model  # the tokenizer folder bench_serving reads

    sglang = install_stack("sglang-bench")
    script = sglang.versions["bench_serving"]
    profile = _profile(args)
    profile.load_data()  # bad or missing data: an error before anything boots
    prompts = profile.path(profile.prompts)
    manifest = load_manifest(args.manifest)
    launch = build_launch(manifest, parse_knobs(manifest, {}))
    tokenizer = prepare_model().checkpoint_dir
    rows, theirs, ours = [], [], []
    with (
        tempfile.TemporaryDirectory(prefix="harness-") as tmp,
        EngineProcess.for_profile(launch, profile, log_path=Path(tmp) / "engine.log"),
    ):
        for i in range(args.rounds):
            first, second = ("sglang", "ours") if i % 2 == 0 else ("ours", "sglang")
            got = {}
            for who in (first, second):
                if who == "sglang":
                    got[who] = bench_serving(
                        sglang.python,
                        script,
                        base_url=launch.base_url,
                        model=launch.served_model_name,
                        tokenizer=tokenizer,
                        prompts=prompts,
                        profile=profile,
                        work=Path(tmp),
                    )
                else:
                    got[who] = _ours(launch.base_url, model=launch.served_model_name, profile=profile)
            theirs.append(got["sglang"])
            ours.append(got["ours"])
            rows.append(
                [
                    str(i + 1),
                    f"{first} first",
                    f"{got['sglang']:.3f}",
                    f"{got['ours']:.3f}",
                    f"{(got['ours'] / got['sglang'] - 1) * 100:+.2f}%",
                ]
            )
    if args.study is not None:
        _store(args, theirs=theirs, ours=ours, basis=f"{manifest.label}, {profile.num_prompts} x {profile.output_len}")
    med_theirs, med_ours = statistics.median(theirs), statistics.median(ours)
    # The stack's own speed drifts from run to run; a round times both clients back to back, so the
    # median of the rounds' ratios cancels the drift that a ratio of medians keeps.
    diff = (statistics.median(o / t for o, t in zip(ours, theirs)) - 1) * 100
    lines = [
        f"stack {manifest.label} ({launch.argv[-1]}); prompts {prompts} in bench_serving's --seed 1 order, "
        f"{profile.num_prompts} x {profile.output_len} tokens, ignore_eos, one at a time; warm-up "
        f"{profile.warmup_requests} x {profile.warmup_output_len} tokens, then {profile.warmup_pause_s:g} s",
        f"organisers' client: sglang {sglang.versions['sglang']} bench_serving ({script}), "
        f"transformers {sglang.versions['transformers']}, aiohttp {sglang.versions['aiohttp']}",
        "",
        table(["round", "order", "bench_serving output_throughput", "engine.bench TPS", "ours vs theirs"], rows),
        "",
        f"median over {args.rounds} rounds: bench_serving {med_theirs:.3f} tok/s, engine.bench {med_ours:.3f} tok/s; "
        f"median of the rounds' ratios: ours {diff:+.2f}% ({'within' if abs(diff) <= 2 else 'OUTSIDE'} 2%)",
        load_note(),
    ]
    return "\n".join(lines)


def _store(args: Args, *, theirs: list[float], ours: list[float], basis: str) -> None:
    """The offset into the study, for its claims to carry (``sweep.claims.ClientOffset``)."""
    import socket

    import optuna

    from sweep.store import ClientOffset, StudyRecord, open_existing, write_record

    logs = [math.log(t / o) for t, o in zip(theirs, ours)]
    offset = ClientOffset(
        log_mean=statistics.fmean(logs),
        sd=statistics.stdev(logs),
        rounds=len(logs),
        basis=f"{basis} tokens, on {socket.gethostname()}",
    )
    storage = open_existing(args.storage or "")
    try:
        study = optuna.load_study(study_name=args.study, storage=storage.optuna)
        write_record(study, StudyRecord(client_offset=offset))
    finally:
        storage.close()


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness_agreement", description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", default="reference-plain", help="the stack to time (default reference-plain)")
    parser.add_argument(
        "--prompts", help="ShareGPT prompt file (default: the organisers' own, from GEMMA_SWEEP_CHALLENGE_DATA)"
    )
    parser.add_argument("--num-prompts", type=int, default=8, help="prompts per run (default 8)")
    parser.add_argument(
        "--output-len", type=int, default=64, help="tokens per prompt (default 64; the challenge's is 512)"
    )
    parser.add_argument("--rounds", type=int, default=8, help="rounds, each timing both clients (default 8)")
    parser.add_argument("--out", type=Path, help="also write the table there, under its command line")
    parser.add_argument("--study", help="store the offset in this study, for its claims to carry")
    parser.add_argument("--storage", default="sqlite:///runs/sweeps.db", help="the study's database (with --study)")
    ns = parser.parse_args(argv)
    if min(ns.num_prompts, ns.output_len, ns.rounds) < 1:
        parser.error("--num-prompts, --output-len and --rounds must be at least 1")
    if ns.study is not None and ns.rounds < 2:
        parser.error("--study needs at least 2 --rounds: one round says nothing of how far the offset moves")
    return Args(
        manifest=ns.manifest,
        prompts=ns.prompts,
        num_prompts=ns.num_prompts,
        output_len=ns.output_len,
        rounds=ns.rounds,
        out=ns.out,
        study=ns.study,
        storage=ns.storage,
    )


@command(parse_args)
def main(args: Args) -> int:
    emit(run(args), out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
