"""engine.stackside on real processes: CPU affinity set before the stack starts, and the warm-up bridge in
front of the stub stack (which logs every request it serves)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine.bench import parse_counters
from engine.config import CHALLENGE_DATA_ENV, load_manifest, load_prompts, parse_knobs
from engine.launch import EngineProcess, build_launch
from engine.stackside import STACKWRAP, SpecError, format_cpus, free_port, parse_cpus, resolve_cpus, synthetic_prompts
from studies import STUDIES_DIR
from tests.stacks import STACKS_DIR

WRAPPER = STACKWRAP
STUB = [sys.executable, str(STACKS_DIR / "stub_server.py")]
ALLOWED = os.sched_getaffinity(0)
needs_two_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="pinning to one CPU of several needs two")


def _wrapper(*args: str) -> list[str]:
    return [sys.executable, "-I", str(WRAPPER), *args]


def test_cpu_lists_read_and_write_as_the_kernel_writes_them():
    assert parse_cpus("2-4,7") == {2, 3, 4, 7} and parse_cpus(" 0 ") == {0}
    assert format_cpus({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8" and format_cpus([3]) == "3"
    bad_lists = (("1-", "malformed"), ("a", "malformed"), ("4-2", "runs backwards"), ("", "malformed"))
    for bad, message in (*bad_lists, ("0-99999999999", "CPU 99999999999 is past any machine's")):
        with pytest.raises(SpecError, match=message):
            parse_cpus(bad)


def test_a_spec_resolves_against_the_cpus_this_process_may_use():
    assert resolve_cpus("none") is None
    assert resolve_cpus("0", allowed={0, 1}) == {0}
    with pytest.raises(SpecError, match=r"names CPU\(s\) 3,5-6, which this machine does not have .*allowed: 0-1"):
        resolve_cpus("3,5-6", allowed={0, 1})


def _fake_sysfs(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Two NUMA nodes and one GPU on node 1, and a FAKE nvidia-smi (no GPU here) that answers its bus id."""
    sysfs = tmp_path / "sys"
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        (sysfs / f"devices/system/node/node{node}").mkdir(parents=True)
        (sysfs / f"devices/system/node/node{node}/cpulist").write_text(cpus + "\n")
    (sysfs / "bus/pci/devices/0000:19:00.0").mkdir(parents=True)
    (sysfs / "bus/pci/devices/0000:19:00.0/numa_node").write_text("1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n# FAKE nvidia-smi for a test: one GPU, index 0, on PCI bus 19\necho '0, GPU-fake, 00000000:19:00.0'\n"
    )
    smi.chmod(0o755)
    return sysfs, {"PATH": str(bin_dir)}


def test_numa_is_the_node_of_the_visible_gpu_else_node_0(tmp_path):
    sysfs, env = _fake_sysfs(tmp_path)
    every = set(range(8))
    assert resolve_cpus("numa", allowed=every, env={**env, "CUDA_VISIBLE_DEVICES": "0"}, sysfs=sysfs) == {4, 5, 6, 7}
    assert resolve_cpus("numa", allowed=every, env={**env, "CUDA_VISIBLE_DEVICES": "GPU-fake"}, sysfs=sysfs) == {
        4,
        5,
        6,
        7,
    }
    assert resolve_cpus("numa", allowed=every, env={**env, "CUDA_VISIBLE_DEVICES": ""}, sysfs=sysfs) == {0, 1, 2, 3}
    assert resolve_cpus("numa", allowed=every, env={"PATH": str(tmp_path)}, sysfs=sysfs) == {0, 1, 2, 3}  # no smi
    with pytest.raises(SpecError, match="NUMA node has no CPU this process may use"):
        resolve_cpus("numa", allowed={0, 1}, env={**env, "CUDA_VISIBLE_DEVICES": "0"}, sysfs=sysfs)


