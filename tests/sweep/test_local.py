"""``python -m sweep.run`` without ``--ray-address``: a private local Ray, started and stopped."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import psutil

from tests.stacks import stub_profile
from tests.sweep.kit import write_manifest, write_study

REPO = Path(__file__).resolve().parents[2]


def ray_processes_under(folder: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if str(folder) in " ".join(process.info["cmdline"] or []):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_a_local_run_from_a_deep_folder_starts_its_own_ray(tmp_path):
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        n_trials=2,
        sampler="random",
        seed=1,
        space={"centroid_top_k": {"choices": [16, 32, 48]}},
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    result = subprocess.run(
        [sys.executable, "-m", "sweep.run", "--study", str(study)],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Database: sqlite:///runs/sweeps.db" in result.stdout
    trials = optuna.load_study(study_name="stubstudy", storage=f"sqlite:///{tmp_path}/runs/sweeps.db").trials
    assert {t.state.name for t in trials} == {"COMPLETE"}
    assert sum("reuse" not in t.user_attrs for t in trials) == 2  # the budget: two boots (a copy boots nothing)
    assert (tmp_path / "runs" / "stubstudy" / "trial-0000" / "engine.log").is_file()
    # pytest's folder is too deep for Ray's unix sockets under runs/: the short fallback is used.
    ray_dir = tmp_path / "runs" / "ray"
    assert not ray_dir.exists() and len(str(ray_dir)) + 70 > 107


def test_a_local_run_keeps_rays_files_under_runs_and_stops_ray(tmp_path):
    short = Path(tempfile.mkdtemp(prefix="gs", dir="/tmp"))
    try:
        study = write_study(
            short,
            manifest=write_manifest(short),
            profile=stub_profile(short),
            n_trials=1,
            space={"centroid_top_k": {"choices": [16, 32]}},
        )
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
        result = subprocess.run(
            [sys.executable, "-m", "sweep.run", "--study", str(study)],
            cwd=short,
            env={**env, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert any((short / "runs" / "ray").glob("session_*"))
        assert not ray_processes_under(short)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_a_time_limit_stops_dispatching_and_the_same_command_resumes(tmp_path):
    # about 3 s of TPS a trial: a 25 s limit (Ray's start and the worker's placement included)
    # leaves the budget of 6 unspent after the first few
    manifest = write_manifest(tmp_path, STUB_DECODE_STEP_S="0.05")
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=stub_profile(tmp_path),
        n_trials=6,
        sampler="grid",
        seed=1,
        space={"centroid_top_k": {"choices": [8, 16, 24, 32, 40]}},
    )
    env = {**{k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "sweep.run", "--study", str(study), "--time-limit", "25"]
    first = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "time limit reached with" in first.stdout and "--time-limit 25" in first.stdout, first.stdout
    storage = f"sqlite:///{tmp_path}/runs/sweeps.db"
    done = [t for t in optuna.load_study(study_name="stubstudy", storage=storage).trials if t.state.is_finished()]
    assert 1 <= len(done) < 6
    assert not [
        t for t in optuna.load_study(study_name="stubstudy", storage=storage).trials if not t.state.is_finished()
    ]
    again = subprocess.run(
        [*argv[:-2], "--time-limit", "600"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0 and "time limit reached" not in again.stdout, again.stdout + again.stderr
    assert len(optuna.load_study(study_name="stubstudy", storage=storage).trials) == 6
