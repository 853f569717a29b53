"""The verdict rule: VERIFIED iff every re-run measured, median TPS within 5%, median PPL under the gate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweep.verification import TPS_TOLERANCE, Rerun, judge


def rerun(tps: float | None, ppl: float | None = 2.30, *, repeat: int = 0, claimed: float = 100.0,
          gate: float = 2.40, status: str = "complete", reason: str | None = None, run_id: str = "r1") -> Rerun:  # fmt: skip
    return Rerun(study_name="s", trial_number=3, run_id=run_id, repeat=repeat, status=status,
                 claimed_tps=claimed, claimed_ppl=2.3, gate=gate, tps=tps, ppl=ppl, reason=reason,
                 prompts="held.json", refs="held.jsonl", profile="quick")  # fmt: skip


def test_an_honest_point_is_verified_with_its_spread():
    v = judge([rerun(98.0, repeat=0), rerun(101.0, repeat=1), rerun(103.0, repeat=2)])
    assert v.verdict == "VERIFIED" and v.reasons == ()
    assert (v.tps_min, v.tps_median, v.tps_max) == (98.0, 101.0, 103.0)
    assert v.tps_gap_pct == pytest.approx(1.0)
    assert v.tps_cv == pytest.approx(2.5166 / 100.667, abs=1e-4)  # sample stdev / mean
    assert v.repeats == 3 and v.failed == 0


def test_an_inflated_claim_is_invalid_on_tps():
    v = judge([rerun(100.0, claimed=150.0)])
    assert v.verdict == "INVALID"
    assert v.tps_gap_pct == pytest.approx(-33.33, abs=0.01)
    assert v.reasons == ("TPS gap -33.3%: re-run median 100.00 vs claimed 150.00 tokens/s (tolerance 5%)",)


def test_ppl_over_the_gate_is_invalid():
    v = judge([rerun(100.0, ppl=2.45)])
    assert v.verdict == "INVALID" and v.reasons == ("PPL 2.4500 over the gate 2.4000",)


def test_a_failed_boot_is_invalid_with_its_reason():
    v = judge([rerun(100.0), rerun(None, None, repeat=1, status="failed", reason="exited with status 1 during boot")])
    assert v.verdict == "INVALID" and v.failed == 1
    assert v.reasons == ("re-run 2 failed: exited with status 1 during boot",)
    only_failures = judge([rerun(None, None, status="failed", reason="never became ready")])
    assert only_failures.tps_median is None and "no re-run produced a measurement" in only_failures.reason


def test_reruns_of_two_runs_are_not_mixed():
    with pytest.raises(ValueError, match="one trial in one verification run"):
        judge([rerun(100.0), rerun(100.0, repeat=1, run_id="r2")])


@given(
    tps=st.lists(st.floats(50.0, 150.0), min_size=1, max_size=5),
    ppl=st.floats(2.0, 2.8),
)
def test_verdict_matches_the_rule(tps, ppl):
    v = judge([rerun(x, ppl, repeat=i) for i, x in enumerate(tps)])
    ordered = sorted(tps)
    half = len(ordered) // 2
    median = ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
    ok = abs((median - 100.0) / 100.0 * 100.0) <= TPS_TOLERANCE * 100.0 and ppl <= 2.40
    assert (v.verdict == "VERIFIED") == ok
