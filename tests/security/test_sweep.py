"""One real sweep (``python -m sweep.run``, its own local Ray, the stub stack, exports), watched
for the security basics: secrets reach the stack and are written nowhere, nothing goes through a
shell, nothing listens beyond loopback.

Secrets, each a fresh random value: ``HF_TOKEN``, ``GITHUB_PAT`` and a password inside
``DATABASE_URL`` in the environment of the person running the sweep, ``WANDB_API_KEY`` in the
manifest's own env and an ``--api-key`` in its argv. The stub prints a digest of two it got, and
(``STUB_ECHO_ALL``) its whole env and argv, values and all, as a careless stack would.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.config import REPO_ROOT
from engine.secrets import REDACTED
from sweep.store import open_storage
from tests.security.kit import Listener, audit_env, listeners, off_loopback, shell_spawns
from tests.soak.chaos import MARKER_ENV, marked_processes
from tests.stacks import stub_manifest, stub_profile
from tests.sweep.kit import write_study

STUDY = "secretstudy"


@dataclass
class SweepRun:
    folder: Path  # the sweep's working folder: what it writes goes to runs/ (database, logs, exports, Ray)
    hf_token: str
    api_key: str
    others: tuple[str, ...]  # the GitHub token, the database password, the argv key
    code: int
    output: str
    audit_log: Path
    seen_listening: list[Listener]


def _write_inputs(inputs: Path, api_key: str, argv_key: str) -> Path:
    inputs.mkdir()
    manifest = stub_manifest(
        WANDB_API_KEY=api_key, STUB_ECHO_ENV="HF_TOKEN,WANDB_API_KEY", STUB_ECHO_ALL="1"
    ).to_json_dict()
    manifest["serve"] += ["--api-key", argv_key]  # the stub ignores its arguments; it echoes them
    manifest_path = inputs / "manifest.json"
    manifest_path.write_text(json.dumps(manifest, indent=2))
    # repeats allowed: the grid's point 32 (the baseline's knobs) boots again, so every trial is a stack that saw them
    return write_study(
        inputs,
        manifest=manifest_path,
        profile=stub_profile(inputs),
        name=STUDY,
        sampler="grid",
        repeats="allow",
        space={"centroid_top_k": {"choices": [16, 32]}},
    )


@pytest.fixture(scope="module")
def sweep_run() -> Iterator[SweepRun]:
    # Short and under /tmp: Ray's Unix sockets live in runs/ray and their paths must stay short.
    folder = Path(tempfile.mkdtemp(prefix="gssec", dir="/tmp"))
    audit_dir = Path(tempfile.mkdtemp(prefix="gsaudit"))
    hf_token, api_key = f"hf_{secrets.token_hex(16)}", f"wk_{secrets.token_hex(16)}"
    others = (f"ghp_{secrets.token_hex(16)}", f"pw{secrets.token_hex(12)}", f"ak_{secrets.token_hex(16)}")
    study = _write_inputs(folder / "inputs", api_key, others[2])  # the user's files: they hold the secrets
    audit_log = audit_dir / "spawns.jsonl"
    env = {
        **os.environ,
        "HF_TOKEN": hf_token,
        "GITHUB_PAT": others[0],
        "DATABASE_URL": f"postgresql://sweeper:{others[1]}@db.internal:5432/runs",
        MARKER_ENV: str(folder),
        "HF_HUB_OFFLINE": "1",
        **audit_env(audit_log),
    }
    env["PYTHONPATH"] += os.pathsep + str(REPO_ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweep.run", "--study", str(study)],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    seen: set[Listener] = set()
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            # Every process of the sweep carries the marker: driver, Ray's own, workers, stacks.
            seen |= set(listeners(marked_processes(str(folder))))
            time.sleep(0.3)
        output = proc.communicate(timeout=5)[0].decode(errors="replace") if proc.poll() is not None else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        yield SweepRun(
            folder=folder,
            hf_token=hf_token,
            api_key=api_key,
            others=others,
            code=proc.returncode,
            output=output,
            audit_log=audit_log,
            seen_listening=sorted(seen, key=lambda sock: (sock.pid, sock.port)),
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(audit_dir, ignore_errors=True)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def test_the_sweep_completes(sweep_run):
    assert sweep_run.code == 0, sweep_run.output[-3000:]
    assert "exports: " in sweep_run.output, sweep_run.output[-3000:]
    assert "3 complete, 0 failed" in sweep_run.output


def test_both_secrets_reach_the_stack(sweep_run):
    logs = [p.read_text() for p in sweep_run.folder.glob(f"runs/{STUDY}/trial-*/engine.log")]
    assert len(logs) == 3
    for log in logs:
        assert f"stub: env HF_TOKEN sha256 {_digest(sweep_run.hf_token)}" in log
        assert f"stub: env WANDB_API_KEY sha256 {_digest(sweep_run.api_key)}" in log


def test_no_file_the_sweep_wrote_holds_a_secret(sweep_run):
    written = [p for p in sweep_run.folder.rglob("*") if "inputs" not in p.relative_to(sweep_run.folder).parts]
    files = [p for p in written if p.is_file() and not p.is_symlink()]
    names = {p.name for p in files}
    # What must have been searched: the database (and its WAL), trial logs, exports, Ray's logs.
    assert {"sweeps.db", "engine.log", "trials.csv", "pareto.html"} <= names, sorted(names)
    assert any("runs/ray/session_" in str(p) and p.suffix in (".log", ".out", ".err") for p in files)
    every = (sweep_run.hf_token, sweep_run.api_key, *sweep_run.others)
    found = [f"{p}: {secret}" for p in files for secret in every if secret.encode() in p.read_bytes()]
    assert found == []
    for secret in every:
        assert secret not in sweep_run.output
    for secret in every[:4]:  # the test's own spawn log records argv as given, the argv key with it
        assert secret not in sweep_run.audit_log.read_text()


def test_the_careless_stack_did_print_them_and_its_kept_log_holds_none(sweep_run):
    log = next(sweep_run.folder.glob(f"runs/{STUDY}/trial-*/engine.log")).read_text()
    assert "stub: env GITHUB_PAT=***" in log and "stub: env WANDB_API_KEY=***" in log  # echoed, then scrubbed
    assert "postgresql://sweeper:***@db.internal:5432/runs" in log and "'--api-key', '***'" in log


def test_the_stored_env_keeps_the_secret_name_with_a_redacted_value(sweep_run):
    storage = open_storage(f"sqlite:///{sweep_run.folder}/runs/sweeps.db")
    try:
        rows = storage.records(STUDY)
    finally:
        storage.close()
    assert len(rows) == 3 and all(row.status == "complete" for row in rows)
    assert all(row.env["WANDB_API_KEY"] == REDACTED for row in rows)
    assert all("HF_TOKEN" not in row.env for row in rows)  # never part of the manifest's env


def test_no_process_of_the_sweep_went_through_a_shell(sweep_run):
    spawned = [json.loads(line) for line in sweep_run.audit_log.read_text().splitlines()]
    programs = {Path(r["executable"] or r["argv"][0]).name for r in spawned}
    # The log is only meaningful if it saw the sweep's own spawns: reapers and stacks.
    assert any("engine.reaper" in r["argv"] for r in spawned), programs
    assert any(any("stub_server.py" in a for a in r["argv"]) for r in spawned), programs
    assert shell_spawns(sweep_run.audit_log) == []


def test_every_process_of_the_sweep_listens_on_loopback_only(sweep_run):
    names = {listener.name for listener in sweep_run.seen_listening}
    assert {"gcs_server", "raylet", "python"} <= names, names  # Ray's servers and the stacks were seen
    assert off_loopback(sweep_run.seen_listening) == []
