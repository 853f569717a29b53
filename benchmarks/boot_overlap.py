"""``python -m benchmarks.boot_overlap``: does booting the next stack disturb the run being timed?

The driver boots a trial's stack only after the last one stopped. Overlapping them (the next
trial's stack boots while the current one is timed) would hide the boot, which is most of a GPU
trial, but only if it leaves the measurement alone. This times it: one stack (A) is booted and
warmed once, its prompts run once untimed (so that every timed run meets the same prefix cache),
then the same timed run is repeated in rounds alternating ABAB: alone, then with a second stack
of the same manifest (B, its own port, work folder and log) booting from the moment the run
starts; B stays up, idle, until the run ends, as the next trial's stack would wait, and is stopped
before the next round, which starts only once B's GPU memory is released (``engine.host``). Both
stacks get ``OMP_NUM_THREADS=--threads``, as Ray exports a trial's ``num_cpus`` to its engine.

Prints every round, the medians, their difference (the median of the rounds' paired ratios, each
overlapped run against the alone run before it: drift cancels), the run-to-run noise (the pooled
standard deviation of log TPS within each condition), and whether the difference exceeds the
noise: its paired mean beyond ``Z`` (``sweep.judgement``) standard errors, the larger of the pairs'
own and the one the run-to-run noise implies (noise x sqrt(2 / pairs)), so that a few pairs that
happen to agree do not call a difference.

On vLLM, on the GPU machine, as a ``vllm-h200`` trial runs (4 CPUs, a run about as long as B's
warm boot)::

    CUDA_VISIBLE_DEVICES=0 python -m benchmarks.boot_overlap --manifest vllm-gpu --threads 4 \
        --num-prompts 128 --output-len 512 --rounds 6 --out "$OUT/boot_overlap_gpu.txt"

Both stacks share that GPU (``CUDA_VISIBLE_DEVICES`` names it, as Ray does for a trial; unset, the
wait for B's memory to be released has no GPU to read), so the manifest must leave room for two:
``vllm-gpu`` asks ``--gpu-memory-utilization 0.25``, where vLLM's default 0.9 would fail B's boot,
which ends the benchmark with B's error. They share one compile cache (``{cache}``, as a study's
trials do), so B's is a warm-cache boot, as a sweep's later trials are; A's own boot fills it.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks._report import emit, table
from benchmarks._sweeps import load_note
from cli import command
from engine.bench import measure_tps, open_client, warm_up
from engine.config import BenchProfile, Prompt, get_profile, load_manifest
from engine.host import FREE_FLOOR_MIB, gpu_states, visible_gpus
from engine.launch import EngineProcess, LaunchConfig, build_launch
from errors import EngineError
from sweep.judgement import Z, pooled_log_sd

__all__ = ["Round", "main", "verdict"]

_RELEASE_WAIT_S = 60.0


@dataclass(frozen=True, kw_only=True)
class Args:
    manifest: str
    profile: str
    num_prompts: int
    output_len: int
    rounds: int  # pairs: one alone, one with a boot
    threads: int
    out: Path | None


@dataclass(frozen=True, kw_only=True)
class Round:
    number: int
    overlapped: bool
    tps: float
    run_s: float
    boot_s: float | None = None  # B's boot, when it was ready before the run ended
    load: float = 0.0  # the 1-minute load average when the run ended


@dataclass(frozen=True, kw_only=True)
class Verdict:
    alone: float  # median TPS
    overlapped: float
    difference: float  # median of the paired ratios, minus 1
    noise: float  # pooled sd of log TPS within a condition: one run's noise
    mean_log: float  # mean paired log ratio
    stderr: float  # its standard error

    @property
    def exceeds(self) -> bool:
        return abs(self.mean_log) > Z * self.stderr


def verdict(rounds: list[Round]) -> Verdict:
    """The medians, the paired difference and whether it exceeds the noise (pairs: each overlapped
    round with the alone round before it)."""
    alone = [r.tps for r in rounds if not r.overlapped]
    overlapped = [r.tps for r in rounds if r.overlapped]
    pairs = [(a.tps, b.tps) for a, b in zip(rounds, rounds[1:]) if not a.overlapped and b.overlapped]
    logs = [math.log(b / a) for a, b in pairs]
    noise, _ = pooled_log_sd([alone, overlapped])
    paired = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) >= 2 else math.inf
    stderr = max(paired, noise * math.sqrt(2 / len(logs)))
    return Verdict(
        alone=statistics.median(alone),
        overlapped=statistics.median(overlapped),
        difference=statistics.median(b / a for a, b in pairs) - 1,
        noise=noise,
        mean_log=statistics.fmean(logs),
        stderr=stderr,
    )


def _profile(args: Args) -> BenchProfile:
    return get_profile(args.profile).with_overrides(
        {"num_prompts": args.num_prompts, "output_len": args.output_len, "tps_repeats": 1}, source="boot_overlap"
    )


def _launch(args: Args, work: Path, name: str) -> tuple[LaunchConfig, Path]:
    """One stack of the manifest as it is, in its own folder, with the study's shared cache."""
    manifest = load_manifest(args.manifest)
    folder = work / name
    (folder / "tmp").mkdir(parents=True)
    launch = build_launch(manifest, workdir=folder, tmpdir=folder / "tmp", cache=work / "cache")
    return replace(launch, env={**launch.env, "OMP_NUM_THREADS": str(args.threads)}), folder


