"""``benchmarks.claims_simulation``, short: the odds of the points recommended are honest cell by cell, and the
same scoring sees the optimism of the rules that are not (the promotion's own figures; an understated prior)."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.claims_simulation import MAX_CLAIM, MAX_DIFF, Cell, main, simulate

QUIET = [Cell(0.01, 0.01, machine, 3, 3) for machine in (0.0, 0.02, 0.04)]


@pytest.fixture(scope="module")
def outcomes():
    return {o.cell.machine_sd: o for o in simulate(QUIET, promotions=200, seed=7)}


def _mean(values):
    return statistics.fmean(values)


def test_the_recommended_points_odds_are_honest_in_every_cell_that_recommends(outcomes):
    scored = [o for o in outcomes.values() if len(o.confirmed) >= 50]
    assert len(scored) == 2  # the cells of a machine shift of 0% and 2%
    for o in scored:
        assert _mean(s.predicted for s in o.confirmed) - _mean(s.true for s in o.confirmed) <= MAX_DIFF, o.cell
        assert _mean(s.claim_over_level for s in o.confirmed) <= MAX_CLAIM, o.cell
    # where another machine reads 4% away, one re-run within 5% cannot honestly reach 0.9: nothing is recommended
    assert outcomes[0.04].confirmed == []


def test_the_scoring_sees_the_optimism_of_the_promotions_own_figures(outcomes):
    # the rule before the confirmation: its recommendations there read 0.9 and more, and verify far less often
    screened = outcomes[0.04].screening
    assert len(screened) >= 50
    assert _mean(s.predicted for s in screened) - _mean(s.true for s in screened) > 0.15


def test_a_study_that_understates_its_machines_is_told_too_much():
    (o,) = simulate([QUIET[2]], promotions=200, seed=7, prior=0.01)
    assert len(o.confirmed) >= 50
    assert _mean(s.predicted for s in o.confirmed) - _mean(s.true for s in o.confirmed) > 0.15


def test_the_command_prints_the_cells_and_exits_0_when_every_scored_cell_meets_the_targets(capsys, monkeypatch):
    import benchmarks.claims_simulation as simulation

    monkeypatch.setattr(simulation, "CELLS", QUIET[:2])
    assert main(["--promotions", "120", "--least", "40", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "boot 1% run 1% machine 2% 3 cand x 3" in printed and "met in every scored cell" in printed
    assert "the study states the default between_prior (1%)" in printed
