"""PPL reference records for a machine whose studies/data lacks them (the lent GPU machine while
``engine.refset``'s CPU run has not finished): the first ``--records`` prompts of each set, sampled
by engine.refset's own procedure (``sample_batch``: seed SEED + i for record i, its top-k / top-p /
temperature, its stop tokens and length) on the machine's CPU cores.

    python -m benchmarks.gpu.sample_refs --out /tmp/refs [--records 16] [--threads N]

Writes ``ppl_refs_reference.jsonl`` (public prompts) and ``ppl_refs_heldout.jsonl`` there. The
records come from the same distribution as the committed sets but are not bit-identical to them
(another batch size, thread count and torch version), so results measured on them say so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu.sample_refs", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--records", type=int, default=16)
    p.add_argument("--threads", type=int, help="torch CPU threads (default: every core)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.data import load_prompts
    from engine.reference.prepare import prepare_model
    from engine.refset import SEED, SETS, sample_batch

    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    checkpoint = prepare_model().checkpoint_dir
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16).eval()
    stop = {tokenizer.convert_tokens_to_ids(t) for t in ("<eos>", "<end_of_turn>")}
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (prompts_path, refs_path) in SETS.items():
        began = time.monotonic()
        prompts = load_prompts(prompts_path)[: args.records]
        contexts = [
            tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": p.text}], tokenize=False,
                                                    add_generation_prompt=True), add_special_tokens=False).input_ids
            for p in prompts
        ]
        targets = sample_batch(model, contexts, [SEED + i for i in range(len(prompts))], stop_ids=stop,
                               pad_id=tokenizer.pad_token_id)
        out = args.out / refs_path.name
        out.write_text("".join(
            json.dumps({"id": p.id, "context_token_ids": c, "target_token_ids": t}) + "\n"
            for p, c, t in zip(prompts, contexts, targets)
        ))
        print(f"{name}: {len(prompts)} records, {sum(map(len, targets))} target tokens -> {out} "
              f"({time.monotonic() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
