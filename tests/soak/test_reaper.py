"""A worker killed mid-trial leaves no process of its engine behind, its engine's children included.

Found by the soak: when Ray kills a worker (``ray.kill``, or its driver died), the raylet also
kills the worker's direct children, the engine's leader and, before the fix, the reaper that
was to stop the engine's process group. The engine's own children (vLLM's engine core and
workers; here the stub's child that ignores TERM) then ran on, holding memory and GPUs.
Found again by the soak (2026-12-01): a worker killed within the reaper's half-second poll of
its engine's start left the engine unseen, so unstopped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from engine.config import REPO_ROOT
from engine.host import group_members

# Runs in a fresh interpreter with a private local Ray: the test process may have joined another.
_KILL_MID_TRIAL = """
import json, sys, time
from pathlib import Path
import ray
from engine.config import parse_knobs
from sweep.search import ray_session
from sweep.search import TrialWorker
from tests.stacks import stub_manifest, stub_profile

folder, pause_s = Path(sys.argv[1]), float(sys.argv[2])
manifest = stub_manifest(STUB_FAULT="ignore_term", STUB_CHILD="1", STUB_DECODE_STEP_S="0.05")
profile = stub_profile(folder, num_prompts=8, output_len=64)  # ~30 s of TPS run: killed well before its end
with ray_session(address=None, temp_dir=folder / "ray"):
    worker = TrialWorker.remote()
    run = worker.run.remote(manifest, parse_knobs(manifest, {}), profile, workdir=str(folder / "trial"),
                            cache_dir=str(folder / "cache"))
    log = folder / "trial" / "engine.log"
    deadline = time.monotonic() + 120
    while "stub: child pid" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(pause_s)
    ray.kill(worker, no_restart=True)
    print(json.dumps(log.read_text()))
"""


# 1 s: the reaper's poll has seen the engine; 0: killed as the stack starts, most likely before
# the poll saw it (then only the owner mark in the engine's env finds it).
@pytest.mark.parametrize("pause_s", [1.0, 0.0])
def test_a_worker_killed_mid_trial_leaves_no_engine_process(pause_s):
    folder = Path(tempfile.mkdtemp(prefix="gsreap", dir="/tmp"))  # short: Ray's socket paths
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RAY_TMPDIR": str(folder)}
    try:
        out = subprocess.run(
            [sys.executable, "-c", _KILL_MID_TRIAL, str(folder), str(pause_s)],
            env=env,
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-3000:]
    log = json.loads(out.stdout.strip().splitlines()[-1])
    child = int(log.split("stub: child pid ")[1].split()[0])
    try:
        pgid = os.getpgid(child)  # the engine's group: the stub leads it, its child is a member
    except ProcessLookupError:
        return  # stopped already
    deadline = time.monotonic() + 30  # the reaper's TERM grace (10 s), then KILL
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = group_members(pgid)
    for pid in left:  # never leave them running, whatever the verdict
        os.kill(pid, 9)
    assert left == [], f"the engine's group {pgid} outlived its killed worker: {left}"
