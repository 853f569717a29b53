"""A replay drives the driver's Optuna setup over a recorded grid: real samplers, no server."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks._replay import replay, surface_spec
from benchmarks._surface import load_surface
from sweep.search import StudySpec, load_study
from sweep.search._core import CONVERGED_AFTER
from tests.stacks import stub_profile
from tests.sweep.kit import write_manifest, write_study

# The stub manifest's baseline: window 512, CENTROID_TOP_K 32. Window 64 is over the +5% gate.
ROWS = [
    "g,0,True,complete,32,512,100,10.0",
    *(
        f"g,{i},False,complete,{k},{w},{tps},{ppl}"
        for i, (k, w, tps, ppl) in enumerate(
            [
                (8, 512, 60, 10.0),
                (16, 512, 90, 10.0),
                (64, 512, 130, 10.0),
                (8, 64, 70, 12.0),
                (16, 64, 95, 12.0),
                (32, 64, 105, 12.0),
                (64, 64, 140, 12.0),
            ],
            start=1,
        )
    ),
    "g,8,False,complete,32,512,104,10.0",
]


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    path = tmp_path / "grid.csv"
    path.write_text("study,trial,is_baseline,status,centroid_top_k,sliding_window,tps,ppl\n" + "\n".join(ROWS) + "\n")
    return path


@pytest.fixture
def spec(tmp_path: Path) -> StudySpec:
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        name="joint",
        space={"centroid_top_k": {"low": 8, "high": 64}, "sliding_window": {"choices": [64, 128, 512]}},
        sampler="tpe",
        seed=1,
        n_trials=12,
    )
    return load_study(study)


def test_surface_spec_narrows_the_space_keeping_its_kind(spec: StudySpec, grid: Path) -> None:
    narrowed = surface_spec(spec, load_surface(grid))
    assert narrowed.space["centroid_top_k"].values() == [8, 16, 32, 64]
    assert narrowed.space["centroid_top_k"].choices is not None  # 8, 16, 32, 64 is no arithmetic range
    assert narrowed.space["sliding_window"].choices == (64, 512)


def test_grid_replay_visits_every_point_once_after_the_baseline(spec: StudySpec, grid: Path) -> None:
    surface = load_surface(grid)
    run = replay(replace(surface_spec(spec, surface), sampler="grid"), surface, seed=0, n_trials=40)
    assert len(run) == 1 + len(surface.points)  # the grid ends when it is exhausted
    assert run[0].knobs == {"centroid_top_k": 32, "sliding_window": 512, "num_speculative_tokens": 3}
    assert sorted((r.knobs["centroid_top_k"], r.knobs["sliding_window"]) for r in run[1:]) == sorted(surface.points)
    # Judged by the recorded means against 1.05 x the baseline's mean PPL (10.0).
    assert {r.knobs["sliding_window"] for r in run if r.feasible} == {512}
    assert run[0].tps == pytest.approx(102)


@pytest.mark.parametrize("sampler", ["tpe", "random", "nsga2"])
def test_replays_are_seeded(spec: StudySpec, grid: Path, sampler: str) -> None:
    surface = load_surface(grid)
    narrowed = replace(surface_spec(spec, surface), sampler=sampler)
    first = replay(narrowed, surface, seed=3, n_trials=15)
    booted = [t.record.booted for t in first]  # the budget counts boots: copies and memo hits are free,
    assert sum(booted) == 15 or not any(booted[-CONVERGED_AFTER:])  # or the sampler converged on known points
    assert first == replay(narrowed, surface, seed=3, n_trials=15)


def test_a_grid_over_other_knobs_is_refused(spec: StudySpec, tmp_path: Path) -> None:
    other = tmp_path / "other.csv"
    other.write_text("study,trial,is_baseline,status,num_speculative_tokens,tps,ppl\ng,0,True,complete,3,1,1\n")
    with pytest.raises(ValueError, match="sweeps"):
        surface_spec(spec, load_surface(other))
