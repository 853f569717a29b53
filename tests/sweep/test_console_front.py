"""The console's front: a promoted point shows its claim and P(VERIFIED) beside the search's one boot."""

from __future__ import annotations

import io

from rich.console import Console

from benchmarks._draw import drawn_boots
from sweep.claims import claim_for, fit
from sweep.search import SweepConsole
from tests.sweep.kit import measured_record


def test_a_promoted_point_shows_the_claim_a_re_run_reproduces():
    records = [
        measured_record(n, tps, ppl, gate=2.42, feasible=True) for n, tps, ppl in ((1, 130.0, 2.3), (2, 90.0, 2.2))
    ]
    fitted = fit(drawn_boots({1: (110.0, 110.0)}, rounds=4, boot_sd=0.01, run_sd=0.005, seed=2), floor=0.02)
    claim = claim_for(fitted, 1, gate=2.42, target=0.9)
    buffer = io.StringIO()
    SweepConsole(Console(file=buffer, width=200)).front(
        records, knobs=[], title="front", claims={1: f"{claim.claim:.2f} ({claim.odds_text()})"}
    )
    lines = {line.split()[1]: line for line in buffer.getvalue().splitlines() if line.split()[1:2] in (["1"], ["2"])}
    # the search read 130 in one boot; four boots say 110 is what to claim, and how likely it verifies
    assert f"{claim.claim:.2f} ({claim.odds_text()})" in lines["1"] and "130.00" in lines["1"]
    assert "claim (P(VERIFIED))" in buffer.getvalue() and " - " in lines["2"]  # not promoted: no claim
