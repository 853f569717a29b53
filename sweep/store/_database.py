"""The sweep's database: Optuna's RDB storage plus the project's own tables, one SQLite file.

Only the driver writes trials (DESIGN "One writer"); ``sweep.verify`` adds verification rows;
dashboards and tests read. SQLite runs in WAL mode so readers (optuna-dashboard included) never
block the writer, and every connection waits on a lock (busy timeout) instead of failing with
"database is locked".

The project's tables are defined here, the whole schema in one place:
- ``measurements``: one row per trial attempt (a ``sweep.store.TrialRecord``), keyed by (study,
  trial number). The driver writes the row before it tells Optuna, so a crash between the two
  is healed at the next start (the row is told again) and never produces a second row.
- ``promotions``, ``confirmations``, ``verifications`` and ``calibrations``: one row per boot of a
  promotion, a confirmation, a verification or a calibration run (``sweep.store.BootRecord``), the same
  columns in each.

``open_storage`` creates the file and tables as needed, and adds to a database written by an older
version the columns it lacks (each nullable, so old rows read as "not recorded"); ``open_existing``
(for readers) refuses a SQLite URL that names no file, so a typo is an error and not a new empty
database.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from engine.measurement import LoadLevel, Measurement
from errors import StorageError
from sweep.runs import RUN_DIR
from sweep.store._boot import BootKind, BootRecord
from sweep.store._identity import pack_token_ids, unpack_token_ids
from sweep.store._trial import TrialRecord
from sweep.store._url import connect_url, shown_url

__all__ = [
    "DEFAULT_STORAGE_URL",
    "METADATA",
    "Storage",
    "StudyRecords",
    "as_utc",
    "calibrations",
    "confirmations",
    "measurements",
    "open_existing",
    "open_storage",
    "promotions",
    "verifications",
]

DEFAULT_STORAGE_URL = f"sqlite:///{RUN_DIR}/sweeps.db"
BUSY_TIMEOUT_S = 60.0

METADATA = sa.MetaData()

measurements = sa.Table(
    "measurements",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study_name", sa.String(512), nullable=False),
    sa.Column("trial_number", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),  # sweep.store.RecordStatus
    sa.Column("fail_kind", sa.String(16)),
    sa.Column("reason", sa.Text),
    sa.Column("is_baseline", sa.Boolean, nullable=False, default=False),
    sa.Column("knobs", sa.JSON, nullable=False),
    sa.Column("argv", sa.JSON, nullable=False),
    sa.Column("env", sa.JSON, nullable=False),
    sa.Column("node", sa.JSON, nullable=False),
    sa.Column("profile", sa.JSON, nullable=False),
    sa.Column("timings", sa.JSON, nullable=False),
    sa.Column("log_tail", sa.Text, nullable=False, default=""),
    # tps .. acceptance_rate repeat the measurement's own fields, so that SQL can query them
    sa.Column("tps", sa.Float),
    sa.Column("ppl", sa.Float),
    sa.Column("ppl_mean_record", sa.Float),
    sa.Column("acceptance_rate", sa.Float),
    sa.Column("measurement", sa.JSON),  # engine.measurement.Measurement, all but the token ids
    sa.Column("token_ids", sa.LargeBinary),  # the measurement's output_token_ids, sweep.store.pack_token_ids
    sa.Column("gate", sa.Float),
    sa.Column("length_gate", sa.Float),  # sweep.store.TrialRecord.length_gate
    sa.Column("feasible", sa.Boolean),
    sa.Column("identity_diff_prompts", sa.Integer),
    sa.Column("provenance", sa.JSON),  # engine.host.provenance: stack, versions, GPU, driver
    sa.Column("reuse", sa.String(16)),  # sweep.store.Reuse: a copy or PPL-memo hit (no boot), or a repeat
    sa.Column("source", sa.Integer),  # the trial it copies or repeats
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("study_name", "trial_number", name="uq_measurement_trial"),
)


def _boot_columns() -> list[sa.Column]:
    """The columns of a boot's row (``sweep.store.BootRecord``), fresh for each table."""
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("study_name", sa.String(512), nullable=False),
        sa.Column("trial_number", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("order", sa.Integer),
        sa.Column("status", sa.String(16), nullable=False),  # complete | failed
        sa.Column("claimed_tps", sa.Float, nullable=False),
        sa.Column("claimed_ppl", sa.Float, nullable=False),
        sa.Column("gate", sa.Float),
        sa.Column("first", sa.String(16)),
        sa.Column("public_tps", sa.Float),
        sa.Column("tps", sa.Float),  # the held-out run's
        sa.Column("ppl", sa.Float),
        sa.Column("acceptance_rate", sa.Float),
        sa.Column("host_steal", sa.Float),
        sa.Column("telemetry", sa.JSON),  # engine.host.Telemetry's figures of the boot's runs
        sa.Column("load", sa.JSON),  # a serving study's load levels (engine.measurement.LoadLevel.to_dict each)
        sa.Column("reason", sa.Text),
        sa.Column("prompts", sa.Text, nullable=False),  # the held-out set
        sa.Column("public_prompts", sa.Text),
        sa.Column("refs", sa.Text, nullable=False),
        sa.Column("profile", sa.String(128), nullable=False),
        sa.Column("knobs", sa.JSON, nullable=False),
        sa.Column("node", sa.JSON, nullable=False),
        sa.Column("provenance", sa.JSON),
        sa.Column("timings", sa.JSON),
        sa.Column("log_tail", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    ]


promotions = sa.Table("promotions", METADATA, *_boot_columns(), sa.Index("ix_promotions_run", "study_name", "run_id"))
verifications = sa.Table(
    "verifications", METADATA, *_boot_columns(), sa.Index("ix_verifications_trial", "study_name", "trial_number")
)
# re-runs of a claim that calibrate its odds (benchmarks.claim_calibration): evidence of how far a later run
# moves, never a verification's verdict
calibrations = sa.Table(
    "calibrations", METADATA, *_boot_columns(), sa.Index("ix_calibrations_trial", "study_name", "trial_number")
)
# the confirmation of the point a promotion chose: a later run whose boots alone make its claim (sweep.claims)
confirmations = sa.Table(
    "confirmations", METADATA, *_boot_columns(), sa.Index("ix_confirmations_run", "study_name", "run_id")
)
BOOT_TABLES: dict[BootKind, sa.Table] = {
    "promotion": promotions,
    "confirmation": confirmations,
    "verification": verifications,
    "calibration": calibrations,
}

_MEASUREMENT_FIELDS = {f.name for f in fields(Measurement)}
_RECORD_COLUMNS = {f.name for f in fields(TrialRecord)} - {"measurement"}
_BOOT_FIELDS = {f.name for f in fields(BootRecord)}


def as_utc(stamp: datetime | None) -> datetime | None:
    """SQLite drops the zone on the way back: the project stores UTC."""
    return stamp.replace(tzinfo=UTC) if stamp is not None and stamp.tzinfo is None else stamp


def _row(record: TrialRecord) -> dict[str, Any]:
    row = {name: getattr(record, name) for name in _RECORD_COLUMNS if name != "id"}
    row["created_at"] = record.created_at or datetime.now(UTC)
    m = record.measurement
    row["measurement"] = row["token_ids"] = None
    if m is not None:
        data = m.to_dict()
        ids = data.pop("output_token_ids")
        row.update(
            measurement=data,
            token_ids=pack_token_ids(ids) if ids else None,
            tps=m.tps,
            ppl=m.ppl,
            ppl_mean_record=m.ppl_mean_record,
            acceptance_rate=m.acceptance_rate,
        )
    return row


def _record(row: sa.Row) -> TrialRecord:
    data = dict(row._mapping)
    blob, metrics = data.pop("token_ids", None), data.pop("measurement")
    measurement = None
    if metrics is not None:
        known = {k: v for k, v in metrics.items() if k in _MEASUREMENT_FIELDS}
        measurement = Measurement.from_dict({**known, "output_token_ids": unpack_token_ids(blob) if blob else []})
    kept = {k: v for k, v in data.items() if k in _RECORD_COLUMNS}
    return TrialRecord(
        **{**kept, "created_at": as_utc(data["created_at"]), "provenance": data["provenance"] or {}},
        measurement=measurement,
    )


@dataclass
class Storage:
    """The open database: Optuna's storage and the engine the project's tables live on."""

    url: str
    optuna: optuna.storages.RDBStorage
    engine: sa.Engine

    def insert_record(self, record: TrialRecord) -> int:
        with self.engine.begin() as conn:
            result = conn.execute(measurements.insert().values(**_row(record)))
        key = result.inserted_primary_key
        assert key is not None  # a one-row insert into a table with an autoincrement id
        record.id = key[0]
        return record.id

    def record(self, study_name: str, trial_number: int) -> TrialRecord | None:
        """One trial's record, token ids included."""
        query = measurements.select().where(
            measurements.c.study_name == study_name, measurements.c.trial_number == trial_number
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else _record(row)

    def records(self, study_name: str, *, token_ids: bool = True) -> list[TrialRecord]:
        """A study's records by trial number; ``token_ids=False`` leaves the ids (the bulk) unread."""
        columns = [c for c in measurements.columns if token_ids or c.name != "token_ids"]
        query = sa.select(*columns).where(measurements.c.study_name == study_name).order_by(measurements.c.trial_number)
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query)]

    def insert_boots(self, kind: BootKind, boots: list[BootRecord]) -> None:
        """Rows of a run of boots (``kind``: "promotion", "verification" or "calibration")."""
        if not boots:
            return
        rows = [
            {f: getattr(b, f) for f in _BOOT_FIELDS}
            | {"created_at": b.created_at or datetime.now(UTC), "load": [level.to_dict() for level in b.load]}
            for b in boots
        ]
        with self.engine.begin() as conn:
            conn.execute(BOOT_TABLES[kind].insert(), rows)

    def boots(self, kind: BootKind, study_name: str) -> list[BootRecord]:
        """A study's boots of that kind, in the order they were stored."""
        table = BOOT_TABLES[kind]
        query = table.select().where(table.c.study_name == study_name).order_by(table.c.id)
        with self.engine.connect() as conn:
            rows = [dict(row._mapping) for row in conn.execute(query)]
        return [
            BootRecord(
                **{k: v for k, v in row.items() if k in _BOOT_FIELDS}
                | {
                    "created_at": as_utc(row["created_at"]),
                    "node": row["node"] or {},
                    "provenance": row["provenance"] or {},
                    "timings": row["timings"] or {},
                    "telemetry": row["telemetry"] or {},
                    "load": tuple(LoadLevel.from_dict(level) for level in row["load"] or ()),
                }
            )
            for row in rows
        ]

    def close(self) -> None:
        self.optuna.remove_session()
        self.optuna.engine.dispose()


