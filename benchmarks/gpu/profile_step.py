"""Where a decode step's time goes on the graph path: per-phase timings and the top kernels.

    python -m benchmarks.gpu.profile_step [--device cuda] [--k 3] [--ctk 32] [--tokens 256]

For each way of building the step (torch.compile "inductor" and uncompiled, on CUDA; uncompiled
elsewhere) it reports, on one public chat prompt:
- boot: building the engine (compiling, capturing the first program);
- prefill: the eager prompt pass (ms per request);
- replay: device time of one captured plain step, of one plain run of ``PLAIN_STEPS`` positions
  (what plain decoding replays) and of one draft(k) cycle (CUDA events, median of many replays,
  no host in between);
- decode: wall time per generated token through ``GraphDecoder.generate``, plain and draft(k);
  the difference to the replay is host time (Python, launches, the one device->host read);
- kernels: launches per plain step and the kernels that take most of its device time
  (torch.profiler over one uncaptured run of the same program);
- the weight-read floor of benchmarks/_floor.py, for scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks.reference_engine import _prompt_ids


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu.profile_step", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens of the draft cycle")
    p.add_argument("--ctk", type=int, default=32, help="CENTROID_TOP_K of the draft cycle")
    p.add_argument("--tokens", type=int, default=256, help="tokens generated per decode timing")
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--backends", default="inductor,none", help="step builds to profile on CUDA (inductor, none)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(sys.argv[1:] if argv is None else argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoTokenizer

    from benchmarks._floor import weight_floor
    from engine.reference.runtime import load_runtime

    torch.set_grad_enabled(False)
    runtime = load_runtime(device=args.device)
    model = runtime.model
    cuda = model.device.type == "cuda"
    prompt = _prompt_ids(AutoTokenizer.from_pretrained(runtime.checkpoint_dir), 1)[0]
    lines = []
    backends = [None if b == "none" else b for b in args.backends.split(",")] if cuda else [None]
    for backend in backends:
        lines += _profile(runtime, prompt, backend=backend, args=args)
    if cuda:
        floor = weight_floor(model)
        lines.append(
            f"== floor: {floor.step_bytes / 1e9:.3f} GB of weights per step at {floor.bandwidth / 1e12:.2f} TB/s copy "
            f"bandwidth = {floor.floor_s * 1e3:.3f} ms ({1 / floor.floor_s:.0f} tok/s)"
        )
    print(f"device {torch.cuda.get_device_name(model.device) if cuda else 'cpu'}, torch {torch.__version__}")
    print("\n".join(lines))
    return 0


def _timer(cuda: bool) -> Callable[[Callable[[], object], int], float]:
    """Median seconds of fn() over repeats: device time between events on CUDA, wall time elsewhere."""
    import torch

    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def timed(fn: Callable[[], object], repeats: int) -> float:
        fn()
        sync()
        samples = []
        for _ in range(repeats):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            else:
                began = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - began)
        return statistics.median(samples)

    return timed


def _kernels(program: Callable[[], object], *, cuda: bool) -> tuple[dict[str, int], dict[str, float]]:
    """Launches and device microseconds of each kernel over one uncaptured run of ``program``."""
    import torch

    counts: defaultdict[str, int] = defaultdict(int)
    device_us: defaultdict[str, float] = defaultdict(float)
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.inference_mode(), torch.profiler.profile(activities=activities) as prof:
        program()
        if cuda:
            torch.cuda.synchronize()
    for event in prof.events():
        if cuda and event.device_type == torch.autograd.DeviceType.CUDA:
            counts[event.name] += 1
            device_us[event.name] += event.device_time_total
    return counts, device_us


def _profile(runtime: Any, prompt: list[int], *, backend: str | None, args: argparse.Namespace) -> list[str]:
    """The report's lines for one way of building the step."""
    import torch

    from engine.reference._graphs import PLAIN_STEPS, GraphDecoder, GraphEngine
    from engine.reference.runtime import SpecConfig

    model, heads = runtime.model, runtime.heads
    cuda = model.device.type == "cuda"
    timed = _timer(cuda)
    began = time.perf_counter()
    engine = GraphEngine(model, heads, compile=backend)
    boot = time.perf_counter() - began
    label = f"compile={engine.compile or 'none'} graphs={'yes' if engine.graphs else 'no'}"
    plain = GraphDecoder(model, heads, spec=None, centroid_top_k=args.ctk, engine=engine)
    spec = SpecConfig(method="draft", num_speculative_tokens=args.k)
    draft = GraphDecoder(model, heads, spec=spec, centroid_top_k=args.ctk, engine=engine)

    cache = model.new_cache(len(prompt))

    def prefill_once() -> object:
        return model.prefill(torch.tensor(prompt[:-1], device=model.device), cache)

    prefill = timed(prefill_once, 10)
    position = len(prompt) + 64  # a position inside the decode's range, in the prompt's bucket or the next
    while engine.room(position) < max(args.k, PLAIN_STEPS - 1):
        position += 1
    keys, cycle_keys = engine.step.bucket(position + 1), engine.step.bucket(position + args.k + 1)
    engine.verify([prompt[-1]], position)
    engine.plain(prompt[-1], position, n=PLAIN_STEPS)
    engine.draft(prompt[-1], position, k=args.k, top_k=args.ctk, lower=draft.lower, upper=draft.upper)
    step_program = engine._programs[("verify", 1, keys)]
    cycle_program = engine._programs[("draft", args.k, cycle_keys, args.ctk, draft.lower.stop, draft.upper.stop)]
    run_program = engine._programs[("plain", PLAIN_STEPS, keys)]
    replay_step = timed(step_program, args.replays)
    replay_run = timed(run_program, args.replays)
    replay_cycle = timed(cycle_program, args.replays)

    rates = {}
    for name, decoder in (("plain", plain), ("draft", draft)):
        decoder.generate(prompt, max_new_tokens=16)
        if cuda:
            torch.cuda.synchronize()
        began = time.perf_counter()
        gen = decoder.generate(prompt, max_new_tokens=args.tokens)
        if cuda:
            torch.cuda.synchronize()
        rates[name] = ((time.perf_counter() - began - prefill) / args.tokens, gen.stats)
    counts, device_us = _kernels(step_program.fn, cuda=cuda)

    per_token_plain, _ = rates["plain"]
    per_token_draft, stats = rates["draft"]
    lines = [
        f"== {label}",
        f"boot (build, compile, first capture)  {boot:8.2f} s",
        f"prefill, {len(prompt) - 1} prompt tokens          {prefill * 1e3:8.2f} ms",
        f"plain step: replay (device)           {replay_step * 1e3:8.3f} ms   bucket {keys} keys",
        f"plain run of {PLAIN_STEPS}: replay (device)       {replay_run * 1e3:8.3f} ms   "
        f"{replay_run / PLAIN_STEPS * 1e3:.3f} ms a position",
        f"plain: wall per token                 {per_token_plain * 1e3:8.3f} ms   "
        f"host {(per_token_plain - replay_run / PLAIN_STEPS) * 1e3:.3f} ms  ->  {1 / per_token_plain:8.1f} tok/s",
        f"draft k={args.k} ctk={args.ctk} cycle: replay        {replay_cycle * 1e3:8.3f} ms "
        f"({replay_cycle / (args.k + 1) / replay_step:.2f}x a plain step per position)",
        f"draft: wall per token                 {per_token_draft * 1e3:8.3f} ms   acceptance "
        f"{stats.accepted_tokens / max(stats.draft_tokens, 1):.3f}  ->  {1 / per_token_draft:8.1f} tok/s",
    ]
    if cuda:
        total_us = sum(device_us.values())
        lines.append(
            f"kernels per plain step (uncaptured)   {sum(counts.values()):8d}   device sum {total_us / 1e3:.3f} ms"
        )
        for name, us in sorted(device_us.items(), key=lambda kv: -kv[1])[:8]:
            lines.append(f"    {us / 1e3:7.3f} ms  {counts[name]:4d}x  {name[:90]}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
