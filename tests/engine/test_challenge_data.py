"""The organisers' own files, read unchanged from where a user keeps them (``GEMMA_SWEEP_CHALLENGE_DATA``)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from engine.config import CHALLENGE_DATA_ENV, REPO_ROOT, consumed_knobs, get_profile, load_manifest
from errors import DataError

# The first prompts sglang 0.5.2's bench_serving sends for their file with --seed 1, read off its
# own code run against the file (random.seed(1); random.shuffle after dropping <2-turn records).
BENCH_SERVING_ORDER = [
    "mmlu_pro-006f3a2112",
    "mmlu_pro-012f0d5c8d",
    "gpqa_diamond-123161632f",
    "mmlu_pro-00ff96e757",
    "gpqa_diamond-27ae63a859",
    "gpqa_diamond-435ccdce7c",
    "gpqa_diamond-1ce3d847d2",
    "mmlu_pro-0081aeb9c3",
    "mmlu_pro-001de7fe6d",
    "mmlu_pro-0151fb8117",
]


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_the_challenge_profile_reads_their_prompts_and_ground_truth_as_their_harness_does(challenge_data):
    before = _digests(challenge_data)
    profile = get_profile("challenge")
    prompts, records = profile.load_data()
    raw = {
        r["id"]: r["conversations"][0]["value"]
        for r in json.loads((challenge_data / "eval_prompts_sharegpt.json").read_text())
    }
    assert [p.id for p in prompts[:10]] == BENCH_SERVING_ORDER
    assert len(prompts) == 128 and sorted(p.id for p in prompts) == sorted(raw)
    assert all(p.text == raw[p.id] for p in prompts)  # the text as it is in their file
    assert len(records) == 128 and sum(len(r.target_token_ids) for r in records) == 61797
    assert max(t for r in records for t in (*r.context_token_ids, *r.target_token_ids)) < 262144
    assert _digests(challenge_data) == before  # read, never written


def test_their_example_manifest_loads_as_it_is(challenge_data):
    manifest = load_manifest(challenge_data / "vllm_baseline_manifest.json")
    assert manifest.model_id == "google/gemma-4-E4B-it" and manifest.serve == ["python", "serve.py"]
    assert manifest.model_extra["description"]  # a field the format does not name is kept
    assert consumed_knobs(manifest) == []  # it carries none of the sweepable knobs


def test_without_the_setting_the_profile_says_what_to_set(monkeypatch):
    monkeypatch.delenv(CHALLENGE_DATA_ENV, raising=False)
    with pytest.raises(
        DataError, match=rf"profile 'challenge' reads the organisers' own files .*set {CHALLENGE_DATA_ENV}"
    ):
        get_profile("challenge").load_data()


def test_the_challenge_study_gates_at_the_challenges_own_ppl(challenge_data):
    out = subprocess.run(
        [sys.executable, "-m", "sweep.run", "--study", "ctk-a10g", "--dry-run"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "gate PPL <= 2.42" in out.stdout


@pytest.mark.slow  # boots the reference stack on the CPU
def test_engine_bench_measures_the_reference_stack_on_their_files(challenge_data, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.bench",
            "--manifest",
            "reference",
            "--profile",
            "challenge-quick",
            "--ppl-records",  # one of their records, whole: the profile's four cost 4x the CPU time and prove no more
            "1",
            "--json",
            "--workdir",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:] + out.stdout[-2000:]
    m = json.loads(out.stdout)["measurement"]
    assert m["num_prompts"] == 4 and m["completion_tokens"] == 4 * 64 and m["tps"] > 0
    first = json.loads((challenge_data / "ppl_ground_truth_tokens.jsonl").read_text().splitlines()[0])
    assert m["num_ppl_records"] == 1 and m["ppl_target_tokens"] == len(first["target_token_ids"]) and 1 < m["ppl"] < 100


def test_without_their_files_a_challenge_test_skips_and_fails_where_ci_requires_them(monkeypatch):
    from tests.conftest import REQUIRE_CHALLENGE_ENV, challenge_folder

    monkeypatch.delenv(CHALLENGE_DATA_ENV, raising=False)
    monkeypatch.delenv(REQUIRE_CHALLENGE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=rf"{CHALLENGE_DATA_ENV} is not set: export it"):
        challenge_folder()
    monkeypatch.setenv(REQUIRE_CHALLENGE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=rf"{REQUIRE_CHALLENGE_ENV}=1 requires them"):
        challenge_folder()
