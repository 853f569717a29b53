"""The cost of honesty replays three ways over a recorded grid and prints each one's boots, hours and ratios."""

from __future__ import annotations

from benchmarks.cost_of_honesty import GRIDS, METHODS, _grid, main, replay_seed


def test_the_community_boots_every_measured_configuration_three_times_and_is_the_ratios_base(capsys):
    path, study = GRIDS["cpu"]
    grid = _grid(path, study, 0.8)
    measured = [p for p in grid.surface.points.values() if p.tps is not None and p.ppl is not None]
    community = replay_seed(grid, METHODS[2], seed=0)
    # three boots of each measured configuration, then, with an answer, the three boots of its verification
    assert community.boots in (3 * len(measured), 3 * len(measured) + 3)
    assert community.recommended == (community.boots > 3 * len(measured))
    assert community.submitted and community.shown is None  # it claims its fastest mean, with no odds
    ours = replay_seed(grid, METHODS[0], seed=0)
    assert 0 < ours.seconds and 0 <= ours.p_organisers <= 1 and (ours.verified <= ours.recommended)
    # a participant submits the recommendation, else the tool's best claim anyway, with the P the tool shows it
    assert ours.submitted and ours.shown is not None and 0 <= ours.shown <= 1
    assert not ours.recommended or ours.shown >= grid.spec.promotion.target

    assert main(["--grids", "cpu", "--seeds", "2", "--targets", "0.8"]) == 0
    out = capsys.readouterr().out
    rows = {m: line[len(m) :].split() for line in out.splitlines() for m in METHODS if line.startswith(m)}
    assert set(rows) == set(METHODS)
    boots, *_, by_ours, by_organisers = rows[METHODS[2]]
    assert float(boots) >= 3 * len(measured)  # both seeds booted every configuration three times
    for ratio in (by_ours, by_organisers):  # each ratio is to the community's own figure
        assert ratio in ("1.00", "-")
