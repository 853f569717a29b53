"""Splitting trial time into engine phases and the rest, from the two stored clocks."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from benchmarks._report import table
from benchmarks._timeline import TrialTiming
from benchmarks.overhead import shares

T0 = datetime(2026, 11, 30, 12, 0, 0)
PHASES = {"boot": 5.0, "warmup": 1.0, "tps": 10.0, "ppl": 3.0, "stop": 0.5}


def timing(number: int, asked_s: float, total_s: float, wall_s: float, row_s: float) -> TrialTiming:
    return TrialTiming(
        number=number,
        knobs={"centroid_top_k": 32},
        status="complete",
        is_baseline=number == 0,
        asked=T0 + timedelta(seconds=asked_s),
        written=T0 + timedelta(seconds=asked_s + row_s),
        told=T0 + timedelta(seconds=asked_s + wall_s),
        phases={**PHASES, "total": total_s},
    )


def test_sequential_trials_count_the_driver_between_them() -> None:
    first = timing(0, 0.0, total_s=20.0, wall_s=20.4, row_s=20.3)
    second = timing(1, 20.6, total_s=20.0, wall_s=20.5, row_s=20.2)
    items, sequential = shares([first, second])
    assert sequential
    assert items[0].gap_s == pytest.approx(0.2) and items[1].gap_s == 0.0
    # run_trial's 0.5 s outside its phases + 0.4 s from total to tell + the 0.2 s gap.
    assert items[0].other_s == pytest.approx(0.5 + 0.4 + 0.2)
    assert first.before_row_s == pytest.approx(0.3) and first.row_to_tell_s == pytest.approx(0.1)
    assert items[0].phases["tps"] == 10.0


def test_overlapping_trials_count_no_gap() -> None:
    items, sequential = shares([timing(0, 0.0, 20.0, 21.0, 20.5), timing(1, 5.0, 20.0, 21.0, 20.5)])
    assert not sequential
    assert [s.gap_s for s in items] == [0.0, 0.0]


def test_table_pads_columns() -> None:
    text = table(["a", "bb"], [["xyz", 1], ["q", 22]])
    assert text.splitlines() == ["a    bb", "---  --", "xyz   1", "q    22"]
