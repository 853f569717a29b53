"""The ``vllm-cpu`` manifest: which knobs it takes, where they land, and what it refuses."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import REPO_ROOT, baseline_knobs, consumed_knobs, load_manifest, parse_knobs
from engine.launch import build_launch
from errors import KnobError


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_it_consumes_the_window_and_the_speculative_tokens_but_not_the_centroids():
    manifest = load_manifest("vllm-cpu")
    # the stability knobs at their off values too (the warm-up bridge, the stack's CPUs, where the drafter runs,
    # the collector, numba's pool at the CPU count the manifest was made for, the bridge's prompts), and the
    # serving knobs: the batch size and the chunked-prefill budget at vLLM's own CPU default
    assert consumed_knobs(manifest) == [
        "sliding_window",
        "num_speculative_tokens",
        "prompt_lookup_max",
        "max_num_seqs",
        "max_num_batched_tokens",
        "warmup_prompts",
        "cpu_affinity",
        "ngram_drafter",
        "gc_policy",
        "numba_threads",
        "warmup_max_tokens",
        "warmup_kind",
    ]
    assert baseline_knobs(manifest) == {
        "sliding_window": 512,
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
        "max_num_seqs": 1,
        "max_num_batched_tokens": 2048,
        "warmup_prompts": 0,
        "cpu_affinity": "none",
        "ngram_drafter": "ngram",
        "gc_policy": "default",
        "numba_threads": 2,
        "warmup_max_tokens": 1,
        "warmup_kind": "plain",
    }
    with pytest.raises(KnobError, match=r"vllm-cpu\.json does not consume knob 'centroid_top_k'"):
        parse_knobs(manifest, {"centroid_top_k": 32})


@pytest.mark.slow  # resolves {reference_checkpoint}, which prepares the reference model once
def test_knobs_become_vllm_flags_and_caches_go_to_the_trial_folder(tmp_path):
    manifest = load_manifest("vllm-cpu")
    launch = build_launch(
        manifest,
        parse_knobs(manifest, {"sliding_window": 64, "num_speculative_tokens": 5}),
        workdir=tmp_path / "trial",
        tmpdir=tmp_path / "short",
    )
    assert launch.argv[:3] == [
        str(REPO_ROOT / ".venv-vllm/bin/python"),
        "-m",
        "vllm.entrypoints.launchers.api_server.entry",
    ]
    # Gemma 3 270M is text-only: its window sits at the top of the config, not under text_config.
    assert json.loads(flag(launch.argv, "--hf-overrides")) == {"sliding_window": 64}
    spec = json.loads(flag(launch.argv, "--speculative-config"))
    assert spec["method"] == "ngram" and spec["num_speculative_tokens"] == 5
    assert flag(launch.argv, "--port") == str(launch.port) and flag(launch.argv, "--host") == "127.0.0.1"
    config = json.loads((Path(flag(launch.argv, "--model")) / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["sliding_window"] == 512
    for key in ("VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT"):
        assert launch.env[key].startswith(str((tmp_path / "trial").resolve())), key
    assert launch.env["TMPDIR"] == str(tmp_path / "short")  # its sockets: see test_window_study
    assert launch.env["HF_HUB_OFFLINE"] == "1"


def test_a_study_sweeping_centroid_top_k_is_refused_before_anything_boots(tmp_path):
    db = tmp_path / "sweeps.db"
    result = subprocess.run(
        [sys.executable, "-m", "sweep.run", "--study", "ctk", "--manifest", "vllm-cpu", "--storage", f"sqlite:///{db}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "vllm-cpu.json" in result.stderr and "'centroid_top_k'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not db.exists()  # refused before the database, Ray or any engine was touched
