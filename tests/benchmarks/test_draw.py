"""``benchmarks._draw``: a run drawn a round at a time is the run drawn at once, a per-boot shift moves each boot
by its own amount, and a confirmation of drawn boots runs as the tool runs one, stopped by its own rule."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks._draw import confirmed, drawn_boots
from engine.config import get_profile
from sweep.claims import ConfirmationPlan, PromotionPlan
from sweep.judgement import NOISE_FLOOR, Gate

LEVELS = {0: (1000.0, 970.0), 1: (990.0, 990.0)}


def test_rounds_drawn_one_at_a_time_from_their_index_are_the_run_drawn_at_once():
    whole = drawn_boots(LEVELS, rounds=4, boot_sd=0.03, run_sd=0.01, gamma=0.02, rng=random.Random(5))
    rng = random.Random(5)
    pieces = [
        b
        for r in range(4)
        for b in drawn_boots(LEVELS, rounds=1, start=r, boot_sd=0.03, run_sd=0.01, gamma=0.02, rng=rng)
    ]
    assert pieces == whole
    assert [b.repeat for b in pieces] == [0, 0, 1, 1, 2, 2, 3, 3] and [b.order for b in pieces] == list(range(8))


def test_a_shift_per_boot_moves_each_boot_by_its_own_amount():
    shifts = [0.0, 0.0, 0.05, 0.05, -0.02, -0.02]
    boots = drawn_boots(LEVELS, rounds=3, shift=shifts)  # no noise: each run reads its level, moved
    for boot, shift in zip(boots, shifts):
        public, held = LEVELS[boot.trial_number]
        assert math.log(boot.tps / held) == pytest.approx(shift, abs=1e-12)
        assert math.log(boot.public_tps / public) == pytest.approx(shift, abs=1e-12)
    with pytest.raises(ValueError, match="3 shifts for 3 round"):
        drawn_boots(LEVELS, rounds=3, shift=shifts[:3])


def _plans(*, boots: int, most: int, prior: float) -> tuple[PromotionPlan, ConfirmationPlan]:
    promotion = PromotionPlan(
        run_id="p1",
        trials=(0, 1),
        boots=3,
        profile=get_profile("quick"),
        target=0.9,
        noise_floor=NOISE_FLOOR,
        gate=Gate(ppl_max=2.42),
        confirm_boots=boots,
        between_prior=prior,
    )
    return promotion, ConfirmationPlan(
        run_id="c1", promotion_run="p1", chosen=0, control=1, boots=boots, max_boots=most
    )


@pytest.mark.parametrize(
    ("boot_sd", "prior", "reason"),
    [(0.003, 0.0, "target"), (0.10, 0.01, "ceiling")],  # steady: P near 1 at once; 10% a boot: no boots reach 0.9
)
def test_a_confirmation_runs_its_first_boots_then_a_round_at_a_time_until_the_tools_rule_stops_it(
    boot_sd, prior, reason
):
    plan, confirmation = _plans(boots=3, most=8, prior=prior)
    rng = random.Random(11)
    draw = dict(boot_sd=boot_sd, run_sd=0.003, gate=2.42, rng=rng)
    promotion = drawn_boots(LEVELS, rounds=3, run_id="p1", **draw)
    calls = []

    def more(rounds, start):
        calls.append((rounds, start))
        return drawn_boots(LEVELS, rounds=rounds, start=start, run_id="c1", **draw)

    claims, boots = confirmed(plan, promotion, confirmation, more)
    stop = claims.confirmation.stop
    assert stop.reason == reason and stop.rounds == 3  # decided as soon as the stated boots are in
    assert calls == [(3, 0)] and len(boots) == 6
    assert (claims.recommended is not None) == (reason == "target")


def test_a_confirmation_goes_on_a_round_at_a_time_from_the_one_after_the_last():
    # wherever the rule stops it (target, ceiling or cap), every round after the first boots is drawn alone, from
    # the one after the last
    plan, confirmation = _plans(boots=2, most=6, prior=0.02)
    rng = random.Random(4)
    draw = dict(boot_sd=0.025, run_sd=0.005, gate=2.42, rng=rng)
    promotion = drawn_boots(LEVELS, rounds=3, run_id="p1", **draw)
    calls = []

    def more(rounds, start):
        calls.append((rounds, start))
        return drawn_boots(LEVELS, rounds=rounds, start=start, run_id="c1", **draw)

    claims, boots = confirmed(plan, promotion, confirmation, more)
    stop = claims.confirmation.stop
    assert calls == [(2, 0), *((1, r) for r in range(2, stop.rounds))]
    assert len(boots) == 2 * stop.rounds and 2 <= stop.rounds <= 6
    assert [b.repeat for b in boots] == [r for r in range(stop.rounds) for _ in LEVELS]