def _used_mib(gpus: list[str]) -> int:
    states = gpu_states(gpus) or {}
    return sum(s.used_mib for s in states.values())


def _released(gpus: list[str], before_mib: int) -> None:
    """Wait, bounded, until B's GPU memory is back (nothing to wait for on a CPU)."""
    deadline = time.monotonic() + _RELEASE_WAIT_S
    while gpus and _used_mib(gpus) >= before_mib + FREE_FLOOR_MIB and time.monotonic() < deadline:
        time.sleep(0.5)


class _Booting:
    """B's boot, waited for in a thread while A is timed."""

    def __init__(self, engine: EngineProcess) -> None:
        self.engine = engine
        self.boot_s: float | None = None
        self.error: EngineError | None = None  # B failed on its own (not because the run ended first)
        self._stopping = False
        engine.start()
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        try:
            self.boot_s = self.engine.wait_ready()
        except EngineError as exc:
            if not self._stopping:
                self.error = exc

    def stop(self) -> None:
        self._stopping = True
        self.engine.stop()
        self._thread.join(timeout=30)


def run(args: Args) -> str:
    profile = _profile(args)
    prompts, _ = profile.load_data()
    load_before = load_note()
    with tempfile.TemporaryDirectory(prefix="boot-overlap-") as tmp:
        work = Path(tmp)
        launch, folder = _launch(args, work, "a")
        a = EngineProcess.for_profile(launch, profile, log_path=folder / "engine.log")
        a.start()
        try:
            boot_a = a.wait_ready()
            rounds = _rounds(args, profile, launch, prompts, work)
        finally:
            a.stop()
    return report(rounds, args=args, launch=launch, profile=profile, boot_a=boot_a, load_before=load_before)


def _rounds(args: Args, profile: BenchProfile, launch: LaunchConfig, prompts: list[Prompt], work: Path) -> list[Round]:
    """On stack A, ready: the warm-up, one untimed run, then the rounds, alone and with B booting."""
    gpus = visible_gpus()
    model = launch.served_model_name
    rounds = []
    with open_client(launch.base_url, timeout_s=profile.request_timeout_s) as client:
        warm_up(
            client,
            model=model,
            prompt=prompts[0],
            requests=profile.warmup_requests,
            output_len=profile.warmup_output_len,
            pause_s=profile.warmup_pause_s,
        )
        measure_tps(client, model=model, prompts=prompts, output_len=profile.output_len)  # untimed: caches alike
        base_mib = _used_mib(gpus)
        for i in range(2 * args.rounds):
            booting = None
            if i % 2:
                launch_b, folder_b = _launch(args, work, f"b{i}")
                booting = _Booting(EngineProcess.for_profile(launch_b, profile, log_path=folder_b / "engine.log"))
            try:
                result = measure_tps(client, model=model, prompts=prompts, output_len=profile.output_len)
            finally:
                if booting is not None:
                    booting.stop()
            if booting is not None and booting.error is not None:
                raise booting.error
            rounds.append(
                Round(
                    number=i + 1,
                    overlapped=booting is not None,
                    tps=result.tps,
                    run_s=result.wall_s,
                    boot_s=booting.boot_s if booting else None,
                    load=os.getloadavg()[0],
                )
            )
            _released(gpus, base_mib)
    return rounds


