"""The ask/tell core against a real SQLite storage and Optuna; no Ray, no engine."""

import dataclasses
import io

import pytest
from optuna.trial import TrialState
from rich.console import Console

from dashboards import load_study_data, pareto_figure, trials_frame
from engine.measurement import Measurement, TrialOutcome
from errors import BaselineFailed, StudyMismatchError
from sweep.judgement import front_records
from sweep.search import SweepConsole, load_study
from sweep.search._core import CONVERGED_AFTER, MemoryRecords, StudyCore
from sweep.store import StudyRecords, open_storage
from tests.stacks import stub_profile
from tests.sweep.kit import write_manifest, write_study

ATTRS = {
    "tps",
    "ppl",
    "ppl_mean_record",
    "acceptance_rate",
    "feasible",
    "is_baseline",
    "node_id",
    "identity_diff_prompts",
    "measurement_id",
    "gate",
}


@pytest.fixture
def env(tmp_path):
    path = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        n_trials=4,
        space={"centroid_top_k": {"choices": [8, 16, 32]}, "sliding_window": {"choices": [64, 512]}},
    )
    spec = load_study(path)
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    yield spec, storage
    storage.close()


def named(trial):
    """The trial's constraints as the core set them. Optuna 5 also reads the list optuna-dashboard
    needs (the old format) as constraints "0", "1", ...: the same values again, checked here."""
    named = {k: v for k, v in trial.constraints.items() if not k.isdigit()}
    assert sorted(trial.system_attrs["constraints"]) == sorted(named.values())
    return named


def core_for(spec, storage):
    return StudyCore(spec, StudyRecords(storage, spec.name), storage=storage.optuna)


def outcome(knobs, *, ppl=2.30, ids=((1, 2), (3, 4)), status="complete"):
    m = Measurement(
        tps=10.0,
        ppl=ppl,
        ppl_mean_record=ppl,
        completion_tokens=4,
        tps_wall_s=0.4,
        ppl_target_tokens=8,
        num_prompts=2,
        num_ppl_records=2,
        acceptance_rate=0.5,
        output_token_ids=[list(i) for i in ids],
    )
    return TrialOutcome(
        status=status,
        knobs=dict(knobs),
        argv=["x"],
        env={},
        measurement=m if status == "complete" else None,
        reason=None if status == "complete" else "engine 'stub' exited with status 1 during boot",
        node={"node_id": "n1"},
    )


def ask(core, params, *, baseline=False):
    """The core's next trial, with these knob values queued for it."""
    core.study.enqueue_trial(params, user_attrs={"is_baseline": True} if baseline else None)
    return core.ask()


def measured(core, params, **kw):
    planned = ask(core, params, baseline=kw.pop("baseline", False))
    record = core.outcome_record(planned, outcome(planned.effective, **kw))
    core.close(record)
    return record


