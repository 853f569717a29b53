"""``python -m engine.bench`` as a user runs it: a real subprocess."""

import json
import re
import subprocess
import sys

import pytest

from engine.config import REPO_ROOT
from tests.stacks import STUB_MANIFEST


def bench(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "engine.bench", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_dry_run_of_the_winning_manifest_prints_the_patched_argv_and_env():
    result = bench("--manifest", "studies/manifests/vidraft-w188-ctk49.json", "--set", "centroid_top_k=44", "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "python serve.py" in lines
    assert "CENTROID_TOP_K=44" in lines
    assert """HF_OVERRIDES='{"text_config": {"sliding_window": 188}}'""" in lines
    assert """SPECULATIVE_CONFIG='{"method":"mtp","model":"/tmp/qat-assistant","num_speculative_tokens":7}'""" in lines
    record = json.loads(lines[-1])
    assert record["argv"] == ["python", "serve.py"]
    assert record["env"]["CENTROID_TOP_K"] == "44" and record["env"]["HF_HUB_OFFLINE"] == "1"
    assert record["knobs"] == {
        "sliding_window": 188,
        "centroid_top_k": 44,
        "num_speculative_tokens": 7,
        "warmup_prompts": 64,  # its own bridge (WARMUP_BRIDGE=1): the argv above is not wrapped
        "warmup_max_tokens": 1,
    }


def test_dry_run_boots_nothing(tmp_path):
    marker = tmp_path / "started"
    manifest = tmp_path / "m.json"
    manifest.write_text(
        json.dumps(
            {
                "name": "marker",
                "model_id": "m",
                "served_model_name": "s",
                "serve": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                "env": {"PORT": "{port}", "CENTROID_TOP_K": "32"},
            }
        )
    )
    result = bench("--manifest", str(manifest), "--set", "centroid_top_k=5", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["env"]["CENTROID_TOP_K"] == "5"
    assert not marker.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--manifest", "nope"], r"manifest 'nope' not found"),
        (["--manifest", "reference", "--set", "windw=3"], r"unknown knob 'windw'; valid knobs"),
        (["--manifest", "reference", "--set", "sliding_window=0"], r"value 0 is out of range 1\.\.131072"),
        (["--manifest", "reference", "--set", "sliding_window"], r"expected knob=value"),
        (["--manifest", "reference", "--profile", "fast"], r"unknown profile 'fast'; valid: \[.*'quick'"),
        (["--set", "a=1"], r"the following arguments are required: --manifest"),
        (
            ["--manifest", "reference", "--repeats", "0"],
            r"--repeats: profile field 'tps_repeats' must be an integer >= 1, got 0",
        ),
    ],
)
def test_user_errors_are_one_line_on_stderr_and_exit_2(args, message):
    result = bench(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert re.search(message, lines[0]), lines[0]


def test_a_quick_run_prints_a_table_and_a_json_record(tmp_path):
    result = bench(
        "--manifest",
        str(STUB_MANIFEST),
        "--set",
        "sliding_window=64",
        "--profile",
        "quick",
        "--repeats",
        "3",
        "--workdir",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table, record_line = result.stdout.rsplit("\n", 2)[0], result.stdout.splitlines()[-1]
    for row in ("TPS", "TPS runs", "TPS rule", "PPL", "latency s", "acceptance", "timings s"):
        assert f"\n{row}" in table
    record = json.loads(record_line)
    assert len(record["measurement"]["tps_runs"]) == 3 and record["measurement"]["tps_cv"] is not None
    assert record["status"] == "complete" and record["knobs"]["sliding_window"] == 64
    stored = json.loads((tmp_path / "outcome.json").read_text())
    assert stored["measurement"]["tps"] == record["measurement"]["tps"]
    assert len(stored["measurement"]["output_text_sha256"]) == record["measurement"]["num_prompts"]  # of the chosen run


def test_a_failed_trial_exits_1_with_its_reason_and_log_tail(tmp_path):
    manifest = tmp_path / "broken.json"
    data = json.loads(STUB_MANIFEST.read_text())
    data["env"]["STUB_FAULT"] = "boot_exit"
    manifest.write_text(json.dumps(data))
    result = bench("--manifest", str(manifest), "--profile", "quick", "--workdir", str(tmp_path / "run"))
    assert result.returncode == 1
    assert "exited with status 1 during boot" in result.stdout
    assert "simulated boot failure" in result.stdout


@pytest.mark.slow
def test_the_reference_stack_on_the_quick_profile_and_a_narrow_window(tmp_path):
    """The issue's first Done-when line: TPS, PPL, latency and acceptance of the reference stack,
    and a higher PPL with --set sliding_window=32 than at its default window."""
    records = {}
    for name, extra in (("default", []), ("w32", ["--set", "sliding_window=32"])):
        result = bench(
            "--manifest",
            "studies/manifests/reference.json",
            "--profile",
            "quick",
            *extra,
            "--workdir",
            str(tmp_path / name),
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        records[name] = json.loads(result.stdout.splitlines()[-1])["measurement"]
        assert "acceptance" in result.stdout and "latency s" in result.stdout
    default, narrow = records["default"], records["w32"]
    assert default["tps"] > 0 and default["latency_s"]["p50"] > 0
    assert default["acceptance_rate"] is not None and 0 <= default["acceptance_rate"] <= 1
    assert narrow["ppl"] > default["ppl"]