@dataclass
class StudyRecords:
    """One study's records in the database, as the ask/tell core's record book (``sweep.search``)."""

    storage: Storage
    study_name: str

    def get(self, number: int) -> TrialRecord | None:
        return self.storage.record(self.study_name, number)

    def add(self, record: TrialRecord) -> None:
        self.storage.insert_record(record)

    def all(self) -> list[TrialRecord]:
        return self.storage.records(self.study_name, token_ids=False)


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


def _backend(url: str) -> str:
    try:
        return make_url(url).get_backend_name()
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise StorageError(f"--storage {shown_url(url)!r}: not a database URL ({shown_url(str(exc))})") from None


def open_storage(url: str = DEFAULT_STORAGE_URL) -> Storage:
    """Open (creating if needed) the database at ``url``; any SQLAlchemy URL Optuna accepts."""
    backend = _backend(url)
    engine_kwargs = _prepare_sqlite(url) if backend == "sqlite" else {}
    try:
        rdb = optuna.storages.RDBStorage(connect_url(url), engine_kwargs=engine_kwargs)
    except (sa.exc.OperationalError, sa.exc.IntegrityError):
        # Another process (optuna-dashboard, a reader) initialised the same new file between
        # Optuna's checks and its CREATE TABLE / version row; now it exists, so this only reads.
        rdb = optuna.storages.RDBStorage(connect_url(url), engine_kwargs=engine_kwargs)
    if backend == "sqlite":
        sa.event.listen(rdb.engine, "connect", _on_sqlite_connect)
    METADATA.create_all(rdb.engine)
    _add_missing_columns(rdb.engine)
    return Storage(url=url, optuna=rdb, engine=rdb.engine)


def _add_missing_columns(engine: sa.Engine) -> None:
    """Bring a database written by an older version up to this schema: the columns added since, all
    nullable, so that its rows read back with nothing recorded there."""
    inspector = sa.inspect(engine)
    for table in METADATA.sorted_tables:
        have = {c["name"] for c in inspector.get_columns(table.name)}
        missing = [c for c in table.columns if c.name not in have]
        if not missing:
            continue
        with engine.begin() as conn:
            for column in missing:
                kind = column.type.compile(dialect=engine.dialect)
                conn.execute(sa.text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))


def open_existing(url: str) -> Storage:
    """``open_storage`` for a reader: a SQLite URL must name a file that exists."""
    if _backend(url) == "sqlite":
        database = make_url(url).database
        if not database or database == ":memory:" or not Path(database).expanduser().is_file():
            raise StorageError(
                f"--storage {shown_url(url)!r}: no database file there (run a sweep first, or pass --storage)"
            )
    return open_storage(url)