def report(
    rounds: list[Round], *, args: Args, launch: LaunchConfig, profile: BenchProfile, boot_a: float, load_before: str
) -> str:
    v = verdict(rounds)
    rows = [
        [
            r.number,
            "with a boot" if r.overlapped else "alone",
            f"{r.tps:.3f}",
            f"{r.run_s:.1f}",
            "-" if not r.overlapped else ("not ready" if r.boot_s is None else f"{r.boot_s:.1f}"),
            f"{r.load:.2f}",
        ]
        for r in rounds
    ]
    boots = [r.boot_s for r in rounds if r.boot_s is not None]
    covered = [r for r in rounds if r.overlapped and r.boot_s is not None and r.boot_s <= r.run_s]
    lines = [
        f"stack {args.manifest} ({' '.join(launch.argv[1:4])}); profile {profile.name}: {profile.num_prompts} prompts x "
        f"{profile.output_len} tokens a timed run, one at a time; OMP_NUM_THREADS={args.threads} for both stacks",
        f"stack A booted in {boot_a:.1f} s (alone); B booted during {len(covered)} of {args.rounds} overlapped runs "
        f"(B's boot median {statistics.median(boots):.1f} s)"
        if boots
        else f"stack A booted in {boot_a:.1f} s (alone); B was never ready before an overlapped run ended",
        "",
        table(["round", "condition", "A's TPS", "run s", "B ready after s", "load (1 min)"], rows),
        "",
        f"median TPS: alone {v.alone:.3f}, with a boot {v.overlapped:.3f}; difference (median of the {args.rounds} "
        f"paired ratios) {v.difference:+.2%}",
        f"run-to-run noise: {v.noise:.2%} (pooled sd of log TPS within each condition); the paired mean log ratio "
        f"{v.mean_log:+.4f} has a standard error of {v.stderr:.4f}",
        f"the difference {'EXCEEDS' if v.exceeds else 'does not exceed'} the noise ({'beyond' if v.exceeds else 'within'} "
        f"{Z:g} standard errors of the paired mean)",
        f"load before: {load_before}; after: {load_note()}",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.boot_overlap", description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", default="reference", help="the stack (default reference; vllm-gpu on a GPU)")
    parser.add_argument(
        "--profile", default="quick", help="the prompts' profile (default quick: the project's own set)"
    )
    parser.add_argument(
        "--num-prompts",
        type=int,
        default=4,
        help="prompts per timed run (default 4: about a "
        "reference boot's length on a CPU, so the boot overlaps the whole run)",
    )
    parser.add_argument("--output-len", type=int, default=64, help="tokens per prompt (default 64)")
    parser.add_argument("--rounds", type=int, default=8, help="pairs of runs, alone then with a boot (default 8)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of each stack (default 1, as a study's num_cpus = 1 gives a trial's engine under Ray)",
    )
    parser.add_argument("--out", type=Path, help="also write the report there, under its command line")
    ns = parser.parse_args(argv)
    if min(ns.num_prompts, ns.output_len, ns.threads) < 1 or ns.rounds < 2:
        parser.error("--num-prompts, --output-len and --threads must be at least 1, --rounds at least 2")
    return Args(
        manifest=ns.manifest,
        profile=ns.profile,
        num_prompts=ns.num_prompts,
        output_len=ns.output_len,
        rounds=ns.rounds,
        threads=ns.threads,
        out=ns.out,
    )


@command(parse_args)
def main(args: Args) -> int:
    emit(run(args), out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
