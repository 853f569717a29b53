"""EngineProcess against real processes: the stub stack and plain Python one-liners."""

import re
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from engine.config import parse_manifest
from engine.host import group_members
from engine.launch import EngineProcess, build_launch, stop_groups
from errors import EngineBootError
from tests.stacks import stub_manifest


def engine_for(tmp_path, manifest, **kwargs):
    launch = build_launch(manifest)
    return EngineProcess(launch, log_path=tmp_path / f"engine-{launch.port}.log", **kwargs)


def port_is_free(port):
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do (TIME_WAIT)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def child_pid(engine):
    match = re.search(r"stub: child pid (\d+)", engine.log_path.read_text())
    return int(match.group(1)) if match else None


def alive(pid):
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_boots_serves_and_stops_leaving_the_port_free(tmp_path):
    with engine_for(tmp_path, stub_manifest()) as engine:
        response = httpx.get(f"{engine.base_url}/v1/models")
        assert response.json()["data"][0]["id"] == "stub"
        port, pgid = engine.launch.port, engine.pid
    assert engine.returncode is not None
    assert group_members(pgid) == []
    assert port_is_free(port)


def test_a_serve_argv_that_exits_at_once_fails_within_seconds_with_its_log_tail(tmp_path):
    engine = engine_for(tmp_path, stub_manifest(STUB_FAULT="boot_exit"), boot_timeout_s=120)
    began = time.monotonic()
    with pytest.raises(EngineBootError, match=r"exited with status 1 during boot") as info:
        with engine:
            pass
    assert time.monotonic() - began < 10  # not the 120 s boot timeout
    assert "simulated boot failure" in info.value.log_tail


def test_a_missing_executable_is_a_boot_error(tmp_path):
    m = parse_manifest(
        {"name": "gone", "model_id": "m", "served_model_name": "s", "serve": ["/no/such/binary", "--port", "{port}"]}
    )
    with pytest.raises(EngineBootError, match=r"cannot start '/no/such/binary'"):
        engine_for(tmp_path, m).start()


def test_a_server_that_never_becomes_ready_fails_at_the_timeout_and_its_group_is_gone(tmp_path):
    engine = engine_for(tmp_path, stub_manifest(STUB_FAULT="never_ready", STUB_CHILD="1"), boot_timeout_s=2)
    began = time.monotonic()
    with pytest.raises(EngineBootError, match=r"was not ready after 2 s .*process group was stopped"):
        with engine:
            pass
    assert 2 <= time.monotonic() - began < 10
    child = child_pid(engine)
    assert child is not None  # the stub did spawn a child into the group
    assert group_members(engine.pid) == []
    assert not alive(child)


def test_a_server_that_ignores_term_is_killed(tmp_path):
    engine = engine_for(tmp_path, stub_manifest(STUB_FAULT="ignore_term", STUB_CHILD="1"), stop_grace_s=1.0)
    with engine:
        deadline = time.monotonic() + 5
        while child_pid(engine) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        child = child_pid(engine)
    assert engine.returncode == -9  # SIGKILL, not TERM
    assert "still running 1 s after TERM: KILL" in engine.log_path.read_text()
    assert group_members(engine.pid) == []
    assert not alive(child)


def test_stop_groups_terms_every_group_and_kills_only_those_that_outlive_their_grace():
    # The one TERM -> KILL rule, for an engine's own stop and for the reaper's.
    ignore_term = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"
    )
    polite = subprocess.Popen(
        [sys.executable, "-c", "import time; print(flush=True); time.sleep(60)"],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    stubborn = subprocess.Popen([sys.executable, "-c", ignore_term], start_new_session=True, stdout=subprocess.PIPE)
    for process in (polite, stubborn):
        process.stdout.readline()  # started, its signal handler set
    killed = []
    left = stop_groups(
        [polite.pid, stubborn.pid], grace_s=1.0, reap=lambda: [polite.poll(), stubborn.poll()], on_kill=killed.extend
    )
    assert left == [] and killed == [stubborn.pid]
    assert (polite.wait(), stubborn.wait()) == (-15, -9)
    assert stop_groups([polite.pid], grace_s=1.0) == []  # a group with no live member: nothing to signal


def test_two_engines_started_at_once_get_different_ports_and_both_serve(tmp_path):
    engines = [engine_for(tmp_path, stub_manifest()) for _ in range(2)]
    errors = []

    def boot(engine):
        try:
            engine.start()
            engine.wait_ready()
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=boot, args=(e,)) for e in engines]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert engines[0].launch.port != engines[1].launch.port
        for engine in engines:
            assert httpx.get(f"{engine.base_url}/v1/models").status_code == 200
    finally:
        for engine in engines:
            engine.stop()


def test_a_wrong_served_model_name_is_reported_at_boot(tmp_path):
    m = stub_manifest(SERVED_MODEL_NAME="other")
    with pytest.raises(EngineBootError, match=r"serves \['other'\], not the manifest's served_model_name 'stub'"):
        with engine_for(tmp_path, m):
            pass


def test_a_taken_port_is_refused_before_starting(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        launch = build_launch(stub_manifest(), port=port)
        with pytest.raises(EngineBootError, match=rf"port {port} on 127.0.0.1 is already in use"):
            EngineProcess(launch, log_path=tmp_path / "e.log").start()


def test_stop_is_idempotent_and_safe_before_start(tmp_path):
    engine = engine_for(tmp_path, stub_manifest())
    assert engine.stop() == 0.0
    with engine:
        pass
    assert engine.stop() == 0.0
