"""The driver's bookkeeping against a real SQLite storage and Optuna; no Ray, no engine."""

import dataclasses
import io

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console

from engine.measurement import Measurement, TrialOutcome
from sweep import ledger
from sweep.console import SweepConsole
from sweep.spec import load_study
from sweep.storage import open_storage
from tests.stacks import stub_profile
from tests.sweep.kit import write_manifest, write_study

ATTRS = {"tps", "ppl", "ppl_mean_record", "acceptance_rate", "feasible", "is_baseline", "node_id",
         "identity_diff_prompts", "measurement_id"}


@pytest.fixture
def env(tmp_path):
    path = write_study(tmp_path, manifest=write_manifest(tmp_path), profile=stub_profile(tmp_path), n_trials=4,
                       space={"centroid_top_k": {"choices": [8, 16, 32]}, "sliding_window": {"choices": [64, 512]}})
    spec = load_study(path)
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    study = optuna.create_study(study_name=spec.name, storage=storage.optuna, directions=["maximize", "minimize"])
    yield spec, storage, study
    storage.close()


def outcome(knobs, *, ppl=2.30, ids=((1, 2), (3, 4)), status="complete"):
    m = Measurement(tps=10.0, ppl=ppl, ppl_mean_record=ppl, completion_tokens=4, tps_wall_s=0.4,
                    ppl_target_tokens=8, num_prompts=2, num_ppl_records=2, acceptance_rate=0.5,
                    output_token_ids=[list(i) for i in ids])
    return TrialOutcome(status=status, knobs=knobs, argv=["x"], env={}, measurement=m if status == "complete" else None,
                        reason=None if status == "complete" else "engine 'stub' exited with status 1 during boot",
                        node={"node_id": "n1"})


def ask(study, spec, params, *, baseline=False):
    study.enqueue_trial(params, user_attrs={"is_baseline": True} if baseline else None)
    trial = study.ask()
    for knob in spec.space:
        trial.suggest_categorical(knob, list(spec.space[knob].values()))
    return trial


def measured(spec, storage, study, params, **kw):
    baseline = kw.pop("baseline", False)
    trial = ask(study, spec, params, baseline=baseline)
    knobs = ledger.trial_knobs(trial, spec)
    judge = ledger.Judge(spec, next((r for r in storage.measurements(spec.name) if r.is_baseline), None))
    record = ledger.outcome_record(outcome(spec.effective(knobs), **kw), spec=spec, number=trial.number, knobs=knobs,
                                   is_baseline=baseline, judge=judge)
    ledger.close(study, storage, record, spec=spec)
    return record


