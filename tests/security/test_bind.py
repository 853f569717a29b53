"""Every server the project starts binds 127.0.0.1 unless told otherwise.

The reference server is checked where the fuzz tests boot it (``tests/fuzz``), once per session;
a whole sweep's processes are checked in ``test_sweep.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from engine.config import REPO_ROOT
from engine.launch import EngineProcess, build_launch
from sweep.store import open_storage
from tests.security.kit import LOOPBACK, listeners, off_loopback
from tests.stacks import stub_manifest

# Runs in a fresh interpreter: the test process may already have joined another Ray cluster.
_RAY_SESSION = """
import json, os, sys
from pathlib import Path
import psutil
from sweep.search import ray_session
from tests.security.kit import listeners

temp = Path(sys.argv[1])
with ray_session(address=None, temp_dir=temp):
    import ray
    ray.get(ray.remote(lambda: os.getpid()).remote())  # a worker up, too
    # process_iter's cmdline is None for a process that ended meanwhile (another test's zombie): not ours
    ours = [
        p for p in psutil.process_iter(["cmdline"])
        if p.pid == os.getpid() or str(temp) in " ".join(p.info["cmdline"] or [])
    ]
    ours += psutil.Process().children(recursive=True)
    print(json.dumps([[l.name, l.ip, l.port] for l in listeners({p.pid: p for p in ours}.values())]))
"""


def test_a_local_ray_session_listens_on_loopback_only():
    # Ray turns 127.0.0.1 into the host's address and listens on every interface unless kept
    # to single-host mode: a private instance with token authentication off must not be reachable.
    temp = Path(tempfile.mkdtemp(prefix="gsbind", dir="/tmp"))  # short: Ray's socket paths
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RAY_TMPDIR": str(temp)}
    env.pop("RAY_ADDRESS", None)
    try:
        out = subprocess.run(
            [sys.executable, "-c", _RAY_SESSION, str(temp / "ray")],
            env=env,
            cwd=temp,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"gcs_server", "raylet"} <= {name for name, _, _ in found}, found
    assert [entry for entry in found if entry[1] not in LOOPBACK] == []


def test_an_engine_binds_the_host_its_launch_names_loopback_by_default(tmp_path):
    launch = build_launch(stub_manifest())
    assert launch.host == "127.0.0.1"
    with EngineProcess(launch, log_path=tmp_path / "engine.log", boot_timeout_s=30) as engine:
        found = listeners([psutil.Process(engine.pid)])
    assert [(sock.ip, sock.port) for sock in found] == [("127.0.0.1", launch.port)]


def test_the_dashboard_binds_loopback_by_default(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    open_storage(url).close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dashboards.serve", "--storage", url, "--port", "0", "--no-attach"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert re.search(r"http://127\.0\.0\.1:\d+/dashboard/", line), line
        found = listeners([psutil.Process(proc.pid)])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert found and off_loopback(found) == []


def test_a_bound_udp_socket_counts_as_listening_and_a_connected_one_does_not():
    # the kit's own rule, on real sockets of this process: a browser's DNS query is a client, not a listener.
    # Only these two sockets are judged: the test worker may already hold others (a Ray driver joined to
    # tests/sweep's multi-node cluster listens on every interface, as a driver its nodes reach must).
    held = {(sock.ip, sock.port) for sock in listeners([psutil.Process()])}
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as bound,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client,
    ):
        bound.bind(("0.0.0.0", 0))
        client.connect(("127.0.0.1", bound.getsockname()[1]))
        found = listeners([psutil.Process()])
        ports = {sock.port for sock in found}
        assert bound.getsockname()[1] in ports and client.getsockname()[1] not in ports
        new = [sock for sock in found if (sock.ip, sock.port) not in held]
        assert [sock.port for sock in off_loopback(new)] == [bound.getsockname()[1]]
