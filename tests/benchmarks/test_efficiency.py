"""The sample-efficiency arithmetic: hypervolume, trials to reach, recorded surfaces, curves."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks._chart import curve_data
from benchmarks._efficiency import best_feasible_tps, hypervolume, hypervolume_curve, reference_point, trials_to_reach
from benchmarks._replay import Replayed
from benchmarks._surface import load_surface
from errors import ConfigError
from sweep.judgement import FrontPoint

HEADER = "study,trial,is_baseline,status,centroid_top_k,sliding_window,tps,ppl\n"


def write_grid(path: Path, rows: list[str], notes: str = "# recorded by a test\n") -> Path:
    path.write_text(notes + HEADER + "".join(r + "\n" for r in rows))
    return path


def test_hypervolume_of_a_staircase() -> None:
    points = [
        FrontPoint(number=0, tps=10, ppl=2.0, feasible=True),
        FrontPoint(number=1, tps=20, ppl=3.0, feasible=True),
        FrontPoint(number=2, tps=15, ppl=3.5, feasible=True),  # dominated by 1
        FrontPoint(number=3, tps=40, ppl=1.0, feasible=False),  # infeasible: not counted
    ]
    # Strips from tps_ref 5: [5, 10] at height 4 - 2, [10, 20] at height 4 - 3.
    assert hypervolume(points, tps_ref=5, ppl_ref=4) == pytest.approx(5 * 2 + 10 * 1)
    assert hypervolume(points, tps_ref=25, ppl_ref=4) == 0.0
    assert hypervolume([], tps_ref=0, ppl_ref=4) == 0.0


def test_surface_means_noise_and_baseline(tmp_path: Path) -> None:
    grid = write_grid(
        tmp_path / "g.csv",
        [
            "g,0,True,complete,32,512,100,10.0",
            "g,1,False,complete,32,512,110,10.0",
            "g,2,False,complete,8,512,50,10.0",
            "g,3,False,complete,8,64,200,20.0",
            "g,4,False,failed,32,64,,",
        ],
    )
    surface = load_surface(grid)
    assert surface.knobs == ("centroid_top_k", "sliding_window")
    assert surface.baseline == (32, 512)
    assert surface.point({"centroid_top_k": 32, "sliding_window": 512}).tps == pytest.approx(105)
    assert surface.point({"centroid_top_k": 32, "sliding_window": 64}).tps is None
    assert surface.repeated == 1
    # Two rows 100 and 110 around 105: relative deviations +-5/105, one degree of freedom.
    assert surface.tps_rel_sd == pytest.approx(math.sqrt(2 * (5 / 105) ** 2))
    assert surface.notes == ("recorded by a test",)
    gate = 10.5
    assert best_feasible_tps(surface, gate) == pytest.approx(105)  # 200 TPS is over the gate
    ref = reference_point(surface, gate)
    assert (ref.tps, ref.ppl) == (50, gate)
    assert ref.grid_hv == pytest.approx((105 - 50) * 0.5)


def test_surface_refuses_a_file_that_is_not_a_grid(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="not a recorded grid"):
        load_surface(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_surface(tmp_path / "missing.csv")


def test_trials_to_reach_and_the_curve(tmp_path: Path) -> None:
    surface = load_surface(
        write_grid(
            tmp_path / "g.csv",
            [
                "g,0,True,complete,32,512,100,10.0",
                "g,1,False,complete,8,512,50,10.0",
                "g,2,False,complete,64,512,120,10.0",
            ],
        )
    )
    ref = reference_point(surface, 10.5)
    run = [
        Replayed(knobs={}, tps=100, ppl=10.0, feasible=True),
        Replayed(knobs={}, tps=None, ppl=None, feasible=False),  # failed when recorded
        Replayed(knobs={}, tps=300, ppl=30.0, feasible=False),  # fast but over the gate
        Replayed(knobs={}, tps=119, ppl=10.0, feasible=True),  # within 99% of 120
    ]
    assert trials_to_reach(run, best_tps=120) == 4
    assert trials_to_reach(run[:3], best_tps=120) is None
    curve = hypervolume_curve(run, ref)
    assert curve[0] == pytest.approx(50 / 70) and curve[1] == curve[2] == curve[0]
    assert curve[3] == pytest.approx(69 / 70)


def test_curve_data_median_and_quartiles_hold_the_last_value() -> None:
    (curve,) = curve_data({"grid": [[0.1, 0.5, 1.0], [0.2, 0.4], [0.3, 0.6, 0.9]]})
    assert curve.trials == [1, 2, 3]
    assert curve.median == [0.2, 0.5, 0.9]  # the short run keeps 0.4 at trial 3
    assert curve.q1[2] <= curve.median[2] <= curve.q3[2]