@needs_two_cpus
def test_without_the_bridge_the_stack_replaces_the_wrapper_pinned():
    cpu = max(ALLOWED)
    show = "grep Cpus_allowed_list /proc/self/status; echo pid $$"
    proc = subprocess.Popen(
        _wrapper("--listen", "127.0.0.1:1", "--cpus", str(cpu), "--", "sh", "-c", show),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"Cpus_allowed_list:\t{cpu}\n" in out
    assert f"pid {proc.pid}\n" in out  # exec'd: the stack is the wrapper's own process, no proxy
    assert f"pinned to CPU(s) {cpu}" in err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("4096", r"--cpus '4096': CPU list '4096' names CPU\(s\) 4096, which this machine does not have"),
        ("1-x", r"--cpus '1-x': CPU list '1-x' is malformed"),
    ],
)
def test_a_bad_spec_exits_2_before_the_stack_starts(tmp_path, spec, message):
    marker = tmp_path / "started"
    done = subprocess.run(
        _wrapper("--listen", "127.0.0.1:1", "--cpus", spec, "--", "touch", str(marker)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and not marker.exists()
    assert len(re.findall(message, done.stderr)) == 1, done.stderr


def _bridge(tmp_path: Path, *, prompts: int, stub_env: dict[str, str], new_session: bool = True) -> tuple:
    log = tmp_path / "requests.jsonl"
    public, inner = free_port(), free_port()
    env = {**os.environ, "PORT": str(inner), "SERVED_MODEL_NAME": "stub", "STUB_REQUEST_LOG": str(log), **stub_env}
    args = ["--listen", f"127.0.0.1:{public}", "--upstream-port", str(inner), "--warmup-prompts", str(prompts)]
    proc = subprocess.Popen(
        _wrapper(*args, "--warmup-max-tokens", "3", "--warmup-seed", "7", "--model", "stub", "--", *STUB),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )
    return proc, public, log


def _first_answer(proc: subprocess.Popen, public: int, *, timeout_s: float = 30.0) -> float | None:
    """When GET /v1/models on the public port first answered 200 (time.time()); None if the wrapper ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{public}/v1/models", timeout=2).status_code == 200:
                return time.time()
        except httpx.HTTPError:
            pass  # not listening: the warm-up is not done
        time.sleep(0.02)
    return None


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_bridge_sends_its_prompts_before_the_public_port_answers(tmp_path):
    proc, public, log = _bridge(
        tmp_path, prompts=6, stub_env={"STUB_BOOT_DELAY_S": "0.5", "STUB_DECODE_STEP_S": "0.02"}
    )
    try:
        ready = _first_answer(proc, public)
        assert ready is not None, proc.stderr.read() if proc.stderr else ""
        warm = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(warm) == 6 and all(r["end"] <= ready for r in warm)  # every warm-up answered before the port
        assert [r["body"]["messages"][0]["content"] for r in warm] == synthetic_prompts(6, 7)
        assert {(r["body"]["max_tokens"], r["body"]["model"], r["body"]["temperature"]) for r in warm} == {
            (3, "stub", 0.0)
        }
        # then the public port is the stack's: a request goes through the bridge and back
        body = {"model": "stub", "messages": [{"role": "user", "content": "after"}], "max_tokens": 5}
        answer = httpx.post(f"http://127.0.0.1:{public}/v1/chat/completions", json=body, timeout=10).json()
        assert answer["usage"]["completion_tokens"] == 5
        assert len(log.read_text().splitlines()) == 7
        os.killpg(proc.pid, signal.SIGTERM)  # the group's stop, as the launcher sends it
        proc.wait(timeout=20)
    finally:
        _stop(proc)
    assert proc.returncode == 128 + signal.SIGTERM  # the stack's own end: killed by TERM


def test_a_stack_that_dies_during_the_warm_up_fails_the_wrapper_at_once(tmp_path):
    proc, public, _ = _bridge(tmp_path, prompts=5, stub_env={"STUB_FAULT": "crash_mid", "STUB_CRASH_AFTER": "2"})
    try:
        assert _first_answer(proc, public) is None  # the public port never answered
        proc.wait(timeout=10)
    finally:
        _stop(proc)
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode != 0
    assert "the stack exited with status 1 during warm-up request 3 of 5; stopping the stack" in err


@pytest.mark.parametrize("new_session", [False, True], ids=["in-the-harness-group", "leading-its-group"])
def test_a_stop_of_the_wrapper_alone_ends_the_stack_and_its_child(tmp_path, new_session):
    # A harness may start `python serve.py` in its own process group (the stack then gets a group of its own,
    # which the wrapper forwards the stop to) or in a session of its own (the stack stays in the wrapper's
    # group, which the wrapper passes a stop to the wrapper alone on to); either way a TERM to the pid the
    # harness started must end the stack and the child it spawned.
    proc, public, _ = _bridge(tmp_path, prompts=1, stub_env={"STUB_CHILD": "1"}, new_session=new_session)
    try:
        assert _first_answer(proc, public) is not None
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL) if new_session else proc.kill()
            proc.wait()
    err = proc.stderr.read() if proc.stderr else ""
    child = int(err.split("stub: child pid ")[1].split()[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists(), "the stack's child outlived the stop"
    assert proc.returncode == 128 + signal.SIGTERM


def _benchmark_texts() -> set[str]:
    paths = sorted((STUDIES_DIR / "data").glob("prompts_*.json"))
    folder = os.environ.get(CHALLENGE_DATA_ENV)
    if folder:
        paths.append(Path(folder) / "eval_prompts_sharegpt.json")
    return {p.text for path in paths for p in load_prompts(path)}


def test_warm_up_prompts_are_never_a_benchmark_prompt():
    benchmark = _benchmark_texts()
    assert len(benchmark) > 100
    for seed in (0, 7, 42):
        for text in synthetic_prompts(256, seed):
            assert text not in benchmark
            assert not any(text in b or b in text for b in benchmark)
    assert synthetic_prompts(4, 1) == synthetic_prompts(4, 1) != synthetic_prompts(4, 2)  # the seed decides


@pytest.mark.slow
def test_the_reference_stack_has_served_the_warm_up_when_its_port_first_answers(tmp_path):
    # as shipped, the reference stack warms itself before it listens (WARMUP_BRIDGE=1): the launcher adds no bridge
    shipped = load_manifest("reference")
    assert "stackwrap" not in " ".join(build_launch(shipped, parse_knobs(shipped, {"warmup_prompts": 4})).argv)
    # without that, the launcher's bridge warms it over HTTP before the public port opens
    env = {k: v for k, v in shipped.env.items() if k != "WARMUP_BRIDGE"}
    manifest = shipped.model_copy(update={"env": env})
    launch = build_launch(manifest, parse_knobs(manifest, {"warmup_prompts": 4}))
    with EngineProcess(launch, log_path=tmp_path / "engine.log", boot_timeout_s=300):
        # the first thing the public port tells anyone: what the stack served before it opened
        served = parse_counters(
            httpx.get(f"{launch.base_url}/metrics", timeout=10).text,
            ("vllm:request_success_total", "vllm:generation_tokens_total"),
        )
        body = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        answer = httpx.post(f"{launch.base_url}/v1/chat/completions", json=body, timeout=120).json()
    assert served == {"vllm:request_success_total": 4.0, "vllm:generation_tokens_total": 4.0}  # 4 of 1 token
    assert answer["usage"]["completion_tokens"] == 4  # then it serves through the bridge
    assert "stackwrap: warm-up of 4 requests done" in (tmp_path / "engine.log").read_text()
