"""The verdict rule: the 90% interval of the held-out level against the 5% band around the claim, and the
odds of one more re-run: inside with the odds VERIFIED, outside INVALID, anything between UNDECIDED, and no
TPS verdict at all from one boot or without a degree of freedom for the noise; a failed boot or a PPL over
the gate INVALID. What the verdicts are worth against known truth: tests/sweep/test_claims_simulation.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweep.claims import heldout_first, judge
from sweep.judgement import TPS_TOLERANCE
from sweep.store import BootRecord


def boot(
    heldout: float | None,
    public: float | None = None,
    ppl: float | None = 2.30,
    *,
    repeat: int = 0,
    claimed: float = 100.0,
    gate: float = 2.40,
    status: str = "complete",
    reason: str | None = None,
    run_id: str = "r1",
    trial: int = 3,
) -> BootRecord:
    first = None if public is None else ("heldout" if heldout_first(repeat) else "public")
    return BootRecord(
        study_name="s",
        trial_number=trial,
        run_id=run_id,
        repeat=repeat,
        order=repeat,
        status=status,
        claimed_tps=claimed,
        claimed_ppl=2.3,
        gate=gate,
        tps=heldout,
        public_tps=public,
        first=first,
        ppl=ppl,
        reason=reason,
        prompts="held.json",
        refs="held.jsonl",
        profile="quick",
    )


def promotion(spread: float = 0.01) -> list[BootRecord]:
    """A promotion of two configurations x 4 boots whose runs scatter by about ``spread``: noise to pool with."""
    wobble = (1.0, -1.0, 0.5, -0.5)
    return [
        boot(
            level * (1 + spread * wobble[r]),
            level * (1 + spread * wobble[(r + 1) % 4]),
            repeat=r,
            run_id="promotion",
            trial=trial,
            claimed=level,
        )
        for r in range(4)
        for trial, level in ((3, 100.0), (4, 90.0))
    ]


def test_a_point_whose_interval_lies_inside_the_band_is_verified_with_its_spread():
    v = judge(
        [boot(99.0, 101.0, repeat=0), boot(100.5, 100.0, repeat=1), boot(99.5, 101.5, repeat=2)],
        beside=promotion(),
    )
    assert v.verdict == "VERIFIED" and v.reasons == () and v.undecided is None
    assert (v.tps_min, v.tps_median, v.tps_max) == (99.0, 99.5, 100.5)
    assert -TPS_TOLERANCE * 100 < v.gap_low_pct < v.tps_gap_pct < v.gap_high_pct < TPS_TOLERANCE * 100
    assert v.p_rerun >= v.target == 0.9 and v.df >= 1
    assert v.public_gap_pct == pytest.approx(1.0)  # the public runs read 1% over the claim
    assert v.repeats == 3 and v.failed == 0


def test_an_inflated_claim_is_invalid_on_tps():
    v = judge(
        [boot(100.0, 101.0, claimed=150.0, repeat=0), boot(99.0, 100.0, claimed=150.0, repeat=1)],
        beside=promotion(),
    )
    assert v.verdict == "INVALID" and v.gap_high_pct < -TPS_TOLERANCE * 100
    assert v.reasons[0].startswith(f"TPS gap {v.tps_gap_pct:+.1f}% (90% interval") and len(v.reasons) == 1


def test_an_interval_across_the_5_percent_line_is_undecided():
    # the held-out runs centre 5.2% under the claim and move a few percent from boot to boot
    v = judge([boot(97.0, 100.0, repeat=0), boot(93.0, 96.0, repeat=1), boot(94.5, 98.0, repeat=2)], beside=promotion())
    assert v.verdict == "UNDECIDED", v
    assert v.gap_low_pct < -TPS_TOLERANCE * 100 < v.gap_high_pct and v.reasons == ()
    assert "straddles the 5% line" in v.undecided


def test_a_level_known_to_lie_inside_the_band_is_not_verified_when_one_re_run_would_miss_it_half_the_time():
    # 24 boots put the level 3.5% under the claim, precisely; one more re-run (4% of noise) lands within 5%
    # of the claim only about 6 times in 10: the organisers' single re-run is what counts
    noisy = [1.04, 0.96, 1.02, 0.98, 1.05, 0.95, 1.01, 0.99, 1.04, 0.96, 1.03, 0.97] * 2
    boots = [boot(96.5 * f, 96.5 * f, repeat=r) for r, f in enumerate(noisy)]
    v = judge(boots)
    assert -TPS_TOLERANCE * 100 < v.gap_low_pct and v.gap_high_pct < TPS_TOLERANCE * 100
    assert v.verdict == "UNDECIDED" and v.p_rerun < 0.9 and "one more re-run" in v.undecided


def test_no_degree_of_freedom_for_the_noise_is_no_tps_verdict():
    # two boots on their own: gamma (a second run's warming) takes the one difference left
    v = judge([boot(100.0, 101.0, repeat=0), boot(99.0, 100.0, repeat=1)])
    assert v.verdict == "UNDECIDED" and v.gap_low_pct is None and v.p_rerun is None
    assert "fewer than one degree of freedom" in v.undecided
    # the same boots beside a promotion's pooled noise are judged
    assert judge([boot(100.0, 101.0, repeat=0), boot(99.0, 100.0, repeat=1)], beside=promotion()).p_rerun is not None


def test_the_studys_floor_is_the_verdicts_floor():
    boots = [boot(99.0, 101.0, repeat=0), boot(100.5, 100.0, repeat=1), boot(99.5, 101.5, repeat=2)]
    assert judge(boots, beside=promotion(), floor=0.01).verdict == "VERIFIED"
    wide = judge(boots, beside=promotion(), floor=0.06)  # a study that says no re-run moves less than 6%
    assert wide.verdict == "UNDECIDED" and wide.p_rerun < 0.9


def test_ppl_over_the_gate_is_invalid():
    v = judge([boot(100.0, 100.0, ppl=2.45), boot(100.0, 100.0, ppl=2.45, repeat=1)])
    assert v.verdict == "INVALID" and v.reasons == ("PPL 2.4500 over the gate 2.4000",)


def test_a_failed_boot_is_invalid_with_its_reason():
    v = judge(
        [
            boot(100.0, 100.0),
            boot(None, None, None, repeat=1, status="failed", reason="exited with status 1 during boot"),
        ]
    )
    assert v.verdict == "INVALID" and v.failed == 1
    assert v.reasons == ("boot 2 failed: exited with status 1 during boot",)
    only_failures = judge([boot(None, None, None, status="failed", reason="never became ready")])
    assert only_failures.tps_median is None and "no boot produced a measurement" in only_failures.reason


def test_boots_of_two_runs_are_not_mixed():
    with pytest.raises(ValueError, match="one trial in one verification run"):
        judge([boot(100.0), boot(100.0, repeat=1, run_id="r2")])


def test_one_boot_is_never_a_tps_verdict():
    # the committed GPU database's one re-run: 1687.8 against 1838.3 claimed, -8.2%; one draw of a re-run
    # decides nothing, however narrow the noise it borrows says its interval is
    v = judge([boot(1687.8, claimed=1838.3)], floor=0.02)
    assert v.verdict == "UNDECIDED" and v.tps_gap_pct == pytest.approx(-8.19, abs=0.01)
    assert judge([boot(1687.8, 1700.0, claimed=1700.0)], beside=promotion(), floor=0.02).verdict == "UNDECIDED"
    # PPL over the gate, or a failed boot, still is INVALID from one boot
    assert judge([boot(1838.3, claimed=1838.3, ppl=2.45)]).verdict == "INVALID"
    # boots that far off, beside a promotion's noise, are INVALID
    far = [boot(1687.8, 1690.0, claimed=1838.3), boot(1690.0, 1692.0, claimed=1838.3, repeat=1)]
    assert judge(far, beside=promotion()).verdict == "INVALID"


_RANK = {"VERIFIED": 0, "UNDECIDED": 1, "INVALID": 2}


@given(
    heldout=st.lists(st.floats(90.0, 110.0), min_size=2, max_size=5),
    public=st.floats(90.0, 110.0),
    claims=st.lists(st.floats(1.0, 1.3), min_size=2, max_size=6),
)
def test_a_claim_further_from_the_boots_is_never_judged_better(heldout, public, claims):
    # metamorphic: the same boots held to claims ever further above their level; each verdict is at least as
    # bad as the last (VERIFIED, then UNDECIDED, then INVALID, never back)
    boots = [boot(h, public, repeat=i) for i, h in enumerate(heldout)]
    level = judge(boots, beside=promotion()).tps_gap_pct / 100 + 1
    verdicts = [
        judge([replace(b, claimed_tps=100.0 * level * f) for b in boots], beside=promotion()).verdict
        for f in sorted(claims)
    ]
    assert all(_RANK[a] <= _RANK[b] for a, b in zip(verdicts, verdicts[1:])), verdicts
