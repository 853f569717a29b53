"""A sweep whose driver is SIGKILLed mid-trial and then resumed keeps no secret anywhere.

The stack echoes its whole env and argv (``STUB_ECHO_ALL``), as a careless stack would: a token
and a passphrase it inherits from the person running the sweep, an API key and a connection
string's password in the manifest's env, an ``--api-key`` and an ``Authorization: Bearer`` header
in its argv. The database URL carries a password too. The driver (``python -m sweep.run``, its
own local Ray) is SIGKILLed while the stack of the trial after the baseline is measuring, then the same command resumes
the study to its end. No file under the sweep's folder (the database, every trial's log, Ray's
logs, the exports), no table of the database and neither run's output holds any of the secrets.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.config import REPO_ROOT
from sweep.store._url import PASSWORD_ENV
from tests.stacks import stub_manifest, stub_profile
from tests.sweep.kit import stub_processes, write_study

STUDY = "resumestudy"
TOKENIZER_FOLDER = "/models/gemma-tokenizer"  # a folder, not a secret: kept as it is


@dataclass
class KilledAndResumed:
    folder: Path  # what the sweep wrote: runs/ (database, trial logs, Ray's logs, exports)
    secrets: dict[str, str]
    killed_log: str  # the log of the trial the driver died in, as the kill left it
    outputs: str  # both runs' stdout and stderr
    resumed: subprocess.CompletedProcess[str]


def _inputs(folder: Path, s: dict[str, str]) -> Path:
    folder.mkdir()
    manifest = stub_manifest(
        WANDB_API_KEY=s["manifest_key"],
        DB_CONN=f"Server=db;Uid=sweeper;Pwd={s['odbc']};",
        STUB_ECHO_ALL="1",
        STUB_ECHO_ENV="HF_TOKEN,WANDB_API_KEY",
        STUB_DECODE_STEP_S="0.02",  # seconds a trial: time to strike mid-trial
        GS_TEST_MARKER=str(folder.parent),
    ).to_json_dict()
    manifest["serve"] += ["--api-key", s["argv_key"], "--header", f"Authorization: Bearer {s['bearer']}"]
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return write_study(
        folder,
        manifest=folder / "manifest.json",
        profile=stub_profile(folder),
        name=STUDY,
        sampler="grid",
        space={"centroid_top_k": {"choices": [16, 32]}},
        promotion={"candidates": 0},
    )


def _wait(predicate, *, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


@pytest.fixture(scope="module")
def killed_and_resumed() -> Iterator[KilledAndResumed]:
    # Short and under /tmp: Ray's Unix sockets live in runs/ray and their paths must stay short.
    folder = Path(tempfile.mkdtemp(prefix="gsres", dir="/tmp"))
    out_dir = Path(tempfile.mkdtemp(prefix="gsresout"))
    s = {
        name: f"{prefix}{secrets.token_hex(12)}"
        for name, prefix in (
            ("hf_token", "hf_"),
            ("passphrase", "pp-"),
            ("manifest_key", "wk_"),
            ("odbc", "od-"),
            ("argv_key", "ak_"),
            ("bearer", "br_"),
            ("db_password", "db-"),
        )
    }
    study = _inputs(folder / "inputs", s)
    env = {
        **os.environ,
        "HF_TOKEN": s["hf_token"],
        "SSH_KEY_PASSPHRASE": s["passphrase"],
        "GEMMA_SWEEP_TOKENIZER": TOKENIZER_FOLDER,
        "HF_HUB_OFFLINE": "1",
    }
    env.pop(PASSWORD_ENV, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    # A password inside the URL (a query parameter SQLite ignores): it must be shown as *** everywhere.
    url = f"sqlite:///{folder}/runs/sweeps.db?password={s['db_password']}"
    command = [sys.executable, "-m", "sweep.run", "--study", str(study), "--storage", url]
    first_out = out_dir / "first.out"
    with first_out.open("w") as out:
        driver = subprocess.Popen(
            command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    def echoing_after_the_baseline() -> Path | None:
        assert driver.poll() is None, first_out.read_text()[-3000:]
        logs = sorted((folder / "runs" / STUDY).glob("trial-*/engine.log"))[1:]
        return next((log for log in logs if "stub: argv" in log.read_text()), None)

    try:
        # A trial after the baseline has booted and echoed everything: its stack is measuring now.
        killed = _wait(echoing_after_the_baseline, timeout_s=180, what="a second trial's stack to echo its env")
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        _wait(lambda: not stub_processes(str(folder)), timeout_s=60, what="the orphaned stack to be stopped")
        killed_log = killed.read_text()
        resumed = subprocess.run(
            command, cwd=folder, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
        )
        outputs = first_out.read_text() + resumed.stdout + resumed.stderr
        yield KilledAndResumed(folder=folder, secrets=s, killed_log=killed_log, outputs=outputs, resumed=resumed)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)


def test_the_resumed_sweep_finishes_the_trial_the_kill_interrupted(killed_and_resumed):
    run = killed_and_resumed.resumed
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "closed, left running by an earlier driver" in run.stdout
    assert "exports: " in run.stdout, run.stdout[-3000:]


def test_the_killed_trials_log_held_the_echo_scrubbed_as_it_was_written(killed_and_resumed):
    log = killed_and_resumed.killed_log
    for line in (
        "stub: env HF_TOKEN=***",
        "stub: env SSH_KEY_PASSPHRASE=***",
        "stub: env WANDB_API_KEY=***",
        "stub: env DB_CONN=Server=db;Uid=sweeper;Pwd=***;",
        "'Authorization: Bearer ***'",
        "'--api-key', '***'",
        f"stub: env GEMMA_SWEEP_TOKENIZER={TOKENIZER_FOLDER}",
    ):
        assert line in log, line
    assert [name for name, value in killed_and_resumed.secrets.items() if value in log] == []


def test_no_file_no_table_and_no_output_holds_a_secret(killed_and_resumed):
    run = killed_and_resumed
    written = [
        p
        for p in run.folder.rglob("*")
        if p.is_file() and not p.is_symlink() and "inputs" not in p.relative_to(run.folder).parts
    ]
    names = {p.name for p in written}
    assert {"sweeps.db", "engine.log", "trials.csv", "README.md"} <= names, sorted(names)
    assert any("runs/ray/session_" in str(p) for p in written)  # Ray's own logs were searched too
    found = [f"{p}: {name}" for p in written for name, value in run.secrets.items() if value.encode() in p.read_bytes()]
    assert found == []
    with sqlite3.connect(run.folder / "runs" / "sweeps.db") as db:
        dump = "\n".join(db.iterdump())
    assert "stub: env" in dump  # the stored log tails hold the echo, scrubbed
    assert [name for name, value in run.secrets.items() if value in dump] == []
    assert [name for name, value in run.secrets.items() if value in run.outputs] == []


def test_the_database_url_is_shown_with_its_password_as_stars_and_the_readme_says_so(killed_and_resumed):
    run = killed_and_resumed
    assert "runs/sweeps.db?password=***" in run.resumed.stdout  # the console's start and summary
    readme = (run.folder / "runs" / "exports" / STUDY / "best" / "README.md").read_text()
    assert "--storage sqlite:///" in readme and "sweeps.db?password=***" in readme and PASSWORD_ENV in readme
