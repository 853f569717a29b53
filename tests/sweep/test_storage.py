import sqlite3

import optuna
import pytest
import sqlalchemy as sa

from engine.errors import ConfigError
from sweep.storage import METADATA, MeasurementRecord, measurements, open_storage


def record(**fields):
    base = dict(study_name="s", trial_number=0, status="complete", knobs={"centroid_top_k": 32},
                argv=["python", "serve.py"], env={"HF_TOKEN": "***"}, node={"node_id": "abc"},
                timings={"boot": 1.5}, tps=12.5, ppl=2.31, measurement={"tps": 12.5, "latency_s": {"p50": 0.2}},
                token_ids=[[1, 2, 3], [262143, 0]], gate=2.42, feasible=True, identity_diff_prompts=0)
    return MeasurementRecord(**{**base, **fields})


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


def test_a_measurement_reads_back_whole(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    try:
        written = record()
        row_id = storage.insert_measurement(written)
        back = storage.measurement("s", 0)
        assert back.id == row_id and back.created_at is not None
        for field in ("knobs", "argv", "env", "node", "timings", "tps", "ppl", "measurement", "token_ids",
                      "gate", "feasible", "identity_diff_prompts", "status"):
            assert getattr(back, field) == getattr(written, field), field
        assert storage.measurement("s", 1) is None
        assert [r.trial_number for r in storage.measurements("s")] == [0]
    finally:
        storage.close()


def test_one_row_per_trial_the_database_refuses_a_second(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    try:
        storage.insert_measurement(record())
        with pytest.raises(sa.exc.IntegrityError):
            storage.insert_measurement(record(status="failed"))
        storage.insert_measurement(record(study_name="other"))  # the key is (study, trial number)
    finally:
        storage.close()


def test_token_ids_are_stored_compactly(tmp_path):
    ids = [[(p * 7919 + j * 31) % 262144 for j in range(512)] for p in range(128)]
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    try:
        storage.insert_measurement(record(token_ids=ids))
        with storage.engine.connect() as conn:
            blob = conn.execute(sa.select(measurements.c.token_ids)).scalar_one()
        assert len(blob) < 128 * 512 * 4  # below raw int32
        assert storage.measurement("s", 0).token_ids == ids
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


def test_a_bad_url_is_a_config_error():
    with pytest.raises(ConfigError, match="--storage 'not a url'"):
        open_storage("not a url")


def test_rows_can_be_read_without_their_token_ids(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    try:
        storage.insert_measurement(record())
        light = storage.measurements("s", token_ids=False)[0]
        assert light.token_ids is None and light.knobs == {"centroid_top_k": 32} and light.tps == 12.5
    finally:
        storage.close()
