"""The verdict rule: the 90% interval of the held-out level against the 5% band around the claim:
inside VERIFIED, outside INVALID, straddling UNDECIDED; a failed boot or a PPL over the gate INVALID."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sweep.boots import BootRecord, heldout_first
from sweep.estimate import TPS_TOLERANCE
from sweep.verification import judge


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


def test_a_point_whose_interval_lies_inside_the_band_is_verified_with_its_spread():
    v = judge([boot(99.0, 101.0, repeat=0), boot(100.5, 100.0, repeat=1), boot(99.5, 101.5, repeat=2)])
    assert v.verdict == "VERIFIED" and v.reasons == ()
    assert (v.tps_min, v.tps_median, v.tps_max) == (99.0, 99.5, 100.5)
    assert -TPS_TOLERANCE * 100 < v.gap_low_pct < v.tps_gap_pct < v.gap_high_pct < TPS_TOLERANCE * 100
    assert v.public_gap_pct == pytest.approx(1.0)  # the public runs read 1% over the claim
    assert v.repeats == 3 and v.failed == 0


def test_an_inflated_claim_is_invalid_on_tps():
    v = judge([boot(100.0, 101.0, claimed=150.0, repeat=0), boot(99.0, 100.0, claimed=150.0, repeat=1)])
    assert v.verdict == "INVALID" and v.gap_high_pct < -TPS_TOLERANCE * 100
    assert v.reasons[0].startswith(f"TPS gap {v.tps_gap_pct:+.1f}% (90% interval") and len(v.reasons) == 1


def test_an_interval_across_the_5_percent_line_is_undecided():
    # the held-out runs centre 5.2% under the claim and move a few percent from boot to boot
    v = judge([boot(97.0, 100.0, repeat=0), boot(93.0, 96.0, repeat=1), boot(94.5, 98.0, repeat=2)])
    assert v.verdict == "UNDECIDED", v
    assert v.gap_low_pct < -TPS_TOLERANCE * 100 < v.gap_high_pct and v.reasons == ()


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
    # the committed GPU database's one re-run: 1687.8 against 1838.3 claimed, -8.2%; with the floor alone
    # its interval lies outside the band, yet one draw of a re-run decides nothing
    v = judge([boot(1687.8, claimed=1838.3)], floor=0.02)
    assert v.verdict == "UNDECIDED" and v.tps_gap_pct == pytest.approx(-8.19, abs=0.01) and v.gap_high_pct < -5.0
    assert judge([boot(1687.8, 1700.0, claimed=1700.0)], floor=0.02).verdict == "UNDECIDED"  # on the claim too
    # PPL over the gate, or a failed boot, still is INVALID from one boot
    assert judge([boot(1838.3, claimed=1838.3, ppl=2.45)]).verdict == "INVALID"
    # two boots that far off are INVALID
    assert judge([boot(1687.8, claimed=1838.3), boot(1690.0, claimed=1838.3, repeat=1)]).verdict == "INVALID"


@given(
    heldout=st.lists(st.floats(80.0, 120.0), min_size=2, max_size=5),
    public=st.floats(80.0, 120.0),
    ppl=st.floats(2.0, 2.8),
)
def test_the_verdict_follows_the_interval_and_the_gate(heldout, public, ppl):
    v = judge([boot(h, public, ppl, repeat=i) for i, h in enumerate(heldout)])
    band = TPS_TOLERANCE * 100
    if ppl > 2.40:
        assert v.verdict == "INVALID"
    elif v.gap_high_pct < -band or v.gap_low_pct > band:
        assert v.verdict == "INVALID"
    elif -band <= v.gap_low_pct and v.gap_high_pct <= band:
        assert v.verdict == "VERIFIED"
    else:
        assert v.verdict == "UNDECIDED"
    assert v.gap_low_pct <= v.tps_gap_pct <= v.gap_high_pct
