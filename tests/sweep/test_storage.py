import sqlite3

import optuna
import pytest
import sqlalchemy as sa

from engine.measurement import Measurement
from errors import StorageError
from sweep.store import TrialRecord
from sweep.store._database import METADATA, measurements, open_existing, open_storage


def measurement(**fields):
    base = dict(
        tps=12.5,
        ppl=2.31,
        ppl_mean_record=2.4,
        completion_tokens=64,
        tps_wall_s=5.12,
        ppl_target_tokens=90,
        num_prompts=2,
        num_ppl_records=2,
        latency_s={"p50": 0.2},
        output_token_ids=[[1, 2, 3], [262143, 0]],
    )
    return Measurement(**{**base, **fields})


def record(**fields):
    base = dict(
        study_name="s",
        trial_number=0,
        status="complete",
        knobs={"centroid_top_k": 32},
        argv=["python", "serve.py"],
        env={"HF_TOKEN": "***"},
        node={"node_id": "abc"},
        timings={"boot": 1.5},
        measurement=measurement(),
        gate=2.42,
        feasible=True,
        identity_diff_prompts=0,
    )
    return TrialRecord(**{**base, **fields})


def test_the_file_and_its_folder_are_created_in_wal_mode(tmp_path):
    url = f"sqlite:///{tmp_path}/deep/er/sweeps.db"
    storage = open_storage(url)
    try:
        assert sqlite3.connect(tmp_path / "deep/er/sweeps.db").execute("PRAGMA journal_mode").fetchone() == ("wal",)
        with storage.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 30000
        assert {"measurements", "trials", "studies"} <= set(sa.inspect(storage.engine).get_table_names())
    finally:
        storage.close()


def test_a_record_reads_back_whole_with_its_typed_measurement(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    try:
        written = record()
        row_id = storage.insert_record(written)
        back = storage.record("s", 0)
        assert back.id == row_id and back.created_at is not None
        for field in (
            "knobs",
            "argv",
            "env",
            "node",
            "timings",
            "measurement",
            "gate",
            "feasible",
            "identity_diff_prompts",
            "status",
        ):
            assert getattr(back, field) == getattr(written, field), field
        assert isinstance(back.measurement, Measurement) and back.tps == 12.5
        with storage.engine.connect() as conn:  # the queryable columns repeat the measurement's figures
            assert conn.execute(sa.select(measurements.c.tps, measurements.c.ppl)).one() == (12.5, 2.31)
        assert storage.record("s", 1) is None
        assert [r.trial_number for r in storage.records("s")] == [0]
    finally:
        storage.close()


def test_one_row_per_trial_the_database_refuses_a_second(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    try:
        storage.insert_record(record())
        with pytest.raises(sa.exc.IntegrityError):
            storage.insert_record(record(status="failed", measurement=None))
        storage.insert_record(record(study_name="other"))  # the key is (study, trial number)
    finally:
        storage.close()


def test_token_ids_are_stored_compactly(tmp_path):
    ids = [[(p * 7919 + j * 31) % 262144 for j in range(512)] for p in range(128)]
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    try:
        storage.insert_record(record(measurement=measurement(output_token_ids=ids)))
        with storage.engine.connect() as conn:
            blob, metrics = conn.execute(sa.select(measurements.c.token_ids, measurements.c.measurement)).one()
        assert len(blob) < 128 * 512 * 4  # below raw int32
        assert "output_token_ids" not in metrics  # the ids live in their own column only
        assert storage.record("s", 0).measurement.output_token_ids == ids
    finally:
        storage.close()


def test_optuna_and_the_project_tables_share_one_file_and_metadata(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    extra = sa.Table("gs_test_extra", METADATA, sa.Column("id", sa.Integer, primary_key=True))
    try:
        storage = open_storage(url)
        optuna.create_study(study_name="s", storage=storage.optuna, directions=["maximize", "minimize"])
        storage.close()
        assert "gs_test_extra" in sa.inspect(sa.create_engine(url)).get_table_names()
        assert optuna.load_study(study_name="s", storage=url).directions[0].name == "MAXIMIZE"
    finally:
        METADATA.remove(extra)


def test_a_bad_url_is_a_storage_error_and_a_reader_never_creates_a_file(tmp_path):
    with pytest.raises(StorageError, match="--storage 'not a url'"):
        open_storage("not a url")
    with pytest.raises(StorageError, match=r"no database file there"):
        open_existing(f"sqlite:///{tmp_path}/typo.db")
    assert not (tmp_path / "typo.db").exists()


def test_rows_can_be_read_without_their_token_ids(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    try:
        storage.insert_record(record())
        light = storage.records("s", token_ids=False)[0]
        assert light.measurement.output_token_ids == [] and light.knobs == {"centroid_top_k": 32} and light.tps == 12.5
    finally:
        storage.close()
