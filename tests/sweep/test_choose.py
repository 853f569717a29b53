"""Which point a submission writes (``sweep.submission.choose``): the one VERIFIED against the claim it writes,
never one whose verdict was measured against another claim (the claims moved since)."""

from __future__ import annotations

import pytest

from benchmarks._draw import drawn_boots
from sweep.claims import claim_for, fit, judge
from sweep.submission._choose import Choice, NothingToSubmit, choose
from tests.sweep.kit import measured_record


def _setup(verified_against: float | None):
    promotion = drawn_boots({1: (100.0, 100.0), 2: (90.0, 90.0)}, rounds=4, boot_sd=0.004, run_sd=0.002, seed=3)
    fitted = fit(promotion, floor=0.01)
    claims = {n: claim_for(fitted, n, gate=2.42, target=0.9) for n in (1, 2)}
    records = [measured_record(n, 100.0 - 10 * (n - 1), 2.3, gate=2.42, feasible=True) for n in (1, 2)]
    claim = claims[1].claim if verified_against is None else verified_against
    reruns = [
        b.__class__(**{**b.__dict__, "claimed_tps": claim, "gate": 2.42, "run_id": "v"})
        for b in drawn_boots({1: (claim, claim)}, rounds=4, boot_sd=0.004, run_sd=0.002, seed=4)
    ]
    return records, claims, {1: judge(reruns, beside=promotion, floor=0.01)}


def test_the_point_verified_against_its_claim_is_written_as_verified():
    records, claims, verdicts = _setup(None)
    chosen = choose(records, verdicts=verdicts, claims=claims)
    assert chosen.record.trial_number == 1 and chosen.verified and chosen.label == "VERIFIED"
    assert chosen.tps == pytest.approx(claims[1].claim)


def test_a_verdict_of_another_claim_verifies_nothing_the_folder_would_write():
    records, claims, verdicts = _setup(claims_moved := 97.0)
    assert verdicts[1].verdict == "VERIFIED" and verdicts[1].claimed_tps == claims_moved
    with pytest.raises(NothingToSubmit, match="VERIFIED against 97.00 tok/s, not this claim"):
        choose(records, verdicts=verdicts, claims=claims)
    assert not choose(records, verdicts=verdicts, claims=claims, allow_unverified=True).verified
    stale = Choice(record=records[0], claim=claims[1], verdict=verdicts[1])
    assert stale.label == "UNVERIFIED (VERIFIED against 97.00 tok/s, not this claim: verify it again)"
