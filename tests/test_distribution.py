"""A non-editable install carries what the code reads: the knob registry, the profiles, the
studies, the manifests and the data sets (``studies/`` as package data), so that it works from
outside the checkout. Costs about 6 s here (a wheel built from a copy of the sources, and one dry run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "errors.py", "cli.py", "engine", "sweep", "dashboards", "benchmarks", "studies"]


def _install(tmp_path: Path) -> Path:
    # From a copy, so that the build's own folders (build/, *.egg-info) never land in the checkout.
    source, target = tmp_path / "source", tmp_path / "installed"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return target


def test_an_installed_copy_dry_runs_ctk_from_outside_the_checkout(tmp_path):
    target = _install(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *argv], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300
        )

    # The checkout's editable install is still on this interpreter's path: the modules (and so the
    # files they read) must come from the installed copy, or this test would prove nothing.
    where = run(
        "-c",
        "import engine.config, studies, sweep.run; "
        "print(engine.config.KNOBS_FILE, engine.config.STUDIES_DIR, studies.__file__, sweep.run.__file__)",
    )
    assert where.returncode == 0, where.stderr
    assert all(Path(p).is_relative_to(target) for p in where.stdout.split()), where.stdout
    done = run("-m", "sweep.run", "--study", "ctk", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "trial 0 (baseline): sliding_window=512 centroid_top_k=32 num_speculative_tokens=3" in done.stdout
    assert f"cwd:  {target}" in done.stdout  # {repo}: the folder the install put the packages in
