"""Opening the sweep's database as a reader: never create one by mistake."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

import sweep.verification  # noqa: F401  registers ``verifications`` on METADATA before opening
from engine.errors import ConfigError
from sweep.storage import Storage, open_storage

__all__ = ["open_existing"]


def open_existing(url: str) -> Storage:
    """``open_storage``, but a SQLite URL must name a file that exists (a typo is an error)."""
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigError(f"--storage {url!r}: not a database URL ({exc})") from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if not database or database == ":memory:" or not Path(database).expanduser().is_file():
            raise ConfigError(f"--storage {url!r}: no database file there (run a sweep first, or pass --storage)")
    return open_storage(url)
