"""A serving study's claims of goodput in the exports: the markdown of the note and ``best/README.md``
(``claims_lines``) and ``trials.csv``'s ``goodput_claim*`` columns, from claims built over boots whose every request
takes a known service (``tests.sweep.test_serving_claims``'s: 1 in flight holds the SLO, 2 miss it), steady or far
apart from boot to boot, as the console shows them."""

from __future__ import annotations

import math

import pytest

from benchmarks._draw import drawn_boots
from dashboards.claims import claims_lines
from dashboards.data import study_data
from dashboards.table import trials_frame
from engine.config import get_profile
from sweep.claims import ConfirmationPlan, PromotionPlan, StudyClaims, claims_of, odds_text, serving_outcome
from sweep.judgement import Gate, Slo
from tests.dashboards.test_data import row
from tests.sweep.test_serving_claims import CONFIRM, MARGIN, NOISY, TARGET, _served, _service_s


def _view(boot_sd: float) -> StudyClaims:
    """Two configurations promoted (2 boots each) and the choice confirmed against its control (CONFIRM each)."""
    plan = PromotionPlan(
        run_id="p1",
        trials=(1, 2),
        boots=2,
        profile=get_profile("quick"),
        target=TARGET,
        noise_floor=0.02,
        gate=Gate(ppl_max=3.0),
        confirm_boots=CONFIRM,
        slo=Slo(e2e_ms=1000 * _service_s() * math.exp(MARGIN)),
    )
    promotion = _served(boot_sd, run_id="p1", seed=1, rounds=2)
    choice = claims_of(plan, promotion).choice
    assert choice is not None
    confirmation = ConfirmationPlan(run_id="c1", promotion_run="p1", chosen=choice[0], control=choice[1], boots=CONFIRM)
    view = claims_of(
        plan, promotion, confirmation=confirmation, confirming=_served(boot_sd, run_id="c1", seed=2, rounds=CONFIRM)
    )
    assert view.unfinished() is None and view.confirmation is not None
    return view


def _cells(lines: list[str], first: str) -> list[list[str]]:
    """The markdown table rows whose first cell is ``first``, as their cells."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| ")]
    return [cells for cells in rows if cells[0] == first]


@pytest.mark.parametrize(("boot_sd", "recommended"), [(0.01, True), (NOISY, False)])
def test_the_markdown_shows_the_goodput_claims_and_the_outcome_the_console_prints(boot_sd, recommended):
    view = _view(boot_sd)
    assert view.confirmation is not None
    plan = view.confirmation.plan
    chosen = view.confirmation.serving[plan.chosen]
    assert (view.serving_recommended is chosen) is recommended
    lines = claims_lines(view)
    text = "\n".join(lines)
    assert view.plan.slo is not None and "### Screening: promotion p1" in text and f"SLO {view.plan.slo.text()}" in text
    assert "### Confirmation: run c1" in text and "claim of goodput to act on" in text
    # the confirmation's table: the chosen point and its control, each at its level with its goodput and odds
    head = next(line for line in lines if line.startswith("| trial | role | level |"))
    assert "| P(meets SLO) (organisers' re-run) | P ceiling | PPL |" in text and "| SLO ratio (90%) |" in head
    confirmed = _cells(lines, str(plan.chosen))[-1]
    assert confirmed[1:4] == ["chosen", f"{chosen.workload} ({chosen.concurrency} in flight)", str(CONFIRM)]
    assert confirmed[4:6] == [f"{chosen.goodput:.3f}", chosen.interval_text()]
    assert confirmed[7:10] == [chosen.ratio_text(), odds_text(chosen.p_verified), chosen.ceiling_text()]
    assert (confirmed[-1] == "**recommended**") is recommended
    control = _cells(lines, str(plan.control))[-1]
    assert control[1] == "control" and control[-1] == ""
    # the screening's rows are its own claims (within its run), one a configuration
    assert "| P(meets SLO) (screening, within its run) |" in text
    assert [len(_cells(lines, str(n))) for n in (1, 2)] == [2, 2]
    # the highest load each holds and the claim, in the console's own words
    held, outcome = serving_outcome(view)
    assert len(held) == 2 and all(f"- {line}" in lines for line in held)
    assert lines[-1] == f"**{outcome}**" and outcome.endswith(": recommended") is recommended
    assert chosen.machine is not None and chosen.machine.describe() in text


def test_trials_csv_carries_each_promoted_trials_goodput_claim_and_the_highest_load_it_holds():
    view = _view(0.01)
    assert view.confirmation is not None and view.serving_recommended is not None
    trials = [row(0, 95.0, 2.30, is_baseline=True), row(1, 120.0, 2.35), row(2, 110.0, 2.36)]
    frame = trials_frame(study_data(study_name="s", trials=trials, gate=3.0, claims=view)).set_index("number")
    best = view.best_serving()
    for n in (1, 2):
        c = best[n]
        assert frame.loc[n, "goodput_claim"] == pytest.approx(c.goodput)
        assert frame.loc[n, "goodput_claim_p"] == pytest.approx(c.p_verified)
        assert frame.loc[n, "goodput_claim_low"] < c.goodput < frame.loc[n, "goodput_claim_high"]
        assert frame.loc[n, "goodput_claim_level"] == c.workload and frame.loc[n, "goodput_claim_boots"] == CONFIRM
        assert frame.loc[n, "goodput_claim_odds_of"] == "organisers' re-run"  # both confirmed
        assert c.ceiling is not None and frame.loc[n, "goodput_claim_p_ceiling"] == pytest.approx(c.ceiling.p)
        # every request at 1 in flight meets the bound, at 2 the second waits a service: 1 is the highest load held
        assert frame.loc[n, "goodput_held_load"] == 1 and frame.loc[n, "goodput_held_levels"] == "c1 held; c2 missed"
    chosen = view.serving_recommended.trial_number
    assert frame["goodput_claim_recommended"].dropna().to_dict() == {1: chosen == 1, 2: chosen == 2}
    # the baseline was not promoted: no claim of goodput
    assert frame.loc[0, ["goodput_claim", "goodput_claim_recommended", "goodput_held_load"]].isna().all()


def test_a_study_of_tps_has_no_goodput_claims():
    plan = PromotionPlan(
        run_id="p1",
        trials=(1, 2),
        boots=3,
        profile=get_profile("quick"),
        target=0.9,
        noise_floor=0.02,
        gate=Gate(ppl_max=2.42),
    )
    view = claims_of(plan, drawn_boots({1: (120.0, 118.0), 2: (110.0, 110.0)}, rounds=3, boot_sd=0.01))
    text = "\n".join(claims_lines(view))
    assert "| P(VERIFIED) |" in text and "SLO" not in text and "goodput" not in text
    frame = trials_frame(study_data(study_name="s", trials=[row(1, 120.0, 2.35)], gate=2.4, claims=view))
    assert frame["claim_tps"].notna().all() and frame.filter(like="goodput_").isna().all().all()
