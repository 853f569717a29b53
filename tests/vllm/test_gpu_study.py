"""The ``vllm-h200`` study, checked on a CPU: its dry run shows what every trial on the GPU gets."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from engine.config import KNOBS, REPO_ROOT, baseline_knobs, consumed_knobs, load_manifest
from sweep.search import load_study

FLAGS = {  # each swept knob, and where it must show in a trial's argv
    "sliding_window": ("--hf-overrides", "sliding_window"),
    "num_speculative_tokens": ("--speculative-config", "num_speculative_tokens"),
    "prompt_lookup_max": ("--speculative-config", "prompt_lookup_max"),
    "kv_cache_dtype": ("--kv-cache-dtype", None),
    "quantization": ("--quantization", None),
    "cudagraph_mode": ("--compilation-config", "cudagraph_mode"),
}


def test_the_manifest_declares_vllm_serving_knobs_of_every_kind():
    manifest = load_manifest("vllm-gpu")
    stability = {  # off in the manifest
        *("warmup_prompts", "warmup_kind", "warmup_max_tokens", "cpu_affinity", "disable_compile_cache"),
        *("ngram_drafter", "gc_policy", "numba_threads"),
    }
    serving = {"max_num_seqs"}  # the batch size, which a serving study sweeps
    assert set(consumed_knobs(manifest)) == {
        *FLAGS,
        "async_scheduling",
        "enable_prefix_caching",
        *stability,
        *serving,
    }
    base = baseline_knobs(manifest)
    assert (base["kv_cache_dtype"], base["quantization"], base["async_scheduling"]) == ("auto", "None", False)
    moves_ppl = {k for k in consumed_knobs(manifest) if not KNOBS[k].lossless}
    # the rest are speed-only; the batch size is not declared lossless (a batch may reorder floating-point sums)
    assert moves_ppl == {"sliding_window", "kv_cache_dtype", "quantization", "max_num_seqs"}
    plain = load_manifest("vllm-gpu-plain")
    assert "--speculative-config" not in plain.serve and "num_speculative_tokens" not in consumed_knobs(plain)


@pytest.mark.slow  # resolves {reference_checkpoint}, which prepares the reference model once
def test_the_dry_run_binds_127_0_0_1_and_shows_each_knobs_flag(challenge_data):
    out = subprocess.run(
        [sys.executable, "-m", "sweep.run", "--study", "vllm-h200", "--dry-run"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    spec = load_study("vllm-h200")
    assert (spec.resources.accelerator_type, spec.resources.num_gpus) == ("H200", 1)
    trials = re.findall(r"^trial (\d+)(?: \(baseline\))?: (.*)\n  argv: (.*)$", out.stdout, flags=re.M)
    assert len(trials) == spec.n_trials
    for _, knobs, argv in trials:
        values = dict(item.split("=", 1) for item in knobs.split())
        args = shlex.split(argv)
        assert args[args.index("--host") + 1] == "127.0.0.1"  # vLLM would bind 0.0.0.0 without it
        assert args[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        for knob, (flag, path) in FLAGS.items():
            shown = args[args.index(flag) + 1]
            assert str(json.loads(shown)[path] if path else shown) == values[knob], (knob, shown)
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in out.stdout and "VLLM_CACHE_ROOT={cache}/vllm" in out.stdout
