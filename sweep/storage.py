"""The sweep's database: Optuna's RDB storage plus the project's own tables, one SQLite file.

Only the driver writes (DESIGN.md "One writer"); dashboards, ``sweep.verify`` and tests read.
SQLite runs in WAL mode so readers (optuna-dashboard included) never block the writer, and
every connection waits on a lock (busy timeout) instead of failing with "database is locked".

The project's tables are SQLAlchemy Core tables on ``METADATA``. A module that adds a table
(``sweep.verification`` adds ``verifications``) defines it on ``METADATA`` at import;
``open_storage`` creates every table registered by the time it is called.

``measurements`` holds one row per trial attempt, keyed by (study, trial number): the driver
writes the row before it tells Optuna, so a crash between the two is healed at the next start
(the row is told again) and never produces a second row.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import optuna
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from engine.errors import ConfigError
from sweep.identity import pack_token_ids, unpack_token_ids

__all__ = [
    "DEFAULT_STORAGE_URL",
    "METADATA",
    "FailKind",
    "MeasurementRecord",
    "Storage",
    "measurements",
    "open_storage",
]

DEFAULT_STORAGE_URL = "sqlite:///runs/sweeps.db"
BUSY_TIMEOUT_S = 60.0

METADATA = sa.MetaData()

# Why a trial failed, as the driver's retry rules see it:
#   engine       the stack misbehaved (boot, crash, timeout, bad answers): a result, not retried
#   lost         the worker or its node died mid-trial, or the driver died with the trial
#                RUNNING (found so at the next start): re-run once
#   interrupted  the user stopped the driver (Ctrl-C, SIGTERM): always re-run
#   skipped      not booted: the same knobs already failed because of the stack
FailKind = Literal["engine", "lost", "interrupted", "skipped"]

measurements = sa.Table(
    "measurements",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study_name", sa.String(512), nullable=False),
    sa.Column("trial_number", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # complete | failed
    sa.Column("fail_kind", sa.String(16)),
    sa.Column("reason", sa.Text),
    sa.Column("is_baseline", sa.Boolean, nullable=False, default=False),
    sa.Column("knobs", sa.JSON, nullable=False),
    sa.Column("argv", sa.JSON, nullable=False),
    sa.Column("env", sa.JSON, nullable=False),  # redacted by the engine before it left the worker
    sa.Column("node", sa.JSON, nullable=False),  # node_id, hostname, accelerator_type, gpu_ids
    sa.Column("profile", sa.JSON, nullable=False),
    sa.Column("timings", sa.JSON, nullable=False),
    sa.Column("log_tail", sa.Text, nullable=False, default=""),
    sa.Column("tps", sa.Float),
    sa.Column("ppl", sa.Float),
    sa.Column("ppl_mean_record", sa.Float),
    sa.Column("acceptance_rate", sa.Float),
    sa.Column("measurement", sa.JSON),  # every metric of engine.measurement.Measurement but the ids
    sa.Column("token_ids", sa.LargeBinary),  # sweep.identity.pack_token_ids
    sa.Column("gate", sa.Float),  # the PPL gate the trial was judged against
    sa.Column("feasible", sa.Boolean),
    sa.Column("identity_diff_prompts", sa.Integer),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("study_name", "trial_number", name="uq_measurement_trial"),
)


@dataclass(kw_only=True)
class MeasurementRecord:
    """One row of ``measurements``, as the driver writes it and readers get it back."""

    study_name: str
    trial_number: int
    status: Literal["complete", "failed"]
    knobs: dict[str, Any]
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    node: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    log_tail: str = ""
    fail_kind: FailKind | None = None
    reason: str | None = None
    is_baseline: bool = False
    tps: float | None = None
    ppl: float | None = None
    ppl_mean_record: float | None = None
    acceptance_rate: float | None = None
    measurement: dict[str, Any] | None = None
    token_ids: list[list[int]] | None = None
    gate: float | None = None
    feasible: bool | None = None
    identity_diff_prompts: int | None = None
    id: int | None = None
    created_at: datetime | None = None

    def _row(self) -> dict[str, Any]:
        row = {c.name: getattr(self, c.name) for c in measurements.columns if c.name != "id"}
        row["token_ids"] = None if self.token_ids is None else pack_token_ids(self.token_ids)
        row["created_at"] = self.created_at or datetime.now(UTC)
        return row

    @classmethod
    def _from_row(cls, row: sa.Row) -> "MeasurementRecord":
        data = dict(row._mapping)
        blob = data.pop("token_ids", None)
        created = data["created_at"]
        if created is not None and created.tzinfo is None:  # SQLite drops the zone on the way back
            data["created_at"] = created.replace(tzinfo=UTC)
        return cls(**data, token_ids=None if blob is None else unpack_token_ids(blob))


@dataclass
class Storage:
    """The open database: Optuna's storage and the engine the project's tables live on."""

    url: str
    optuna: optuna.storages.RDBStorage
    engine: sa.Engine

    def insert_measurement(self, record: MeasurementRecord) -> int:
        with self.engine.begin() as conn:
            result = conn.execute(measurements.insert().values(**record._row()))
        record.id = result.inserted_primary_key[0]
        return record.id

    def measurement(self, study_name: str, trial_number: int) -> MeasurementRecord | None:
        query = measurements.select().where(
            measurements.c.study_name == study_name, measurements.c.trial_number == trial_number
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else MeasurementRecord._from_row(row)

    def measurements(self, study_name: str, *, token_ids: bool = True) -> list[MeasurementRecord]:
        """A study's rows by trial number; ``token_ids=False`` leaves the ids (the bulk) unread."""
        columns = [c for c in measurements.columns if token_ids or c.name != "token_ids"]
        query = (
            sa.select(*columns)
            .where(measurements.c.study_name == study_name)
            .order_by(measurements.c.trial_number)
        )
        with self.engine.connect() as conn:
            return [MeasurementRecord._from_row(row) for row in conn.execute(query)]

    def close(self) -> None:
        self.optuna.remove_session()
        self.optuna.engine.dispose()


def _on_sqlite_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    cursor.close()


def _prepare_sqlite(url: str) -> dict[str, Any]:
    """Create the folder and switch the file to WAL before Optuna first touches it."""
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        first = sa.create_engine(url)
        sa.event.listen(first, "connect", _on_sqlite_connect)
        with first.connect():
            pass  # WAL is a property of the file: set once, every later connection sees it
        first.dispose()
    return {"connect_args": {"timeout": BUSY_TIMEOUT_S}}


def open_storage(url: str = DEFAULT_STORAGE_URL) -> Storage:
    """Open (creating if needed) the database at ``url``; any SQLAlchemy URL Optuna accepts."""
    try:
        backend = make_url(url).get_backend_name()
    except sa.exc.ArgumentError as exc:
        raise ConfigError(f"--storage {url!r}: not a database URL ({exc})") from exc
    engine_kwargs = _prepare_sqlite(url) if backend == "sqlite" else {}
    try:
        rdb = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
    except (sa.exc.OperationalError, sa.exc.IntegrityError):
        # Another process (optuna-dashboard, a reader) initialised the same new file between
        # Optuna's checks and its CREATE TABLE / version row; now it exists, so this only reads.
        rdb = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
    if backend == "sqlite":
        sa.event.listen(rdb.engine, "connect", _on_sqlite_connect)
    METADATA.create_all(rdb.engine)
    return Storage(url=url, optuna=rdb, engine=rdb.engine)
