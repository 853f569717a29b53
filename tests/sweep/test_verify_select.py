"""Which trials ``sweep.verify`` re-runs."""

from __future__ import annotations

import pytest

from errors import ConfigError
from sweep.claims import select_trials
from tests.sweep.kit import measured_record


def rec(number: int, tps: float | None, ppl: float | None, *, feasible: bool = True, gate: float | None = 2.4):
    if tps is None:
        return measured_record(number, None, None, status="failed", feasible=False, gate=gate)
    return measured_record(number, tps, ppl, knobs={"centroid_top_k": number}, feasible=feasible, gate=gate)


RECORDS = [
    rec(0, 100.0, 2.30),
    rec(1, 130.0, 2.30),  # the front of a lossless knob: one PPL, the fastest alone
    rec(2, 120.0, 2.30),
    rec(3, 200.0, 2.50, feasible=False),
    rec(4, None, None),
]


def test_default_is_the_feasible_front():
    assert [r.trial_number for r in select_trials(RECORDS, study_name="s")] == [1]


def test_top_takes_the_fastest_feasible_trials_front_or_not():
    assert [r.trial_number for r in select_trials(RECORDS, study_name="s", top=2)] == [1, 2]
    assert [r.trial_number for r in select_trials(RECORDS, study_name="s", top=10)] == [1, 2, 0]


def test_trials_by_number_and_the_errors():
    assert [r.trial_number for r in select_trials(RECORDS, study_name="s", trials=(3, 0))] == [3, 0]
    with pytest.raises(ConfigError, match=r"no trial measured to the end numbered \[4\]"):
        select_trials(RECORDS, study_name="s", trials=(4,))
    with pytest.raises(ConfigError, match="no feasible measured trial"):
        select_trials([rec(0, 1.0, 3.0, feasible=False)], study_name="s")
    with pytest.raises(ConfigError, match=r"trial\(s\) \[0\] .* no gate"):
        select_trials([rec(0, 1.0, 2.0, gate=None)], study_name="s")
