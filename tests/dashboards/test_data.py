"""The plot data and the CSV, from plain rows: which trials are where, and what they say."""

from __future__ import annotations

import pytest

from dashboards.data import NoCompletedTrialsError, TrialRow, require_measured, study_data
from dashboards.figures import PPL_TITLE, TPS_TITLE, history_figure, hover_text, knob_figure, pareto_figure
from dashboards.table import trials_frame
from sweep.claims import judge
from sweep.store import BootRecord
from tests.sweep.kit import measured_record

GATE = 2.40


def row(number: int, tps: float | None, ppl: float | None, **kw) -> TrialRow:
    """A trial and its record as the driver judged it (``feasible``: under the gate, unless given)."""
    state = kw.pop("state", "COMPLETE" if tps is not None else "FAIL")
    knobs = kw.pop("knobs", {"centroid_top_k": 8 * (number + 1), "num_speculative_tokens": 3})
    if state == "RUNNING":
        return TrialRow(number=number, state=state, knobs=knobs)
    kw.setdefault("feasible", tps is not None and ppl <= GATE)
    kw.setdefault("fail_kind", None if tps is not None else "engine")
    kw["reason"] = kw.pop("fail_reason", None)
    record = measured_record(number, tps, ppl, knobs=knobs, gate=GATE if tps is not None else None, **kw)
    return TrialRow(number=number, state=state, knobs=knobs, record=record)


def verdict(number: int, claimed: float, rerun: float):
    """Six boots that read ``rerun`` within 0.2%: enough degrees of freedom for a verdict either way on TPS."""
    return judge(
        [
            BootRecord(
                study_name="s",
                trial_number=number,
                run_id="r",
                repeat=repeat,
                status="complete",
                claimed_tps=claimed,
                claimed_ppl=2.3,
                gate=GATE,
                tps=rerun * (1.002 if repeat % 2 else 0.998),
                ppl=2.3,
                prompts="p",
                refs="r",
                profile="quick",
            )
            for repeat in range(6)
        ]
    )


@pytest.fixture
def data():
    trials = [
        row(0, 95.0, 2.30, is_baseline=True, acceptance_rate=0.6, identity_diff_prompts=None),
        row(1, 120.0, 2.35, acceptance_rate=0.5, identity_diff_prompts=0),  # front
        row(2, 110.0, 2.36, identity_diff_prompts=0),  # dominated by 1
        row(3, 140.0, 2.39, identity_diff_prompts=2),  # front, greedy output differs
        row(4, 200.0, 2.50),  # fastest but over the gate: never on the front
        row(5, None, None, fail_reason="engine exited with status 1 during boot <oom>"),
        row(6, 100.0, 2.28),  # front: best PPL (dominates the baseline)
        row(7, None, None, state="RUNNING"),
    ]
    return study_data(
        study_name="ctk", trials=trials, gate=GATE, verdicts={1: verdict(1, 120.0, 119.0), 3: verdict(3, 140.0, 100.0)}
    )


def test_front_is_feasible_non_dominated_sorted_by_ppl(data):
    assert [t.number for t in data.front] == [6, 1, 3]
    assert {t.number for t in data.measured} == {0, 1, 2, 3, 4, 6}
    assert [t.number for t in data.failed] == [5]
    assert data.baseline.number == 0
    by_number = {t.number: t for t in data.trials}
    assert by_number[4].feasible is False and not by_number[4].on_front  # judged from the gate
    assert by_number[2].feasible is True and not by_number[2].on_front


def test_feasibility_is_the_drivers_judgement_never_re_derived_from_the_gate():
    # identity_required makes a trial under the gate infeasible: the record's flag decides
    data = study_data(study_name="s", gate=GATE, trials=[row(0, 100.0, 2.3), row(1, 150.0, 2.3, feasible=False)])
    assert [t.number for t in data.front] == [0]
    no_gate = study_data(study_name="s", gate=None, trials=[row(0, 100.0, 2.3, feasible=False)])
    assert no_gate.front == []  # a study without a gate yet has no feasible trial: the ledger's rule


def test_only_knobs_that_vary_are_swept_knobs_and_come_first(data):
    assert data.knob_names == ("centroid_top_k",)
    fixed_first = study_data(
        study_name="s",
        gate=GATE,
        trials=[
            row(0, 1.0, 2.0, knobs={"num_speculative_tokens": 3, "centroid_top_k": 8}),
            row(1, 1.0, 2.0, knobs={"num_speculative_tokens": 3, "centroid_top_k": 16}),
        ],
    )
    assert list(fixed_first.trials[0].knobs) == ["centroid_top_k", "num_speculative_tokens"]


def test_verdicts_are_attached_to_their_trials(data):
    by_number = {t.number: t for t in data.trials}
    assert by_number[1].verdict.verdict == "VERIFIED"
    assert by_number[3].verdict.verdict == "INVALID"
    assert by_number[0].verdict is None


def test_a_study_without_measured_trials_is_refused():
    empty = study_data(study_name="e", gate=None, trials=[row(0, None, None, fail_reason="boot")])
    with pytest.raises(NoCompletedTrialsError, match="'e' has no completed trials"):
        require_measured(empty)


def _traces(fig):
    return {trace.name.split(" (")[0]: trace for trace in fig.data}