def test_a_measured_trial_is_stored_then_told_with_its_gate_as_a_constraint(env):
    spec, storage, study = env
    base = measured(spec, storage, study, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    over = measured(spec, storage, study, {"centroid_top_k": 32, "sliding_window": 64}, ppl=2.50)
    assert base.gate == pytest.approx(2.30 * 1.05) and base.feasible
    assert over.gate == pytest.approx(base.gate) and over.feasible is False
    t0, t1 = study.get_trials()
    assert t0.state == t1.state == TrialState.COMPLETE and t1.values == [10.0, 2.50]
    assert t0.constraints == {"ppl_gate": pytest.approx(2.30 - base.gate)}
    assert t1.constraints["ppl_gate"] > 0
    assert ATTRS - {"identity_diff_prompts"} <= set(t0.user_attrs)
    assert t1.user_attrs["measurement_id"] == storage.measurement(spec.name, 1).id
    assert [t.number for t in study.best_trials] == [0]


def test_a_lossless_trial_with_other_tokens_is_flagged_and_infeasible_only_when_required(env):
    spec, storage, study = env
    measured(spec, storage, study, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    same = measured(spec, storage, study, {"centroid_top_k": 8, "sliding_window": 512})
    other = measured(spec, storage, study, {"centroid_top_k": 16, "sliding_window": 512}, ids=((1, 2), (3, 5)))
    lossy = measured(spec, storage, study, {"centroid_top_k": 16, "sliding_window": 64}, ids=((9, 9), (9, 9)))
    assert (same.identity_diff_prompts, other.identity_diff_prompts, lossy.identity_diff_prompts) == (0, 1, None)
    assert other.feasible  # flagged, not excluded: the study does not require identity
    assert study.trials[2].user_attrs["identity_diff_prompts"] == 1 and "greedy_identity" not in study.trials[2].constraints

    strict = dataclasses.replace(spec, identity_required=True)
    judge = ledger.Judge(strict, storage.measurement(spec.name, 0))
    knobs = {"centroid_top_k": 16, "sliding_window": 512}
    record = ledger.outcome_record(outcome(knobs, ids=((1, 2), (3, 5))), spec=strict, number=9, knobs=knobs,
                                   is_baseline=False, judge=judge)
    assert record.identity_diff_prompts == 1 and record.feasible is False


def test_a_stack_failure_is_a_failed_trial_and_its_knobs_are_not_booted_again(env):
    spec, storage, study = env
    record = measured(spec, storage, study, {"centroid_top_k": 8, "sliding_window": 64}, status="failed")
    assert record.fail_kind == "engine" and "exited with status 1" in record.reason
    assert study.trials[0].state == TrialState.FAIL and "exited" in study.trials[0].user_attrs["fail_reason"]
    assert record.knobs == {"sliding_window": 64, "centroid_top_k": 8, "num_speculative_tokens": 3}  # every knob
    again = spec.effective({"centroid_top_k": 8, "sliding_window": 64})
    assert ledger.skip_reason(again, storage.measurements(spec.name)).startswith("not run again: trial 0")
    assert ledger.skip_reason({**again, "centroid_top_k": 16}, storage.measurements(spec.name)) is None
    assert not study.get_trials(states=(TrialState.WAITING,))


def test_a_row_written_before_a_crash_is_told_at_the_next_start_and_never_doubled(env):
    spec, storage, study = env
    trial = ask(study, spec, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    judge = ledger.Judge(spec, None)
    record = ledger.outcome_record(outcome(spec.baseline()), spec=spec, number=trial.number, knobs={},
                                   is_baseline=True, judge=judge)
    storage.insert_measurement(record)  # ... and the driver died before telling Optuna
    assert study.trials[0].state == TrialState.RUNNING
    closed = ledger.reconcile(study, storage, spec)
    assert [r.trial_number for r in closed] == [0]
    assert study.trials[0].state == TrialState.COMPLETE and len(storage.measurements(spec.name)) == 1
    assert ledger.reconcile(study, storage, spec) == []


def test_a_trial_lost_with_the_driver_is_re_queued_once(env):
    spec, storage, study = env
    params = {"centroid_top_k": 16, "sliding_window": 64}
    ask(study, spec, params)  # RUNNING, no row: the driver died mid-trial
    first = ledger.reconcile(study, storage, spec)[0]
    assert first.fail_kind == "lost" and "driver stopped" in first.reason
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [t.user_attrs["retry_of"] for t in waiting] == [0]
    assert ledger.budget_used(study) == 0  # replaced by its retry

    retry = study.ask()  # the retry runs, and is lost the same way
    knobs = {knob: retry.suggest_categorical(knob, list(spec.space[knob].values())) for knob in spec.space}
    assert retry.number == 1 and knobs == params
    second = ledger.reconcile(study, storage, spec)[0]
    assert second.fail_kind == "lost"
    assert not study.get_trials(states=(TrialState.WAITING,))  # not retried forever
    assert ledger.budget_used(study) == 1


def test_an_interrupted_trial_is_always_re_queued(env):
    spec, storage, study = env
    trial = ask(study, spec, {"centroid_top_k": 16, "sliding_window": 64})
    record = ledger.failure_record(spec=spec, number=trial.number, knobs=ledger.trial_knobs(trial, spec),
                                   is_baseline=False, kind="interrupted", reason="interrupted by the user (Ctrl-C)")
    assert ledger.close(study, storage, record, spec=spec) is True
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 1


def test_a_stack_without_token_ids_is_compared_by_the_hashes_of_its_texts(env):
    spec, storage, study = env

    def hashed(knobs, hashes, *, number, baseline):
        result = outcome(spec.effective(knobs), ids=())
        result.measurement.output_text_sha256 = list(hashes)
        judge = ledger.Judge(spec, storage.measurement(spec.name, 0))
        record = ledger.outcome_record(result, spec=spec, number=number, knobs=knobs, is_baseline=baseline, judge=judge)
        if baseline:
            storage.insert_measurement(record)
        return record

    hashed({}, ["a", "b"], number=0, baseline=True)
    assert hashed({"centroid_top_k": 8}, ["a", "c"], number=1, baseline=False).identity_diff_prompts == 1
    assert hashed({"centroid_top_k": 8}, ["a", "b"], number=2, baseline=False).identity_diff_prompts == 0


def test_repeated_tps_runs_tell_the_median_and_keep_the_spread(env):
    spec, storage, study = env
    trial = ask(study, spec, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    base = outcome({})
    base.measurement = dataclasses.replace(base.measurement, tps=10.0, tps_runs=[12.0, 10.0, 9.0], tps_cv=0.147)
    judge = ledger.Judge(spec, None)
    record = ledger.outcome_record(base, spec=spec, number=trial.number, knobs={}, is_baseline=True, judge=judge)
    ledger.close(study, storage, record, spec=spec)
    told = study.get_trials()[0]
    assert told.values[0] == 10.0 and told.user_attrs["tps_cv"] == 0.147
    assert storage.measurement(spec.name, 0).measurement["tps_runs"] == [12.0, 10.0, 9.0]
    buffer = io.StringIO()
    SweepConsole(Console(file=buffer, width=200)).finished(storage.measurement(spec.name, 0), requeued=False)
    assert "TPS 10.00 (median of 3, CV 14.7%)" in buffer.getvalue()


def test_a_study_requiring_identity_gives_every_trial_the_same_constraints_so_gp_can_model_them(env):
    spec, storage, _ = env
    strict = dataclasses.replace(spec, name="strict", identity_required=True)
    study = optuna.create_study(study_name="strict", storage=storage.optuna, directions=["maximize", "minimize"],
                                sampler=optuna.samplers.GPSampler(seed=1, n_startup_trials=3))
    measured(strict, storage, study, {"centroid_top_k": 32, "sliding_window": 512}, baseline=True)
    measured(strict, storage, study, {"centroid_top_k": 16, "sliding_window": 64}, ids=((9, 9), (9, 9)))  # lossy
    measured(strict, storage, study, {"centroid_top_k": 8, "sliding_window": 512}, ids=((1, 2), (3, 5)))  # differs
    assert [set(t.constraints) for t in study.trials] == [{"ppl_gate", "greedy_identity"}] * 3
    assert [t.constraints["greedy_identity"] for t in study.trials] == [0.0, 0.0, 1.0]
    trial = ask(study, strict, {})  # GP's own proposal over the three: refused before, when counts differed
    assert trial.params
