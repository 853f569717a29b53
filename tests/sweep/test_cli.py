"""``python -m sweep.run``'s front door: bad input is one line and exit 2, before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stacks import stub_profile
from tests.sweep.kit import write_manifest, write_study

REPO = Path(__file__).resolve().parents[2]


def sweep_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "sweep.run", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def study(tmp_path: Path, **fields) -> Path:
    fields.setdefault("space", {"centroid_top_k": {"choices": [16, 32]}})
    fields.setdefault("n_trials", 3)
    manifest = fields.pop("manifest", None) or write_manifest(tmp_path)
    return write_study(tmp_path, manifest=manifest, profile=stub_profile(tmp_path), **fields)


def refused(result: subprocess.CompletedProcess, cwd: Path, *fragments: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert not (cwd / "runs").exists()  # no database, no Ray, no engine


@pytest.mark.parametrize(
    ("fields", "fragments"),
    [
        ({"sampler": "anneal"}, ("field 'sampler'", "valid: ['tpe', 'nsga2', 'gp', 'random', 'grid']")),
        ({"space": {"top_p": {"choices": [1]}}}, ("unknown knob 'top_p'", "valid knobs")),
        ({"workers": 0}, ("field 'workers' must be an integer >= 1",)),
    ],
)
def test_a_bad_study_is_refused_in_one_line_before_anything_starts(tmp_path, fields, fragments):
    path = study(tmp_path, **fields)
    refused(sweep_run("--study", str(path), cwd=tmp_path), tmp_path, str(path), *fragments)


def test_a_knob_the_manifest_does_not_consume_is_refused(tmp_path):
    manifest = write_manifest(tmp_path)
    data = json.loads(manifest.read_text())
    del data["env"]["SPECULATIVE_CONFIG"]
    manifest.write_text(json.dumps(data))
    path = study(tmp_path, manifest=manifest, space={"num_speculative_tokens": {"choices": [3, 4]}})
    refused(sweep_run("--study", str(path), cwd=tmp_path), tmp_path, "knob 'num_speculative_tokens' is not consumed")


def test_bad_overrides_are_refused_too(tmp_path):
    path = study(tmp_path)
    refused(sweep_run("--study", str(path), "--profile", "nope", cwd=tmp_path), tmp_path, "unknown profile 'nope'")
    refused(sweep_run("--study", str(path), "--manifest", "nope", cwd=tmp_path), tmp_path, "--manifest", "known names")
    refused(sweep_run("--study", "nosuch", cwd=tmp_path), tmp_path, "study 'nosuch' not found")
    result = sweep_run("--study", str(path), "--trials", "0", cwd=tmp_path)
    assert result.returncode == 2 and "--trials must be at least 1" in result.stderr


def test_a_dry_run_prints_each_trial_argv_and_env_with_secrets_hidden(tmp_path):
    path = study(
        tmp_path,
        manifest=write_manifest(tmp_path, HF_TOKEN="hf_very_secret"),
        sampler="grid",
        space={"centroid_top_k": {"choices": [16, 32, 48]}},
        n_trials=4,
    )
    result = sweep_run("--study", str(path), "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "trial 0 (baseline): sliding_window=512 centroid_top_k=32 num_speculative_tokens=3" in out
    assert sorted(
        int(line.split("CENTROID_TOP_K=")[1]) for line in out.splitlines() if "env:  CENTROID_TOP_K=" in line
    ) == [16, 32, 32, 48]
    assert out.count("argv: ") == 4 and "stub_server.py" in out
    assert "HF_TOKEN=***" in out and "hf_very_secret" not in out
    assert "HF_HUB_OFFLINE=1" in out
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden"])
def test_a_study_name_that_is_not_a_plain_name_is_refused_naming_the_rule(tmp_path, name):
    path = study(tmp_path, name="placeholder")
    path.write_text(path.read_text().replace('name = "placeholder"', f"name = {json.dumps(name)}"))
    result = sweep_run("--study", str(path), "--dry-run", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"field 'name': {name!r} is not a plain name (letters, digits, '.', '_' and '-' only" in result.stderr
    assert "no path separator, no '..'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent / "x").exists()


def test_a_manifest_name_that_is_not_a_plain_name_is_refused(tmp_path):
    manifest = write_manifest(tmp_path)
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "name": "../../etc"}))
    result = sweep_run("--study", str(study(tmp_path, manifest=manifest)), "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and "'../../etc' is not a plain name" in result.stderr, result.stderr
