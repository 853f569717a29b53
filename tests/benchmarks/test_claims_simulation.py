"""``benchmarks.claims_simulation``, short: the odds of the points recommended are honest cell by cell, the
confirmation runs sequentially by the tool's own stopping rule, and the same scoring sees the optimism of the
rules that are not (the promotion's own figures; an understated prior)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from benchmarks.claims_simulation import (
    CONFIRM_BOOTS,
    CONFIRM_MAX_BOOTS,
    MAX_CLAIM,
    MAX_DIFF,
    WALK_BOOTS,
    Cell,
    drift_path,
    main,
    simulate,
)

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


def test_the_confirmation_goes_on_a_pair_at_a_time_and_stops_by_the_tools_rule(outcomes):
    for o in outcomes.values():
        # every promotion chose a point, and its confirmation stopped where the tool says, within its bounds
        assert len(o.rounds) == o.promotions == sum(o.stops.values())
        assert set(o.stops) <= {"target", "ceiling", "gate", "cap"}
        assert all(CONFIRM_BOOTS <= r <= CONFIRM_MAX_BOOTS for r in o.rounds)
        # only a confirmation that stopped on reaching the target recommends
        assert len(o.confirmed) <= o.stops["target"]
    # and it is sequential: some confirmations went past their first boots (optional stopping, scored above)
    assert any(r > CONFIRM_BOOTS for o in outcomes.values() for r in o.rounds)


def test_the_scoring_sees_the_optimism_of_the_promotions_own_figures(outcomes):
    # the rule before the confirmation: its recommendations there read 0.9 and more, and verify far less often
    screened = outcomes[0.04].screening
    assert len(screened) >= 50
    assert _mean(s.predicted for s in screened) - _mean(s.true for s in screened) > 0.15


def test_a_study_that_understates_its_machines_is_told_too_much_but_shown_the_p_at_the_true_term():
    (o,) = simulate([Cell(0.01, 0.01, 0.04, 3, 3, prior=0.01)], promotions=200, seed=7)
    assert o.cell.ratio == 4
    assert len(o.confirmed) >= 50
    true = _mean(s.true for s in o.confirmed)
    assert _mean(s.predicted for s in o.confirmed) - true > 0.15
    # the claim's P at the 4% machine term, which fits the organisers' true machine, is the one that holds
    assert abs(_mean(s.at_machine for s in o.confirmed) - true) <= MAX_DIFF


def test_a_drift_path_walks_at_its_pace_or_steps_once_by_its_size():
    rng = random.Random(3)
    size, span, total = 0.02, 13, 30
    walks = [drift_path("walk", size, rng, span=span, total=total) for _ in range(4000)]
    assert all(len(w) == total and w[0] == 0.0 for w in walks)
    # the level after WALK_BOOTS steps has sd ``size``; its sample variance's own sd is var * sqrt(2 / n)
    var = statistics.fmean(w[WALK_BOOTS] ** 2 for w in walks)
    assert abs(var - size**2) <= 4 * size**2 * math.sqrt(2 / len(walks))
    steps = [drift_path("step", size, rng, span=span, total=total) for _ in range(2000)]
    for path in steps:
        at = next(k for k, level in enumerate(path) if level)
        assert 1 <= at < span and set(path[at:]) == {path[-1]} and abs(path[-1]) == size and not any(path[:at])
    assert {next(k for k, level in enumerate(p) if level) for p in steps} == set(range(1, span))
    assert drift_path(None, size, rng, span=span, total=total) == [0.0] * total


def test_a_drifting_machine_moves_the_study_s_boots_and_every_cell_is_labelled():
    (o,) = simulate([Cell(0.01, 0.01, 0.02, 3, 3, drift="step")], promotions=20, seed=1)
    assert o.cell.label() == "boot 1% run 1% machine 2% step 2% 3 cand x 3" and len(o.rounds) == 20


def test_the_command_prints_every_table_and_exits_0_when_every_scored_cell_meets_the_targets(capsys, monkeypatch):
    import benchmarks.claims_simulation as simulation

    monkeypatch.setattr(simulation, "RIGHT", QUIET[:2])
    monkeypatch.setattr(simulation, "WRONG", [Cell(0.01, 0.01, 0.04, 3, 3, prior=0.01)])
    monkeypatch.setattr(simulation, "DRIFT", [Cell(0.01, 0.01, 0.02, 3, 3, drift="walk")])
    assert main(["--promotions", "120", "--least", "40", "--workers", "1", "--tables", "right", "wrong"]) == 0
    printed = capsys.readouterr().out
    assert "boot 1% run 1% machine 2% 3 cand x 3" in printed and "met in every scored cell" in printed
    assert "the study states the default between_prior (1%" in printed and "machine 4% stated 1%" in printed
    # the 4x cell is held by the P at the matching term, which its summary names
    assert "the P at the matching term is at worst" in printed and "walk 2%" not in printed


def test_the_command_exits_1_naming_the_cells_that_miss(capsys, monkeypatch):
    import benchmarks.claims_simulation as simulation

    monkeypatch.setattr(simulation, "DRIFT", [Cell(0.01, 0.01, 0.02, 3, 3, drift="step")])
    monkeypatch.setattr(simulation, "MAX_DIFF", -1.0)  # no P can be that far under its truth: every scored cell misses
    assert main(["--promotions", "60", "--least", "10", "--workers", "1", "--tables", "drift"]) == 1
    assert "NOT met in 1: boot 1% run 1% machine 2% step 2% 3 cand x 3" in capsys.readouterr().out
