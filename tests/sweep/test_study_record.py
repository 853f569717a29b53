"""A study's record: what it stores beside Optuna's own reads back typed, as written, and a newer one is refused."""

import optuna
import pytest

from engine.config import get_profile
from errors import StudyMismatchError
from sweep.judgement import Gate, Slo
from sweep.store import (
    RECORD_VERSION,
    ClientOffset,
    ConfirmationPlan,
    PromotionPlan,
    StudyRecord,
    TrialMarks,
    open_storage,
    read_record,
    trial_marks,
    write_record,
)


def _study(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    return storage, optuna.create_study(study_name="s", storage=storage.optuna, directions=["maximize", "minimize"])


def test_a_record_reads_back_typed_as_it_was_written_and_only_what_changed_is_stored(tmp_path):
    storage, study = _study(tmp_path)
    try:
        plan = PromotionPlan(
            run_id="r1",
            trials=(3, 0),
            boots=3,
            profile=get_profile("quick"),
            target=0.8,
            noise_floor=0.03,
            gate=Gate(ppl_max_ratio=1.05, baseline_trial=0),
            slo=Slo(ttft_ms=200.0),  # a serving study's: its claims are of goodput under it
        )
        record = StudyRecord(
            manifest="stub",
            target=0.8,
            noise_floor=0.03,
            serving_slo=Slo(ttft_ms=200.0),
            promotion=plan,
            confirmation=ConfirmationPlan(run_id="r2", promotion_run="r1", chosen=3, control=0, boots=2),
            client_offset=ClientOffset(log_mean=-0.01, sd=0.005, rounds=4, basis="t"),
            claims=({"trial": 3, "claim": 100.0},),
            serving_claims=({"trial": 3, "level": "c4", "goodput": 2.5},),
        )
        write_record(study, record)
        assert read_record(optuna.load_study(study_name="s", storage=storage.optuna)) == record
        # a later write of one field leaves the others as they were
        write_record(study, StudyRecord(target=0.85))
        again = read_record(optuna.load_study(study_name="s", storage=storage.optuna))
        assert again.target == 0.85 and again.promotion == plan and again.manifest == "stub"
        assert study.user_attrs["record_version"] == RECORD_VERSION
    finally:
        storage.close()


def test_a_record_of_a_newer_version_is_refused_and_one_of_no_version_reads_as_the_older_keys(tmp_path):
    storage, study = _study(tmp_path)
    try:
        study.set_user_attr("target", 0.7)  # as 18a687f wrote it: no version
        assert read_record(study) == StudyRecord(target=0.7)
        study.set_user_attr("record_version", RECORD_VERSION + 1)
        with pytest.raises(StudyMismatchError, match="newer"):
            read_record(study)
    finally:
        storage.close()


def test_a_retry_and_the_baseline_are_marked_on_the_trials_queued(tmp_path):
    storage, study = _study(tmp_path)
    try:
        study.enqueue_trial({}, user_attrs=TrialMarks(is_baseline=True).attrs())
        study.enqueue_trial({}, user_attrs=TrialMarks(retry_of=0).attrs())
        first, second = study.get_trials()
        assert trial_marks(first) == TrialMarks(is_baseline=True) and trial_marks(second) == TrialMarks(retry_of=0)
    finally:
        storage.close()
