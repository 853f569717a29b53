"""The claims' statistics against known truth: thousands of synthetic promotions and verifications drawn from
the model's own world (levels, a boot's noise, a run's noise, a second run's warming), each judged by
``sweep.claims`` and compared with what fresh re-runs of the truth do.

"Fresh re-runs" are counted exactly: for a claim and the true level and noise, the probability that one
fresh boot's first held-out run lands in an interval is a normal probability, so the rates below are the
limits of re-running every promotion infinitely often, with no sampling noise of their own. The promotions
themselves are sampled (fixed seeds): every figure below carries the scatter of a finite set of them.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import defaultdict

import pytest
from scipy.stats import norm

from benchmarks._draw import drawn_boots
from sweep.claims import claim_for, fit, judge
from sweep.judgement import NOISE_FLOOR

BOOTS = (1, 2, 3, 4, 5)
CANDIDATES = (1, 2, 3)
BOOT_NOISE = (0.01, 0.03, 0.10)
RUN_NOISE = (0.01, 0.05)
GAMMA = 0.02  # a boot's second run reads 2% faster
PER_CELL = 160  # 90 cells: 14,400 promotions


def _levels(rng, candidates):
    # 5% apart; half of them read 3% slower on the held-out prompts than on the public ones
    return {n: (1000.0 * (1 - 0.05 * n), 1000.0 * (1 - 0.05 * n) * rng.choice([1.0, 0.97])) for n in range(candidates)}


def _chance(low: float, high: float, *, held: float, sd: float) -> float:
    """P(a fresh boot's first held-out run reads within [low, high]) for its true level and noise."""
    return float(norm.cdf(math.log(high / held) / sd) - norm.cdf(math.log(low / held) / sd))


@pytest.fixture(scope="module")
def promotions():
    """Every cell's claims: (cell, predicted P, 90% re-run interval's fresh coverage, fresh P(within 5%))."""
    rng = random.Random(20261205)
    rows = []
    for cell in itertools.product(BOOTS, CANDIDATES, BOOT_NOISE, RUN_NOISE):
        rounds, candidates, boot_sd, run_sd = cell
        sd = math.hypot(boot_sd, run_sd)
        for _ in range(PER_CELL):
            levels = _levels(rng, candidates)
            fitted = fit(
                drawn_boots(levels, rounds=rounds, boot_sd=boot_sd, run_sd=run_sd, gamma=GAMMA, gate=2.42, rng=rng),
                floor=NOISE_FLOOR,
            )
            for n, (_, held) in levels.items():
                c = claim_for(fitted, n, gate=2.42, target=0.9)
                if c.p_verified is None:
                    rows.append((cell, None, None, None))
                    continue
                assert c.rerun_low is not None and c.rerun_high is not None
                cover = _chance(c.rerun_low, c.rerun_high, held=held, sd=sd)
                hit = _chance(0.95 * c.claim, 1.05 * c.claim, held=held, sd=sd)
                rows.append((cell, c.p_verified, cover, hit))
    return rows


def test_thousands_of_promotions_are_simulated_in_every_cell(promotions):
    cells = {row[0] for row in promotions}
    assert len(cells) == len(BOOTS) * len(CANDIDATES) * len(BOOT_NOISE) * len(RUN_NOISE)
    assert len(cells) * PER_CELL >= 2000


def test_cells_with_no_degree_of_freedom_give_no_odds(promotions):
    for (rounds, candidates, _, _), p, _, _ in promotions:
        # one boot each: no spread of boots at all; one configuration twice: gamma takes its one difference
        starved = rounds == 1 or (rounds == 2 and candidates == 1)
        assert (p is None) == starved, (rounds, candidates, p)


def test_in_every_cell_the_re_run_interval_covers_at_least_87_percent(promotions):
    by_cell = defaultdict(list)
    for cell, p, cover, _ in promotions:
        if p is not None:
            by_cell[cell].append(cover)
    assert len(by_cell) == 66
    worst = min((statistics.fmean(c), cell) for cell, c in by_cell.items())
    assert worst[0] >= 0.87, worst


def test_the_odds_match_the_rate_fresh_re_runs_verify_at(promotions):
    deciles = defaultdict(list)
    for _, p, _, hit in promotions:
        if p is not None:
            deciles[min(int(p * 10), 9)].append((p, hit))
    for decile, pairs in sorted(deciles.items()):
        if len(pairs) < 30:
            continue  # too few claims to say what the decile does
        predicted, observed = statistics.fmean(p for p, _ in pairs), statistics.fmean(h for _, h in pairs)
        # Never more than 5 points above what re-runs do. From 0.3 up, within 5 points either way; below it
        # the odds run cautious by up to ~15 points (a decile of low odds gathers the promotions whose few
        # boots overstated a large noise: a predictive t on 1-4 degrees of freedom cannot tell them apart)
        assert predicted <= observed + 0.05, (decile, len(pairs), predicted, observed)
        if decile >= 3:
            assert predicted >= observed - 0.05, (decile, len(pairs), predicted, observed)


@pytest.mark.parametrize("repeats", [2, 3, 5])
def test_a_point_truly_6_percent_off_is_almost_never_verified_and_an_honest_one_often_is(repeats):
    rng = random.Random(repeats)
    for boot_sd, run_sd in itertools.product(BOOT_NOISE, RUN_NOISE):
        verified = {0.94: 0, 1.06: 0, 1.0: 0}
        trials = 150
        for _ in range(trials):
            levels = {1: (1000.0, 1000.0), 2: (900.0, 900.0)}
            promoted = drawn_boots(levels, rounds=3, boot_sd=boot_sd, run_sd=run_sd, gamma=GAMMA, gate=2.42, rng=rng)
            claim = claim_for(fit(promoted, floor=NOISE_FLOOR), 1, gate=2.42, target=0.9).claim
            for truth in verified:
                # the verification's boots: the point's true level is `truth` times the claim
                level = {1: (claim * truth, claim * truth)}
                boots = [
                    b.__class__(**{**b.__dict__, "claimed_tps": claim})
                    for b in drawn_boots(
                        level,
                        rounds=repeats,
                        boot_sd=boot_sd,
                        run_sd=run_sd,
                        gamma=GAMMA,
                        gate=2.42,
                        rng=rng,
                        run_id="v1",
                    )
                ]
                verified[truth] += judge(boots, beside=promoted, floor=NOISE_FLOOR).verdict == "VERIFIED"
        for off in (0.94, 1.06):
            assert verified[off] / trials <= 0.05, (repeats, boot_sd, run_sd, off, verified)
        if boot_sd <= 0.01 and run_sd <= 0.01 and repeats >= 3:
            # where the noise is small and the boots enough, an honest point is found VERIFIED
            assert verified[1.0] / trials >= 0.8, (repeats, boot_sd, run_sd, verified)
