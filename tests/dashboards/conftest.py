"""One real sweep on the stub stack, shared by the export and serve tests of a session."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dashboards.kit import StubStudy, run_sweep, stub_study

SPACE = {"centroid_top_k": {"choices": [8, 16, 32, 64]}, "sliding_window": {"choices": [128, 512]}}


def _short_dir() -> Path:
    # sweep.run keeps its local Ray's files under ./runs; Unix socket paths must stay short
    return Path(tempfile.mkdtemp(prefix="gsd", dir="/tmp"))


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    folder = _short_dir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def swept() -> Iterator[StubStudy]:
    """``python -m sweep.run`` over 1 baseline + 8 grid points: measured, infeasible (window
    128 is over the gate), failed at boot (K=8) and greedy-differing (K=16) trials; each
    trial timed 3 times in its boot, and its PPL scored by context length."""
    folder = _short_dir()
    study = stub_study(
        folder,
        name="stubctk",
        space=SPACE,
        tps_repeats=3,
        length_texts=True,
        promotion={"candidates": 2, "boots": 2, "confirm_max_boots": 4},
    )
    result = run_sweep(study)
    assert result.returncode == 0, result.stdout + result.stderr
    yield study
    shutil.rmtree(folder, ignore_errors=True)
