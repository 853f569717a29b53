"""Decode speed of the reference engine: plain greedy vs speculative ``draft`` over k x CENTROID_TOP_K.

    python -m benchmarks.reference_engine [--device cpu|cuda] [--prompts 4] [--tokens 128]
                                          [--k 1,3,7] [--ctk 1,8,32,49,2048] [--ngram]

In-process (no HTTP): each config decodes the first ``--prompts`` prompts of the public prompt
set (chat template applied) for ``--tokens`` new tokens each (EOS ignored, as the challenge's TPS
run), after one untimed warm-up generation; configs take turns prompt by prompt, so that load
from other work drifting during the run skews all of them alike. tokens/s = generated tokens /
decode wall time (prefill included). Acceptance = accepted / drafted tokens. Every config's token ids are compared
with plain greedy decoding's ("same" column). The load average is printed before and after,
since other work on the machine skews every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported when the benchmark runs, not when its module is
    from engine.reference.runtime import Decoder

PROMPTS = Path(__file__).resolve().parent.parent / "studies" / "data" / "prompts_public.json"


@dataclass(frozen=True)
class Row:
    label: str
    tps: float
    drafted: int
    accepted: int
    cycles: int  # verification steps
    same: bool
    seconds: float

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.reference_engine", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu | cuda (default cpu)")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--k", type=_ints, default=[1, 3, 7], help="num_speculative_tokens values")
    p.add_argument("--ctk", type=_ints, default=[1, 8, 32, 49, 2048], help="CENTROID_TOP_K values")
    p.add_argument("--ngram", action="store_true", help="also run ngram (k=max of --k, lookup 1..4)")
    args = p.parse_args(argv)
    if args.prompts < 1 or args.tokens < 2:
        p.error("--prompts must be >= 1 and --tokens >= 2")
    if any(k < 1 for k in args.k) or any(not 1 <= c <= 2048 for c in args.ctk):
        p.error("--k values must be >= 1 and --ctk values between 1 and 2048")
    return args


def _prompt_ids(tokenizer, n: int) -> list[list[int]]:
    records = json.loads(PROMPTS.read_text())[:n]
    out = []
    for record in records:
        messages = [{"role": "user", "content": record["conversations"][0]["value"]}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        out.append(tokenizer(text, add_special_tokens=False).input_ids)
    return out


@dataclass
class _Tally:
    label: str
    decoder: Decoder
    seconds: float = 0.0
    outs: list = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    cycles: int = 0


def _measure(tallies: list[_Tally], prompts: list[list[int]], tokens: int, sync) -> None:
    """Round-robin: each prompt is decoded by every config in turn, so that a change in the
    machine's load during the run shifts all configs alike instead of skewing their ratios."""
    for t in tallies:
        t.decoder.generate(prompts[0], max_new_tokens=8)  # warm-up: allocator, kernels, caches
    for ids in prompts:
        for t in tallies:
            sync()
            started = time.perf_counter()
            gen = t.decoder.generate(ids, max_new_tokens=tokens)
            sync()
            t.seconds += time.perf_counter() - started
            t.outs.append(gen.token_ids)
            t.drafted += gen.stats.draft_tokens
            t.accepted += gen.stats.accepted_tokens
            t.cycles += gen.stats.drafts
        print(f"  prompt {len(tallies[0].outs)}/{len(prompts)} done", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _args(sys.argv[1:] if argv is None else argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoTokenizer

    from engine.reference.runtime import SpecConfig, load_runtime

    torch.set_grad_enabled(False)
    load_before = os.getloadavg()
    runtime = load_runtime(device=args.device)
    device = runtime.model.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    prompts = _prompt_ids(AutoTokenizer.from_pretrained(runtime.checkpoint_dir), args.prompts)
    total = args.prompts * args.tokens

    tallies = [_Tally("plain greedy", runtime.decoder())]
    for k in args.k:
        for ctk in args.ctk:
            spec = SpecConfig(method="draft", num_speculative_tokens=k)
            tallies.append(_Tally(f"draft k={k} ctk={ctk}", runtime.decoder(spec=spec, centroid_top_k=ctk)))
    if args.ngram:
        k = max(args.k)
        spec = SpecConfig(method="ngram", num_speculative_tokens=k, prompt_lookup_min=1, prompt_lookup_max=4)
        tallies.append(_Tally(f"ngram k={k} lookup 1..4", runtime.decoder(spec=spec)))
    _measure(tallies, prompts, args.tokens, sync)
    plain_outs = tallies[0].outs
    rows = [
        Row(t.label, total / t.seconds, t.drafted, t.accepted, t.cycles, same=t.outs == plain_outs, seconds=t.seconds)
        for t in tallies
    ]

    threads = torch.get_num_threads() if device.type == "cpu" else "-"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"reference engine decode speed: device {name} (torch threads {threads}), torch {torch.__version__}")
    print(f"{args.prompts} public chat prompts x {args.tokens} new tokens each (EOS ignored), bf16, batch 1")
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    print()
    plain_tps = rows[0].tps
    print(f"{'config':<26} {'tok/s':>8} {'x plain':>8} {'accept':>8} {'tok/step':>9} {'same':>5}")
    for row in rows:
        acc = f"{row.acceptance:.3f}" if row.acceptance is not None else "-"
        steps = f"{1 + row.accepted / row.cycles:.2f}" if row.cycles else "-"
        print(
            f"{row.label:<26} {row.tps:8.2f} {row.tps / plain_tps:8.2f} {acc:>8} {steps:>9} {'yes' if row.same else 'NO':>5}"
        )
    if device.type == "cuda":  # the graph path's ceiling (issue 10): benchmarks/_floor.py
        from benchmarks._floor import weight_floor

        floor = weight_floor(runtime.model)
        print(
            f"\nweight-read floor: {floor.step_bytes / 1e9:.3f} GB per plain step at {floor.bandwidth / 1e12:.2f} TB/s "
            f"(copy, measured in this run) = {floor.floor_s * 1e3:.3f} ms; plain greedy reaches "
            f"{floor.fraction(plain_tps):.1%} of it (step compiled: {runtime.graph_engine.compile or 'no'})"
        )
    best = max(rows[1:], key=lambda r: r.tps, default=None)
    if best is not None:
        print(f"\nbest: {best.label} at {best.tps / plain_tps:.2f}x plain")
    return 0 if all(r.same for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