def test_a_measured_trial_is_stored_then_told_with_its_gate_as_a_constraint(env):
    spec, storage = env
    core = core_for(spec, storage)
    base = measured(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    over = measured(core, {"centroid_top_k": 32, "sliding_window": 64}, ppl=2.50)
    assert base.gate == pytest.approx(2.30 * 1.05) and base.feasible
    assert over.gate == pytest.approx(base.gate) and over.feasible is False
    t0, t1 = core.study.get_trials()
    assert t0.state == t1.state == TrialState.COMPLETE and t1.values == [10.0, 2.50]
    assert named(t0) == {"ppl_gate": pytest.approx(2.30 - base.gate)}
    assert named(t1)["ppl_gate"] > 0
    assert ATTRS - {"identity_diff_prompts"} <= set(t0.user_attrs)
    assert t1.user_attrs["measurement_id"] == storage.record(spec.name, 1).id
    assert [t.number for t in core.study.best_trials] == [0]


def test_the_stored_knobs_are_what_the_worker_launched(env):
    spec, storage = env
    core = core_for(spec, storage)
    planned = ask(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    launched = {**planned.effective, "num_speculative_tokens": 4}  # what a stack reports back wins
    record = core.outcome_record(planned, outcome(launched))
    core.close(record)
    assert storage.record(spec.name, 0).knobs == launched


def test_a_lossless_trial_with_other_tokens_is_flagged_and_infeasible_only_when_required(env):
    spec, storage = env
    core = core_for(spec, storage)
    measured(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    same = measured(core, {"centroid_top_k": 8, "sliding_window": 512})
    other = measured(core, {"centroid_top_k": 16, "sliding_window": 512}, ids=((1, 2), (3, 5)))
    lossy = measured(core, {"centroid_top_k": 16, "sliding_window": 64}, ids=((9, 9), (9, 9)))
    assert (same.identity_diff_prompts, other.identity_diff_prompts, lossy.identity_diff_prompts) == (0, 1, None)
    assert other.feasible  # flagged, not excluded: the study does not require identity
    third = core.study.trials[2]
    assert third.user_attrs["identity_diff_prompts"] == 1 and "greedy_identity" not in named(third)

    strict = core_for(dataclasses.replace(spec, name="strict", identity_required=True), storage)
    measured(strict, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    record = measured(strict, {"centroid_top_k": 16, "sliding_window": 512}, ids=((1, 2), (3, 5)))
    assert record.identity_diff_prompts == 1 and record.feasible is False


def test_a_stack_failure_is_a_failed_trial_and_its_knobs_are_not_booted_again(env):
    spec, storage = env
    core = core_for(spec, storage)
    record = measured(core, {"centroid_top_k": 8, "sliding_window": 64}, status="failed")
    assert record.fail_kind == "engine" and "exited with status 1" in record.reason and record.feasible is False
    first = core.study.trials[0]
    assert first.state == TrialState.FAIL and "exited" in first.user_attrs["fail_reason"]
    assert record.knobs == {"sliding_window": 64, "centroid_top_k": 8, "num_speculative_tokens": 3}  # every knob
    again = ask(core, {"centroid_top_k": 8, "sliding_window": 64})
    assert again.answer.fail_kind == "skipped" and again.answer.reason.startswith("not run again: trial 0")
    core.close(again.answer)
    assert core.budget_used() == 1  # the failure booted; its skipped copy did not
    assert ask(core, {"centroid_top_k": 16, "sliding_window": 64}).answer is None
    assert not core.trials(TrialState.WAITING)


def test_a_record_written_before_a_crash_is_told_at_the_next_start_and_never_doubled(env):
    spec, storage = env
    core = core_for(spec, storage)
    planned = ask(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    storage.insert_record(core.outcome_record(planned, outcome(planned.effective)))  # ... then the driver died
    assert core.study.trials[0].state == TrialState.RUNNING
    again = core_for(spec, storage)  # the next start
    assert [r.trial_number for r in again.reconcile()] == [0]
    assert again.study.trials[0].state == TrialState.COMPLETE and len(storage.records(spec.name)) == 1
    assert again.reconcile() == []


def test_a_trial_lost_with_the_driver_is_re_queued_once(env):
    spec, storage = env
    core = core_for(spec, storage)
    params = {"centroid_top_k": 16, "sliding_window": 64}
    ask(core, params)  # RUNNING, no record: the driver died mid-trial
    first = core_for(spec, storage).reconcile()[0]
    assert first.fail_kind == "lost" and "driver stopped" in first.reason
    assert [t.user_attrs["retry_of"] for t in core.trials(TrialState.WAITING)] == [0]
    assert core.budget_used() == 0  # replaced by its retry

    retry = core.ask()  # the retry runs, and is lost the same way
    assert retry.number == 1 and retry.knobs == {**spec.fixed, **params}
    second = core_for(spec, storage).reconcile()[0]
    assert second.fail_kind == "lost"
    assert not core.trials(TrialState.WAITING)  # not retried forever
    assert core.budget_used() == 1


def test_an_interrupted_trial_is_always_re_queued(env):
    spec, storage = env
    core = core_for(spec, storage)
    planned = ask(core, {"centroid_top_k": 16, "sliding_window": 64})
    assert core.close(core.failed(planned, kind="interrupted", reason="interrupted by the user (Ctrl-C)")) is True
    assert len(core.trials(TrialState.WAITING)) == 1


def test_a_stack_without_token_ids_is_compared_by_the_hashes_of_its_texts(env):
    spec, storage = env
    core = core_for(spec, storage)

    def hashed(params, hashes, *, baseline=False):
        planned = ask(core, params, baseline=baseline)
        result = outcome(planned.effective, ids=())
        result.measurement.output_text_sha256 = list(hashes)
        record = core.outcome_record(planned, result)
        core.close(record)
        return record

    hashed({"centroid_top_k": 32, "sliding_window": 512}, ["a", "b"], baseline=True)
    assert hashed({"centroid_top_k": 8, "sliding_window": 512}, ["a", "c"]).identity_diff_prompts == 1
    assert hashed({"centroid_top_k": 16, "sliding_window": 512}, ["a", "b"]).identity_diff_prompts == 0


def test_repeated_tps_runs_tell_the_median_and_keep_the_spread(env):
    spec, storage = env
    core = core_for(spec, storage)
    planned = ask(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    base = outcome(planned.effective)
    base.measurement = dataclasses.replace(base.measurement, tps=10.0, tps_runs=[12.0, 10.0, 9.0], tps_cv=0.147)
    core.close(core.outcome_record(planned, base))
    told = core.study.get_trials()[0]
    assert told.values[0] == 10.0 and told.user_attrs["tps_cv"] == 0.147
    stored = storage.record(spec.name, 0)
    assert stored.measurement.tps_runs == [12.0, 10.0, 9.0] and stored.measurement.output_token_ids == [[1, 2], [3, 4]]
    buffer = io.StringIO()
    SweepConsole(Console(file=buffer, width=200)).finished(stored, requeued=False)
    assert "TPS 10.00 (of 3 runs, CV 14.7%)" in buffer.getvalue()


def test_a_study_requiring_identity_gives_every_trial_the_same_constraints_so_gp_can_model_them(env):
    spec, storage = env
    strict = dataclasses.replace(spec, name="strict", identity_required=True, sampler="gp")
    core = core_for(strict, storage)
    measured(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    measured(core, {"centroid_top_k": 16, "sliding_window": 64}, ids=((9, 9), (9, 9)))  # lossy
    measured(core, {"centroid_top_k": 8, "sliding_window": 512}, ids=((1, 2), (3, 5)))  # differs
    assert [set(named(t)) for t in core.study.trials] == [{"ppl_gate", "greedy_identity"}] * 3
    assert [named(t)["greedy_identity"] for t in core.study.trials] == [0.0, 0.0, 1.0]
    assert core.ask().knobs  # GP's own proposal over the three: refused before, when counts differed


def test_the_baseline_is_queued_once_and_a_ratio_gate_stops_when_it_failed_for_good(env):
    spec, storage = env
    core = core_for(spec, storage)
    core.ensure_baseline()
    core.ensure_baseline()
    assert len(core.trials(TrialState.WAITING)) == 1
    planned = core.ask()
    assert planned.is_baseline and planned.knobs == {} and planned.effective == spec.baseline()
    core.close(core.outcome_record(planned, outcome(planned.effective, status="failed")))
    with pytest.raises(BaselineFailed, match=r"baseline trial 0 failed .*the gate ppl_max_ratio needs its PPL"):
        core.ensure_baseline()


def test_a_stored_study_measured_another_way_is_refused(env):
    spec, storage = env
    core_for(spec, storage)
    other = dataclasses.replace(spec, profile=dataclasses.replace(spec.profile, num_prompts=3))
    with pytest.raises(StudyMismatchError, match=r"study 'stubstudy' was measured with profile"):
        core_for(other, storage)


def test_the_budget_and_the_grid_bound_what_the_core_hands_out(env):
    spec, _ = env
    grid = dataclasses.replace(spec, sampler="grid", n_trials=100)
    core = StudyCore(grid, MemoryRecords())  # in memory: what the dry run and the replay use
    core.ensure_baseline()
    numbers = []
    while core.has_next(in_flight=0):
        planned = core.ask()
        numbers.append(planned.number)
        core.close(core.outcome_record(planned, outcome(planned.effective)))
    assert len(numbers) == 1 + 3 * 2  # the baseline, then each grid point once
    small = StudyCore(dataclasses.replace(spec, n_trials=2), MemoryRecords())
    small.ensure_baseline()
    small.ask()  # the baseline, in flight: one more may start, not two
    assert small.has_next(in_flight=1) and not small.has_next(in_flight=2)


def test_the_plan_is_full_for_the_baseline_and_learns_the_gate_and_front_after_it(tmp_path):
    path = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path, num_prompts=8),
        n_trials=6,
        space={"centroid_top_k": {"choices": [8, 16, 32]}},
        fidelity={"mode": "multi", "stages": [0.25]},
    )
    spec = load_study(path)
    core = StudyCore(spec, MemoryRecords())
    core.ensure_baseline()
    planned = core.ask()
    assert core.plan(planned).record() == {
        "mode": "full",
        "why": "the baseline: the gate and the front rule learn from it",
    }
    core.close(core.outcome_record(planned, outcome(planned.effective)))
    plan = core.plan(ask(core, {"centroid_top_k": 8}))
    assert plan.mode == "multi" and plan.stages == (2,) and plan.gate == pytest.approx(2.30 * 1.05)
    assert plan.front == ((10.0, 2.30),) and plan.ratios == {}  # no prompt timings in these records
    full = dataclasses.replace(spec, fidelity=dataclasses.replace(spec.fidelity, mode="full"))
    assert StudyCore(full, MemoryRecords()).plan(planned).record() == {"mode": "full", "why": "the study's choice"}


def test_a_pruned_trial_is_told_pruned_and_spends_budget_but_is_never_feasible(env):
    spec, storage = env
    core = core_for(spec, storage)
    measured(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    planned = ask(core, {"centroid_top_k": 8, "sliding_window": 512})
    stopped = outcome(planned.effective)
    stopped.measurement = dataclasses.replace(
        stopped.measurement, stopped="front", stop_reason="cannot reach the front", prompts_timed=1
    )
    record = core.outcome_record(planned, stopped)
    core.close(record)
    assert record.status == "pruned" and record.reason == "cannot reach the front" and record.feasible is False
    trial = core.study.get_trials()[1]
    assert trial.state == TrialState.PRUNED and trial.user_attrs["stopped"] == "front"
    assert trial.user_attrs["prompts_timed"] == "1 of 2" and core.budget_used() == 2
    assert storage.record(spec.name, 1).measurement.stopped == "front"  # its partial figures, kept


def test_a_proposal_of_measured_knobs_is_a_copy_told_its_figures_and_boots_nothing(env):
    spec, storage = env
    core = core_for(spec, storage)
    measured(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    first = measured(core, {"centroid_top_k": 8, "sliding_window": 512})
    planned = ask(core, {"centroid_top_k": 8, "sliding_window": 512})
    copy = planned.answer  # the driver closes it at once: no worker, no stack
    assert (copy.reuse, copy.source, copy.booted, copy.full) == ("copy", 1, False, False)
    assert copy.feasible and copy.tps == first.tps and "the same knobs as trial 1" in copy.reason
    core.close(copy)
    told = core.study.trials[2]
    assert told.state == TrialState.COMPLETE and told.values == core.study.trials[1].values
    assert named(told) == named(core.study.trials[1])  # the same constraints: GP models every COMPLETE trial
    assert (told.user_attrs["reuse"], told.user_attrs["source_trial"]) == ("copy", 1)
    assert core.budget_used() == 2  # the budget counts boots
    stored = storage.record(spec.name, 2)
    assert (stored.reuse, stored.source) == ("copy", 1)
    assert [r.trial_number for r in front_records(storage.records(spec.name))] == [0, 1]  # never the copy


def test_a_study_that_allows_repeats_boots_them_and_records_them_as_repeats(env):
    spec, storage = env
    core = core_for(dataclasses.replace(spec, repeats="allow"), storage)
    measured(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    measured(core, {"centroid_top_k": 8, "sliding_window": 512})
    planned = ask(core, {"centroid_top_k": 8, "sliding_window": 512})
    assert planned.answer is None and planned.repeat_of == 1
    record = core.outcome_record(planned, outcome(planned.effective))
    core.close(record)
    assert (record.reuse, record.source, record.full) == ("repeat", 1, True) and core.budget_used() == 3
    buffer = io.StringIO()
    SweepConsole(Console(file=buffer, width=200)).finished(record, requeued=False)
    assert "(repeat of trial 1)" in buffer.getvalue()


def test_a_ppl_memo_hit_boots_nothing_is_told_infeasible_and_is_shown_as_such(env):
    spec, storage = env
    core = core_for(spec, storage)
    base = measured(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    measured(core, {"centroid_top_k": 8, "sliding_window": 64}, ppl=2.50)  # window 64: over the gate
    planned = ask(core, {"centroid_top_k": 16, "sliding_window": 64})  # other lossless knobs, the same window
    memo = planned.answer
    assert (memo.reuse, memo.source, memo.booted, memo.feasible) == ("ppl_memo", 1, False, False)
    assert memo.knobs == planned.effective and memo.ppl == 2.50
    core.close(memo)
    told = core.study.trials[2]
    assert told.state == TrialState.COMPLETE and told.values == [10.0, 2.50]
    assert named(told) == {"ppl_gate": pytest.approx(2.50 - base.gate)}  # infeasible, as GP and TPE read it
    assert core.budget_used() == 2
    stored = storage.record(spec.name, 2)
    buffer = io.StringIO()
    SweepConsole(Console(file=buffer, width=300)).finished(stored, requeued=False)
    assert (
        f"trial 2: not booted (PPL memo of trial 1): PPL memo: trial 1, with the same PPL-moving knobs "
        f"(sliding_window=64), measured PPL 2.5000 over the gate {base.gate:.4f}: told infeasible"
    ) in buffer.getvalue()
    data = load_study_data(storage, spec.name)
    row = trials_frame(data).set_index("number").loc[2]
    assert (row["reuse"], row["source_trial"], row["feasible"]) == ("ppl_memo", 1, False)
    assert "PPL memo" in row["reuse_reason"]
    assert [t.number for t in data.reused] == [2] and 2 not in [t.number for t in data.measured]
    chart = {trace.name.rsplit(" (", 1)[0]: trace for trace in pareto_figure(data).data}
    assert "not booted: PPL memo" in chart["not booted: copy / PPL memo (an earlier trial's figures)"].text[0]
    # A window under the gate is not a memo hit, and a study may turn the memo off
    assert ask(core, {"centroid_top_k": 16, "sliding_window": 512}).answer is None
    off = core_for(dataclasses.replace(spec, name="nomemo", ppl_memo=False), storage)
    measured(off, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    measured(off, {"centroid_top_k": 8, "sliding_window": 64}, ppl=2.50)
    assert ask(off, {"centroid_top_k": 16, "sliding_window": 64}).answer is None


def test_a_sampler_that_proposes_only_known_points_ends_the_study_instead_of_looping(env):
    spec, storage = env
    core = core_for(dataclasses.replace(spec, n_trials=50), storage)
    measured(core, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    for _ in range(CONVERGED_AFTER):
        assert core.has_next(in_flight=0) and core.converged() is None
        core.close(ask(core, {"centroid_top_k": 32, "sliding_window": 512}).answer)
    assert not core.has_next(in_flight=0) and core.budget_used() == 1
    assert core.converged().startswith(f"the sampler converged: its last {CONVERGED_AFTER} proposals")
