import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweep.judgement import (
    FrontPoint,
    Gate,
    Noise,
    Z,
    dominates,
    faster,
    front_ties,
    is_feasible,
    lower_ppl,
    over_gate,
    pareto_front,
    pooled_log_sd,
)


def p(number, tps, ppl, feasible=True):
    return FrontPoint(number=number, tps=tps, ppl=ppl, feasible=feasible)


def test_the_front_keeps_feasible_non_dominated_points_fastest_first():
    points = [p(0, 10, 2.30), p(1, 12, 2.35), p(2, 11, 2.36), p(3, 15, 2.50, feasible=False), p(4, 9, 2.29)]
    assert [q.number for q in pareto_front(points)] == [1, 0, 4]


def test_equal_points_both_stay_and_an_empty_study_has_no_front():
    assert [q.number for q in pareto_front([p(0, 10, 2.3), p(1, 10, 2.3)])] == [0, 1]
    assert pareto_front([]) == [] and pareto_front([p(0, 1, 9, feasible=False)]) == []


points = st.lists(
    st.builds(
        FrontPoint, number=st.integers(0, 1000), tps=st.floats(0, 1000), ppl=st.floats(1, 100), feasible=st.booleans()
    ),
    max_size=30,
)


@given(points)
def test_every_feasible_point_is_on_the_front_or_dominated_by_it(pts):
    # exact points (no noise): dominance is transitive, so a point off the front has a dominator on it
    front = pareto_front(pts)
    assert all(q.feasible for q in front)
    assert not any(dominates(a, b) for a in front for b in front)
    for q in pts:
        if q.feasible and q not in front:
            assert any(dominates(f, q) for f in front)


# --- noise: a front that knows how much one boot moves -------------------------------------


def noisy(number, tps, ppl, *, sd=0.05, tol=0.002):
    return FrontPoint(number=number, tps=tps, ppl=ppl, feasible=True, tps_sd=sd, ppl_tol=tol)


def test_a_speed_difference_inside_the_noise_is_a_tie_not_a_trade_off():
    # vllm-h200's trials 8 and 7: 11.5% apart in TPS, 0.0027 in PPL; one boot moves TPS about 5%
    eight, seven = noisy(8, 1838.3, 5.5783), noisy(7, 1647.8, 5.5756)
    assert not dominates(eight, seven) and not dominates(seven, eight)
    assert [[q.number for q in g] for g in front_ties(pareto_front([eight, seven]))] == [[8, 7]]
    # Without noise the same two points are a trade-off: both on the front, each its own group
    plain = [FrontPoint(number=q.number, tps=q.tps, ppl=q.ppl, feasible=True) for q in (eight, seven)]
    assert [[q.number for q in g] for g in front_ties(pareto_front(plain))] == [[8], [7]]


def test_a_difference_beyond_the_noise_dominates_and_a_tolerated_ppl_does_not_save_the_slower():
    fast, slow = noisy(1, 1300.0, 5.5790), noisy(2, 1000.0, 5.5780)  # PPL 0.001 lower, inside its tolerance
    assert faster(fast, slow) and not lower_ppl(slow, fast)
    assert dominates(fast, slow) and [q.number for q in pareto_front([fast, slow])] == [1]
    # A PPL lower beyond its tolerance keeps the slower point as a trade-off
    better = noisy(3, 1000.0, 5.50)
    assert lower_ppl(better, fast) and [q.number for q in pareto_front([fast, better])] == [1, 3]


def test_points_within_the_noise_form_one_group_and_a_clear_winner_stands_alone():
    # two boots' noise of 5% each: differences under exp(2 x 7.1%) - 1 = 15.2% are ties
    close = [noisy(0, 100.0, 2.3), noisy(1, 107.0, 2.3), noisy(2, 113.0, 2.3)]
    assert [[q.number for q in g] for g in front_ties(pareto_front(close))] == [[2, 1, 0]]
    assert [q.number for q in pareto_front([*close, noisy(3, 200.0, 2.3)])] == [3]
    # 100 vs 116 is beyond it: the faster dominates at equal PPL
    assert dominates(noisy(2, 116.0, 2.3), noisy(0, 100.0, 2.3))


def test_pooled_noise_and_the_noise_of_a_mean():
    sd, df = pooled_log_sd([[100.0, 100.0 * math.e**0.1], [50.0], [10.0, 10.0 * math.e**0.1]])
    assert df == 2 and sd == pytest.approx(0.1 / math.sqrt(2))
    assert pooled_log_sd([[1.0], []]) == (0.0, 0)
    noise = Noise(tps_sd=0.06, ppl_sd=0.001, basis="test")
    one, nine = (
        noise.point(number=0, tps=10, ppl=2.0, feasible=True),
        noise.point(number=0, tps=10, ppl=2.0, feasible=True, boots=9),
    )
    assert one.tps_sd == pytest.approx(0.06) and nine.tps_sd == pytest.approx(0.02)
    assert one.ppl_tol == pytest.approx(Z * 0.001 * 2.0) and nine.ppl_tol == pytest.approx(one.ppl_tol / 3)


def test_the_gate_is_compared_once_and_equal_passes():
    assert not over_gate(2.42, 2.42) and over_gate(2.4201, 2.42)
    assert is_feasible(ppl=2.42, gate=2.42, identity_diff=None, identity_required=True)
    assert not is_feasible(ppl=2.3, gate=2.42, identity_diff=1, identity_required=True)
    assert is_feasible(ppl=2.3, gate=2.42, identity_diff=1, identity_required=False)
    assert not is_feasible(ppl=None, gate=2.42, identity_diff=0, identity_required=False)
    assert (
        Gate(ppl_max_ratio=1.05).limit([2.0]) == pytest.approx(2.1) and Gate(ppl_max_ratio=1.05).limit([None]) is None
    )
