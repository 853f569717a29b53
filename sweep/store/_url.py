"""A storage URL as it is shown and as it is connected to: its password never printed or written.

``shown_url`` is the only form of a ``--storage`` URL that a console line, a hint, an error or a
file may carry: its password is ``***`` (``engine.secrets``). A command printed for the user to run
again (the resume hint, ``best/README.md``'s verify command) says so with ``password_note``.

To keep a password off command lines altogether, leave it out of the URL
(``postgresql://sweeper@db/runs``) and set ``GEMMA_SWEEP_STORAGE_PASSWORD`` (``PASSWORD_ENV``):
``connect_url`` puts it in where a URL names a user and no password, so every printed command
works as it stands.
"""

from __future__ import annotations

import os

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from engine.secrets import REDACTED, redact_text

__all__ = ["PASSWORD_ENV", "connect_url", "password_note", "shown_url"]

PASSWORD_ENV = "GEMMA_SWEEP_STORAGE_PASSWORD"


def shown_url(url: str) -> str:
    """``url`` as it may be printed or written: its password (if any) as ``***``."""
    try:
        make_url(url)
    except (ArgumentError, ValueError):
        # Not a URL SQLAlchemy reads (a scheme left out, a bad port): what precedes an "@" may be credentials.
        return redact_text(f"{REDACTED}@{url.rpartition('@')[2]}" if "@" in url else url)
    return redact_text(url)


def password_note(url: str) -> str | None:
    """What a printed command that repeats ``url`` must add: None unless ``shown_url`` hid a password."""
    if shown_url(url) == url:
        return None
    return (
        f"(the storage URL's password is shown as {REDACTED}: put it back, or leave it out of the URL "
        f"and set {PASSWORD_ENV})"
    )


def connect_url(url: str) -> str:
    """``url`` with ``PASSWORD_ENV``'s password where it names a user and no password (else as given)."""
    password = os.environ.get(PASSWORD_ENV)
    if not password:
        return url
    parsed = make_url(url)
    if parsed.username is None or parsed.password is not None:
        return url
    return parsed.set(password=password).render_as_string(hide_password=False)
