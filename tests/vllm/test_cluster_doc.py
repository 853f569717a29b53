"""docs/cluster.md and the README's cluster section: their dry-run command runs as written and
shows what each A10G trial gets."""

import re
import shlex
import subprocess
import sys

from engine.config import REPO_ROOT

DOC = REPO_ROOT / "docs" / "cluster.md"
README = REPO_ROOT / "README.md"


def dry_run_command(doc) -> list[str]:
    lines = [line.strip() for line in doc.read_text().splitlines()]
    found = [line for line in lines if line.startswith("python -m sweep.run") and "--dry-run" in line]
    assert len(found) == 1, found
    return shlex.split(found[0])


def test_the_readme_shows_the_guides_dry_run():
    assert dry_run_command(README) == dry_run_command(DOC)


def test_the_documented_dry_run_prints_each_trials_argv_and_env(challenge_data):
    argv = dry_run_command(DOC)
    result = subprocess.run([sys.executable, *argv[1:]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "manifest" in out and "vidraft-w188-ctk49.json" in out and "nothing is booted" in out
    assert "gate PPL <= 2.42" in out  # the challenge's own gate
    trials = re.findall(r"^trial (\d+)( \(baseline\))?: .*\bcentroid_top_k=(\d+)", out, flags=re.M)
    assert trials[0] == ("0", " (baseline)", "49")  # the manifest as published
    assert sorted(int(k) for _, _, k in trials[1:]) == [30, 35, 40, 45, 49, 56, 64]  # the grid, once each
    ctk_env = re.findall(r"^  env:  CENTROID_TOP_K=(\d+)$", out, flags=re.M)
    assert ctk_env == [k for _, _, k in trials]  # each trial's knob reaches its env
    assert out.count("argv: python serve.py") == len(trials)
    assert "HF_HUB_OFFLINE=1" in out
