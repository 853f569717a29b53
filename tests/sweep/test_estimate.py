"""The claim estimator (sweep.claims) on boots of known levels, noise and run-order effect."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace

import pytest

from engine.profiles import get_profile
from sweep.claims import (
    BETWEEN_PRIOR,
    Claim,
    ClientOffset,
    Law,
    PromotionPlan,
    best_claim,
    between_runs,
    claim_for,
    claims_of,
    fit,
    screening_claim,
    study_noise,
)
from sweep.judgement import Gate
from sweep.store import BootRecord
from tests.sweep.kit import drawn_boots, measured_record


def test_the_fit_recovers_the_levels_and_takes_the_second_run_effect_out():
    # no noise: a boot's second run reads 4% faster, the held-out set 6% slower than the public one
    fitted = fit(drawn_boots({1: (1000.0, 940.0), 2: (800.0, 800.0)}, rounds=3, gamma=math.log(1.04)), floor=0.0)
    assert fitted.gamma == pytest.approx(math.log(1.04))
    assert math.exp(fitted.levels[1].public) == pytest.approx(1000.0) and math.exp(
        fitted.levels[1].heldout
    ) == pytest.approx(940.0)
    assert math.exp(fitted.levels[2].heldout) == pytest.approx(800.0)
    # 2 boots' order-free means per configuration around its own; 3 differences each, less one for gamma
    assert fitted.pooled.sigma_boot == pytest.approx(0.0, abs=1e-9) and fitted.shared
    assert (fitted.pooled.df_y, fitted.pooled.df_d) == (6 - 2, 6 - 2 - 1)


def test_a_claim_is_the_public_level_when_it_verifies_and_never_above_it():
    steady = fit(drawn_boots({1: (1000.0, 1000.0)}, rounds=4, boot_sd=0.002, seed=1), floor=0.01)
    claim = claim_for(steady, 1, gate=2.42, target=0.9)
    assert claim.meets and claim.claim == pytest.approx(claim.public) and claim.p_verified > 0.9
    assert claim.rerun_low < 1000.0 < claim.rerun_high and claim.unmeasured is None
    # held-out prompts that run 8% slower: claiming the public level would fail, so the claim comes down
    slower = fit(drawn_boots({1: (1000.0, 920.0)}, rounds=4, boot_sd=0.002, seed=1), floor=0.01)
    lowered = claim_for(slower, 1, gate=2.42, target=0.9)
    assert (
        lowered.claim < 0.97 * lowered.public and lowered.meets and lowered.p_verified == pytest.approx(0.9, abs=0.01)
    )


def test_noise_that_no_claim_survives_misses_the_target_and_nothing_is_recommended():
    noisy = fit(drawn_boots({1: (1000.0, 1000.0), 2: (900.0, 900.0)}, rounds=3, boot_sd=0.08, seed=3), floor=0.02)
    claims = [claim_for(noisy, n, gate=2.42, target=0.9) for n in (1, 2)]
    assert not any(c.meets for c in claims) and best_claim(claims) is None
    assert all(c.p_verified < 0.9 for c in claims)


@pytest.mark.parametrize(
    ("levels", "rounds", "left"),
    [
        ({1: (1000.0, 1000.0), 2: (900.0, 900.0), 3: (800.0, 800.0)}, 1, "0 degree(s) of freedom left for the boot's"),
        ({1: (1000.0, 1000.0)}, 2, "0 for the run's"),  # two boots, and gamma takes the one difference left
    ],
)
def test_no_degree_of_freedom_left_gives_no_odds_and_says_why(levels, rounds, left):
    # 11% of boot noise that a 2% floor would have hidden: nothing is claimed as known
    fitted = fit(drawn_boots(levels, rounds=rounds, boot_sd=0.11, seed=4), floor=0.02)
    claims = [claim_for(fitted, n, gate=2.42, target=0.9) for n in levels]
    for c in claims:
        assert c.p_verified is None and c.rerun_low is None and not c.meets and c.p_later is None
        assert c.unmeasured is not None and left in c.unmeasured and c.odds_text() == "-" and c.rerun_text() == "-"
    assert best_claim(claims) is None


def test_the_floor_bounds_the_scale_and_never_switches_the_law():
    # a re-run law is Student t on its degrees of freedom whatever the floor: just under the floor and just over
    # it, the odds differ by as little as the scale does (the old switch to a normal jumped 0.944 -> 0.988)
    base = drawn_boots({1: (1000.0, 1000.0), 2: (1000.0, 1000.0)}, rounds=4, boot_sd=0.02, run_sd=0.01, seed=9)
    fitted = fit(base, floor=0.0)
    scale = fitted.law(1).scale  # type: ignore[union-attr]
    under, over = fit(base, floor=scale * 1.001), fit(base, floor=scale * 0.999)
    p_under, p_over = under.p_within(1, 1000.0), over.p_within(1, 1000.0)
    assert under.law(1).df == over.law(1).df and abs(p_under - p_over) < 0.002  # type: ignore[union-attr,operator]


def test_a_noisy_configuration_does_not_borrow_a_stable_ones_odds():
    # the same speed, one configuration's boots 1% apart, the other's 9%: Bartlett's test tells them apart
    fitted = fit(
        [
            *drawn_boots({1: (1000.0, 1000.0)}, rounds=5, boot_sd=0.01, run_sd=0.005, seed=2),
            *drawn_boots({2: (1000.0, 1000.0)}, rounds=5, boot_sd=0.09, run_sd=0.005, seed=3),
        ],
        floor=0.01,
    )
    stable, noisy = (claim_for(fitted, n, gate=2.42, target=0.9) for n in (1, 2))
    assert not fitted.shared and stable.own_noise and noisy.own_noise
    assert stable.spread.sigma_boot < 0.03 < noisy.spread.sigma_boot
    assert stable.meets and not noisy.meets and best_claim([stable, noisy]) is stable


def test_ppl_over_the_gate_is_never_recommended_and_its_odds_are_zero():
    fitted = fit(drawn_boots({1: (1000.0, 1000.0)}, rounds=3, ppl=2.5, boot_sd=0.001), floor=0.01)
    claim = claim_for(fitted, 1, gate=2.42, target=0.9)
    assert claim.ppl_over_gate and claim.p_ppl == 0.0 and claim.p_verified == 0.0 and best_claim([claim]) is None


def test_the_recommended_point_is_the_highest_claim_that_meets_the_target():
    spread = fit(drawn_boots({1: (1000.0, 1000.0)}, rounds=3), floor=0.02).spreads[1]

    def c(n: int, claim: float, p: float) -> Claim:
        return Claim(
            trial_number=n,
            boots=3,
            claim=claim,
            public=claim,
            heldout=claim,
            rerun_low=claim,
            rerun_high=claim,
            p_verified=p,
            p_tps=p,
            p_ppl=1.0,
            p_later=None,
            df=4.0,
            offset=None,
            spread=spread,
            own_noise=False,
            unmeasured=None,
            meets=p >= 0.9,
            target=0.9,
            ppl=2.3,
            ppl_tol=0.0,
            gate=2.42,
            ppl_over_gate=False,
        )

    assert best_claim([c(1, 1200.0, 0.6), c(2, 1100.0, 0.93), c(3, 1000.0, 0.99)]).trial_number == 2


def test_predicted_odds_match_simulated_private_re_runs():
    # the model's own world: 3 configurations x 3 boots per promotion, then one private re-run each
    rng = random.Random(7)
    levels = {1: (1800.0, 1700.0), 2: (1600.0, 1600.0), 3: (1400.0, 1380.0)}
    predicted, hits = [], []
    for rep in range(150):
        fitted = fit(drawn_boots(levels, rounds=3, boot_sd=0.04, run_sd=0.02, gamma=0.03, seed=rep), floor=0.02)
        for n, (_, held) in levels.items():
            claim = claim_for(fitted, n, gate=2.42, target=0.9)
            rerun = held * math.exp(rng.gauss(0, 0.04) + rng.gauss(0, 0.02))
            predicted.append(claim.p_verified)
            hits.append(abs(rerun / claim.claim - 1) <= 0.05)
    mean_predicted, observed = sum(predicted) / len(predicted), sum(hits) / len(hits)
    assert abs(mean_predicted - observed) < 0.08, (mean_predicted, observed)


def test_a_later_run_at_the_promotions_profile_and_prompts_counts_whatever_references_it_scores():
    levels = {1: (1000.0, 980.0), 2: (900.0, 900.0)}
    promotion = drawn_boots(levels, rounds=3, run_id="p1")
    plan = PromotionPlan(
        run_id="p1",
        noise_floor=0.02,
        gate=Gate(ppl_max=2.42),
        target=0.9,
        profile=get_profile("quick"),
        trials=(1, 2),
        boots=3,
    )
    later = [replace(b, refs="held-out refs") for b in drawn_boots(levels, rounds=2, run_id="v1", shift=math.log(1.1))]
    assert claims_of(plan, promotion).between is None
    counted = claims_of(plan, promotion, later).between
    assert counted is not None and counted.runs == 2
    assert counted.measured_sd == pytest.approx(math.log(1.1) / math.sqrt(2))
    # other prompts read at another level: not a run of the same measure
    assert claims_of(plan, promotion, [replace(b, prompts="other") for b in later]).between is None


def test_a_later_run_that_finds_the_whole_machine_faster_is_a_spread_between_runs():
    levels = {1: (1000.0, 980.0), 2: (900.0, 900.0), 3: (800.0, 790.0)}
    promotion = drawn_boots(levels, rounds=3, run_id="p1")
    later = drawn_boots(levels, rounds=2, run_id="v1", shift=math.log(1.10))
    assert between_runs(promotion, floor=0.02, promotion_run="p1") is None  # one run: nothing measured between runs
    spread = between_runs([*promotion, *later], floor=0.02, promotion_run="p1")
    # no noise within a run: two runs 10% apart scatter by log(1.1) / sqrt(2) around their mean
    assert spread is not None and (spread.configurations, spread.runs, spread.measured_df) == (3, 2, 1)
    assert spread.measured_sd == pytest.approx(math.log(1.10) / math.sqrt(2), rel=1e-6)
    # one degree of freedom says little: the spread used leans on the stated prior as much as the data allow
    prior, weight = BETWEEN_PRIOR
    assert spread.sd**2 == pytest.approx((weight * prior**2 + spread.measured_sd**2) / (weight + 1))
    # the same within-run noise, a re-run in another run of boots: less likely to land within 5% of the claim
    noisy = drawn_boots(levels, rounds=3, boot_sd=0.02, run_sd=0.01, seed=3)
    again = between_runs(
        [*noisy, *drawn_boots(levels, rounds=2, run_id="v1", shift=math.log(1.10))], floor=0.02, promotion_run="p1"
    )
    claim = claim_for(fit(noisy, floor=0.02), 1, gate=2.42, target=0.9, between=again)
    assert claim.p_later is not None and claim.p_later < claim.p_verified
    assert claim_for(fit(noisy, floor=0.02), 1, gate=2.42, target=0.9).p_later is None


def test_two_runs_that_agreed_by_chance_do_not_make_a_later_run_as_likely_as_the_promotions_own():
    # the between-run spread clipped to 0 on one degree of freedom used to make "P, a later run" the within-run P
    levels = {1: (1000.0, 1000.0), 2: (900.0, 900.0)}
    promotion = drawn_boots(levels, rounds=3, boot_sd=0.01, run_sd=0.005, seed=5)
    later = [replace(b, run_id="v1") for b in promotion]  # a run that read exactly as the promotion did
    spread = between_runs([*promotion, *later], floor=0.01, promotion_run="p1")
    assert spread is not None and spread.measured_sd == 0.0 and spread.sd > 0.02
    claim = claim_for(fit(promotion, floor=0.01), 1, gate=2.42, target=0.9, between=spread)
    assert claim.p_later < claim.p_verified - 0.05  # type: ignore[operator]


def test_the_spread_between_runs_says_whether_its_runs_were_made_on_more_than_one_machine():
    levels = {1: (1000.0, 980.0), 2: (900.0, 900.0)}

    def on(machine: str | None, run_id: str) -> list[BootRecord]:
        return [replace(b, provenance={"machine": machine}) for b in drawn_boots(levels, rounds=2, run_id=run_id)]

    one = between_runs([*on("lease-a", "p1"), *on("lease-a", "v1")], floor=0.02, promotion_run="p1")
    two = between_runs([*on("lease-a", "p1"), *on("lease-b", "v1")], floor=0.02, promotion_run="p1")
    unknown = between_runs(
        [*on("lease-a", "p1"), *drawn_boots(levels, rounds=2, run_id="v1")], floor=0.02, promotion_run="p1"
    )
    assert one is not None and two is not None and unknown is not None
    assert (one.machines, two.machines, unknown.machines) == (1, 2, None)
    # a spread measured on one machine says so: another machine's shift is not in it
    assert "all on one machine" in one.describe() and "another lease" in one.describe()
    assert "on 2 machines" in two.describe() and "not recorded" in unknown.describe()


def test_odds_for_a_later_run_match_simulated_re_runs_in_runs_of_their_own():
    # the model's world with a run-to-run shift of 5%: a promotion, a verification run, then a re-run in a third run
    rng = random.Random(11)
    levels = {1: (1800.0, 1700.0), 2: (1600.0, 1600.0), 3: (1400.0, 1380.0)}
    predicted, within, hits = [], [], []
    for rep in range(150):
        promotion = drawn_boots(levels, rounds=3, boot_sd=0.03, run_sd=0.02, seed=rep, shift=rng.gauss(0, 0.05))
        verification = drawn_boots(
            levels, rounds=3, boot_sd=0.03, run_sd=0.02, seed=1000 + rep, run_id="v1", shift=rng.gauss(0, 0.05)
        )
        fitted = fit(promotion, floor=0.02)
        spread = between_runs([*promotion, *verification], floor=0.02, promotion_run="p1")
        shift = rng.gauss(0, 0.05)
        for n, (_, held) in levels.items():
            claim = claim_for(fitted, n, gate=2.42, target=0.9, between=spread)
            rerun = held * math.exp(shift + rng.gauss(0, 0.03) + rng.gauss(0, 0.02))
            predicted.append(claim.p_later)
            within.append(claim.p_verified)
            hits.append(abs(rerun / claim.claim - 1) <= 0.05)
    mean_predicted, observed = sum(predicted) / len(predicted), sum(hits) / len(hits)
    assert abs(mean_predicted - observed) < 0.08, (mean_predicted, observed)
    # the within-run odds overstate a later run's, as the CPU calibrations found
    assert sum(within) / len(within) - observed > 0.1, (sum(within) / len(within), observed)


def test_study_noise_pools_repeated_configurations_and_promoted_boots_with_a_floor():
    records = [
        measured_record(0, 100.0, 2.3, knobs={"k": 1}),
        measured_record(1, 110.0, 2.3, knobs={"k": 1}),
        measured_record(2, 90.0, 2.3, knobs={"k": 2}),
    ]
    noise = study_noise(records, [], floor=0.01)
    assert (
        noise.tps_sd == pytest.approx(abs(math.log(110 / 100)) / math.sqrt(2)) and "1 configuration(s)" in noise.basis
    )
    alone = study_noise(records[2:], [], floor=0.03)
    assert alone.tps_sd == 0.03 and alone.ppl_sd == 0.0 and "noise floor 3%" in alone.basis
    promoted = drawn_boots({5: (1000.0, 1000.0)}, rounds=3, boot_sd=0.05, seed=2)
    both = study_noise(records, promoted, floor=0.0)
    assert "1 promoted candidate" in both.basis and both.tps_sd > 0


def test_a_measured_client_offset_moves_the_re_run_and_the_odds_never_the_claim():
    fitted = fit(
        drawn_boots({1: (1000.0, 1000.0), 2: (900.0, 900.0)}, rounds=4, boot_sd=0.01, run_sd=0.005, seed=8), floor=0.01
    )
    plain = claim_for(fitted, 1, gate=2.42, target=0.9)
    # the organisers' client reads 4% under ours on this stack: their re-run of the same boot lands 4% lower
    slower = ClientOffset(log_mean=math.log(0.96), sd=0.01, rounds=8, basis="test")
    carried = claim_for(fitted, 1, gate=2.42, target=0.9, offset=slower)
    assert carried.rerun_low == pytest.approx(plain.rerun_low * 0.96, rel=0.01) and carried.offset is slower
    assert carried.claim <= plain.claim and carried.claim < 0.99 * plain.public  # lowered to keep its odds
    # reading faster raises the odds of a claim at the measured level, never the claim above it
    faster = claim_for(
        fitted, 1, gate=2.42, target=0.9, offset=ClientOffset(log_mean=0.02, sd=0.01, rounds=8, basis="t")
    )
    assert faster.claim <= faster.public == plain.public


def test_the_promotion_ranks_by_the_claims_own_law_of_a_re_run():
    # one boot's runs: a faster configuration whose runs scatter is worth less than a steady one it barely beats
    steady = screening_claim(100.0, [100.0, 100.4, 99.7], floor=0.01, target=0.9)
    noisy = screening_claim(103.0, [103.0, 92.0, 112.0], floor=0.01, target=0.9)
    assert noisy < steady < 100.0
    # it is the TPS one re-run reaches with the target's probability, by the estimator's law (Student t, 2 df)
    logs = [math.log(r) for r in (103.0, 92.0, 112.0)]
    law = Law(scale=statistics.stdev(logs) * math.sqrt(1 + 1 / 3), df=2)
    assert law.cdf(math.log(noisy / 103.0)) == pytest.approx(0.1, abs=1e-9)
    # one run measures no spread: the floor alone stands in for it, as a normal
    assert screening_claim(100.0, [100.0], floor=0.02, target=0.9) == pytest.approx(100.0 * math.exp(-1.2815516 * 0.02))
