from hypothesis import given
from hypothesis import strategies as st

from sweep.pareto import FrontPoint, dominates, pareto_front


def p(number, tps, ppl, feasible=True):
    return FrontPoint(number=number, tps=tps, ppl=ppl, feasible=feasible)


def test_the_front_keeps_feasible_non_dominated_points_fastest_first():
    points = [p(0, 10, 2.30), p(1, 12, 2.35), p(2, 11, 2.36), p(3, 15, 2.50, feasible=False), p(4, 9, 2.29)]
    assert [q.number for q in pareto_front(points)] == [1, 0, 4]


def test_equal_points_both_stay_and_an_empty_study_has_no_front():
    assert [q.number for q in pareto_front([p(0, 10, 2.3), p(1, 10, 2.3)])] == [0, 1]
    assert pareto_front([]) == [] and pareto_front([p(0, 1, 9, feasible=False)]) == []


points = st.lists(
    st.builds(FrontPoint, number=st.integers(0, 1000), tps=st.floats(0, 1000), ppl=st.floats(1, 100),
              feasible=st.booleans()),
    max_size=30,
)


@given(points)
def test_every_feasible_point_is_on_the_front_or_dominated_by_it(pts):
    front = pareto_front(pts)
    assert all(q.feasible for q in front)
    assert not any(dominates(a, b) for a in front for b in front)
    for q in pts:
        if q.feasible and q not in front:
            assert any(dominates(f, q) for f in front)