def test_pareto_figure_places_each_trial_once_and_lists_failures_beside_it(data):
    fig = pareto_figure(data)
    traces = _traces(fig)
    base = [traces[name] for name in ("feasible", "over the gate", "front")]
    plotted = sorted((x, y) for trace in base for x, y in zip(trace.x, trace.y))
    assert plotted == sorted((t.ppl, t.tps) for t in data.measured)
    assert list(traces["front"].x) == [2.28, 2.35, 2.39] and traces["front"].line.shape == "hv"
    assert list(traces["over the gate"].y) == [200.0]
    assert (traces["baseline"].x[0], traces["baseline"].y[0]) == (2.30, 95.0)
    assert list(traces["greedy output differs"].x) == [2.39]
    assert list(traces["VERIFIED"].y) == [120.0] and list(traces["INVALID"].y) == [140.0]
    # the failed trial is not a point at zero: it is listed in the side annotation, escaped
    assert all(y > 0 for trace in fig.data for y in trace.y)
    side = [a.text for a in fig.layout.annotations if a.text.startswith("<b>Failed trials")]
    assert len(side) == 1 and "#5 centroid_top_k=48" in side[0] and "&lt;oom&gt;" in side[0]
    # the gate: a vertical line at the gate and the infeasible side shaded
    shapes = fig.layout.shapes
    assert any(s.type == "line" and s.x0 == s.x1 == GATE for s in shapes)
    assert any(s.type == "rect" and s.x0 == GATE and s.x1 > 2.50 for s in shapes)
    assert fig.layout.xaxis.title.text == PPL_TITLE and "unitless" in PPL_TITLE
    assert fig.layout.yaxis.title.text == TPS_TITLE and "tokens/s" in TPS_TITLE


def test_themes_switch_the_template(data):
    assert pareto_figure(data, theme="dark").layout.template.layout.paper_bgcolor != (
        pareto_figure(data, theme="light").layout.template.layout.paper_bgcolor
    )


def test_hover_names_trial_knobs_metrics_identity_and_verdict(data):
    text = hover_text({t.number: t for t in data.trials}[3])
    for part in (
        "trial 3",
        "centroid_top_k = 32",
        "num_speculative_tokens = 3",
        "TPS = 140.00 tokens/s",
        "PPL = 2.3900",
        "acceptance = n/a",
        "identity diffs = 2 prompt(s)",
        "INVALID",
        "TPS gap -28.6%",
    ):
        assert part in text


def test_knob_view_has_tps_acceptance_and_ppl_against_the_knob(data):
    fig = knob_figure(data, "centroid_top_k")
    assert [trace.name for trace in fig.data] == ["TPS (tokens/s)", "acceptance rate", "PPL"]
    assert list(fig.data[0].x) == sorted(t.knobs["centroid_top_k"] for t in data.measured)
    assert "CENTROID_TOP_K" in fig.layout.xaxis3.title.text


def test_history_marks_best_feasible_tps_so_far(data):
    fig = history_figure(data)
    best = next(trace for trace in fig.data if trace.name == "best feasible TPS so far")
    assert list(best.x) == [0, 1, 2, 3, 4, 6] and list(best.y) == [95.0, 120.0, 120.0, 140.0, 140.0, 140.0]


def test_trials_csv_has_one_row_per_trial_with_knobs_metrics_and_verification(data):
    frame = trials_frame(data)
    assert list(frame["number"]) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert list(frame["knob.centroid_top_k"]) == [8, 16, 24, 32, 40, 48, 56, 64]
    assert frame.loc[3, "identity_diff_prompts"] == 2 and str(frame["identity_diff_prompts"].dtype) == "Int64"
    assert frame.loc[1, "verify_verdict"] == "VERIFIED"
    assert frame.loc[3, "verify_verdict"] == "INVALID" and "TPS gap" in frame.loc[3, "verify_reason"]
    assert frame.loc[5, "fail_reason"].startswith("engine exited") and frame.loc[5, "state"] == "FAIL"
    assert bool(frame.loc[6, "on_front"]) and not bool(frame.loc[4, "on_front"])


def test_the_public_surface_is_pinned():
    import dashboards

    assert dashboards.__all__ == [
        "StudyData",
        "TrialRow",
        "attach_all",
        "attach_to_study",
        "history_figure",
        "knob_figure",
        "load_study_data",
        "pareto_figure",
        "study_data",
        "trials_frame",
    ]


def test_a_failure_the_driver_re_runs_says_so_beside_the_chart():
    trials = [
        row(0, 100.0, 2.3),
        row(1, None, None, fail_reason="interrupted by the user", fail_kind="interrupted"),
        row(2, None, None, fail_reason="exited during boot", fail_kind="engine"),
    ]
    side = pareto_figure(study_data(study_name="s", gate=GATE, trials=trials)).layout.annotations[-1].text
    assert "#1 centroid_top_k=16 [interrupted]" in side and "#2 centroid_top_k=24<br>" in side


def test_a_trial_with_repeated_tps_runs_shows_its_spread_as_an_error_bar(data):
    trials = [*data.trials[:1], row(1, 120.0, 2.35, identity_diff_prompts=0, tps_cv=0.05), *data.trials[2:]]
    fig = pareto_figure(study_data(study_name="ctk", trials=trials, gate=GATE))
    traces = _traces(fig)
    # +- one standard deviation: TPS x CV for the repeated trial, none for the single-run ones
    assert list(traces["front"].error_y.array) == [0.0, pytest.approx(6.0), 0.0]
    assert traces["feasible"].error_y.array is None  # no repeated trial among them: no bars
    assert "TPS = 120.00 tokens/s (CV 5.0%)" in hover_text(trials[1])
    # a study without repeats draws no bars at all
    assert _traces(pareto_figure(data))["front"].error_y.array is None
