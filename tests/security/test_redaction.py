"""Each place a secret could leak through on its way to a record, a file or the console: a worker's
error text, and a ``--storage`` URL with a password, in every message and command that repeats it."""

from __future__ import annotations

import secrets

import pytest
import ray

from errors import StorageError
from sweep.run import parse_args
from sweep.search._worker import error_text
from sweep.store import open_existing
from sweep.store._url import PASSWORD_ENV, connect_url, shown_url
from tests.stacks import stub_manifest


def test_a_workers_error_text_keeps_no_secret_of_the_manifest_or_the_drivers_environment(monkeypatch):
    inherited, own, flag = (f"{p}_{secrets.token_hex(10)}" for p in ("hf", "wk", "ak"))
    monkeypatch.setenv("HF_TOKEN", inherited)
    manifest = stub_manifest(WANDB_API_KEY=own)
    manifest = manifest.model_copy(update={"serve": [*manifest.serve, "--api-key", flag]})
    traceback = f"Traceback\n  File ...\nValueError: bad env {own} {inherited} for postgresql://u:pw-{own}@db/x"
    text = error_text(ray.exceptions.RayTaskError("run", traceback, ValueError("bad env")), manifest)
    assert text.endswith(" ... ValueError: bad env *** *** for postgresql://u:***@db/x"), text
    # A secret right where the one-line summary is cut (400 characters): scrubbed before the cut.
    long_line = "x" * 385 + f" {flag} tail"  # cut unscrubbed, it would keep the key's first characters
    cut = error_text(ray.exceptions.RayTaskError("run", long_line, ValueError()), manifest)
    assert flag[:6] not in cut and cut.endswith("x *** tail"), cut


def test_the_resume_hint_shows_a_storage_password_as_stars_and_says_so():
    password = secrets.token_hex(8)
    hint = parse_args(
        ["--study", "ctk", "--storage", f"postgresql://sweeper:{password}@db.internal/runs"]
    ).resume_command()
    command, note = hint.split("\n")
    assert password not in hint
    assert command == "python -m sweep.run --study ctk --storage 'postgresql://sweeper:***@db.internal/runs'"
    assert f"shown as ***: put it back, or leave it out of the URL and set {PASSWORD_ENV}" in note
    plain = parse_args(["--study", "ctk", "--storage", "postgresql://sweeper@db.internal/runs"]).resume_command()
    assert plain == "python -m sweep.run --study ctk --storage postgresql://sweeper@db.internal/runs"  # no note


def test_a_password_from_the_environment_is_used_to_connect_and_never_shown(monkeypatch):
    url = "postgresql://sweeper@db.internal:5432/runs"
    assert connect_url(url) == url
    monkeypatch.setenv(PASSWORD_ENV, "p@ss/w0rd")
    assert connect_url(url) == "postgresql://sweeper:p%40ss%2Fw0rd@db.internal:5432/runs"
    assert (
        connect_url("postgresql://sweeper:typed@db/runs") == "postgresql://sweeper:typed@db/runs"
    )  # the URL's own wins
    assert connect_url("sqlite:///runs/sweeps.db") == "sqlite:///runs/sweeps.db"  # no user: nothing to fill
    assert shown_url(connect_url(url)) == "postgresql://sweeper:***@db.internal:5432/runs"


def test_storage_errors_name_the_url_without_its_password(tmp_path):
    password = secrets.token_hex(8)
    for url in (
        f"sqlite:///{tmp_path}/none.db?password={password}",
        f"postgresql://u:{password}@h:port/db",
        f"u:{password}@db/runs",
    ):  # a file that is not there, a bad port, no scheme
        with pytest.raises(StorageError) as info:
            open_existing(url)
        assert password not in str(info.value) and "--storage " in str(info.value)
