"""GPU hygiene between trials, against a stand-in ``nvidia-smi`` (this machine has no GPU).

The stand-in is test kit, labelled as such: a script on PATH that answers nvidia-smi's two CSV
queries from a JSON file the test rewrites, so the GPU's memory and processes are whatever the
test says. Everything else (the waits, the trial, the stub stack) is real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime

import pytest

from engine.bench import run_trial
from engine.config import parse_knobs
from engine.host import FREE_FLOOR_MIB, gpu_uuids, held_after_stop, visible_gpus, wait_until_free
from engine.launch import OWNER_ENV
from engine.stacks import ADAPTERS, boot_phases
from errors import EngineBootError
from tests.stacks import stub_manifest

FAKE_SMI = """#!{python}
# A stand-in for nvidia-smi (test kit): answers --query-gpu and --query-compute-apps from $FAKE_SMI_STATE.
import json, os, sys
state = json.load(open(os.environ["FAKE_SMI_STATE"]))
query = next(a for a in sys.argv if a.startswith("--query"))
for gpu in state:
    if query == "--query-gpu=uuid":
        print(f"GPU-{{gpu['index']}}")
    elif query.startswith("--query-gpu"):
        print(f"{{gpu['index']}}, GPU-{{gpu['index']}}, {{gpu['used']}}, 143771")
    else:
        for pid in gpu.get("pids", []):
            print(f"GPU-{{gpu['index']}}, {{pid}}")
"""


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """Set the stand-in GPU's state: ``smi(used_mib, pids=[...])``."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text(FAKE_SMI.format(python=sys.executable))
    script.chmod(0o755)
    state = tmp_path / "smi.json"
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_STATE", str(state))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")

    def set_state(used: int, pids: tuple[int, ...] = ()) -> None:
        state.write_text(json.dumps([{"index": "0", "used": used, "pids": list(pids)}]))

    set_state(4)
    return set_state


def test_the_gpus_are_the_ones_cuda_visible_devices_names():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,3"}) == ["1", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == [] and visible_gpus({}) == []


def test_a_card_is_named_by_its_uuid_whichever_machine_lends_it(smi):
    assert gpu_uuids(["0"]) == gpu_uuids(None) == ["GPU-0"]
    assert gpu_uuids([]) == []


def test_a_free_gpu_boots_at_once_and_a_busy_one_after_it_frees(smi):
    assert wait_until_free(["0"], owner_env=OWNER_ENV, timeout_s=5, poll_s=0.1) < 1.0
    smi(30_000, pids=(os.getpid(),))  # memory of a process that is no engine of ours: wait for it
    threading.Timer(1.0, smi, args=(4,)).start()
    waited = wait_until_free(["0"], owner_env=OWNER_ENV, timeout_s=10, poll_s=0.1)
    assert 0.9 < waited < 5


def test_a_gpu_that_stays_held_is_a_clear_boot_failure(smi):
    smi(30_000, pids=(4242,))
    began = time.monotonic()
    with pytest.raises(
        EngineBootError, match=r"not free after 1 s \(GPU 0: 30000 of 143771 MiB in use, processes \[4242\]\)"
    ):
        wait_until_free(["0"], owner_env=OWNER_ENV, timeout_s=1, poll_s=0.1)
    assert time.monotonic() - began < 5


def test_an_engine_of_this_sweep_on_the_gpu_is_refused_at_once(smi):
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, OWNER_ENV: "12345"}
    )
    try:
        smi(2_000, pids=(other.pid,))
        with pytest.raises(
            EngineBootError,
            match=rf"GPU 0 is in use by engine pid {other.pid} of this sweep "
            r"\(started by worker pid 12345\)",
        ):
            wait_until_free(["0"], owner_env=OWNER_ENV, timeout_s=30, poll_s=0.1)
    finally:
        other.kill()
        other.wait()


def test_memory_left_after_a_stop_is_reported_and_a_release_is_waited_for(smi):
    smi(FREE_FLOOR_MIB + 10)
    assert held_after_stop(["0"], wait_s=0.3, poll_s=0.1) == {"0": FREE_FLOOR_MIB + 10}
    threading.Timer(0.3, smi, args=(4,)).start()
    assert held_after_stop(["0"], wait_s=5, poll_s=0.1) == {}


def test_a_trial_waits_for_the_gpu_and_names_what_held_it(smi, tmp_path, stub_profile):
    manifest = stub_manifest()
    smi(50_000, pids=(999,))
    profile = stub_profile.with_overrides({"gpu_free_timeout_s": 1}, source="test")
    outcome = run_trial(manifest, parse_knobs(manifest, {}), profile, workdir=tmp_path / "busy")
    assert outcome.status == "failed" and "the GPU was not free after 1 s" in outcome.reason
    assert not (tmp_path / "busy" / "engine.log").exists()  # nothing booted
    smi(4)
    outcome = run_trial(manifest, parse_knobs(manifest, {}), stub_profile, workdir=tmp_path / "free")
    assert outcome.status == "complete" and outcome.timings_s["gpu_wait"] < 1.0
    assert "gpu_held_after_stop_mib" not in outcome.node and outcome.node["cuda_visible_devices"] == "0"


VLLM_BOOT_LOG = """\
[gemma-sweep] starting in /srv: ['python', '-m', 'vllm.entrypoints.openai.api_server']
(APIServer pid=11) INFO 12-01 10:00:20 [api_server.py:1] vLLM API server version 0.24.0
(EngineCore pid=12) INFO 12-01 10:00:41 [default_loader.py:431] Loading weights took 0.61 seconds
(EngineCore pid=12) INFO 12-01 10:00:41 [gpu_model_runner.py:5256] Model loading took 0.52 GiB memory and 1.234567 seconds
(EngineCore pid=12) INFO 12-01 10:00:47 [backends.py:1149] Dynamo bytecode transform time: 5.91 s
(EngineCore pid=12) INFO 12-01 10:00:52 [backends.py:293] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 1.250 s
(EngineCore pid=12) INFO 12-01 10:00:53 [monitor.py:20] torch.compile took 7.80 s in total
(EngineCore pid=12) INFO 12-01 10:00:55 [gpu_model_runner.py:4000] Graph capturing finished in 1 secs, took 0.06 GiB
(EngineCore pid=12) INFO 12-01 10:00:55 [core.py:326] init engine (profile, create kv cache, warmup model) took 3.40 s (compilation: 7.80 s)
(APIServer pid=11) INFO 12-01 10:01:02 [api_server.py:581] Starting vLLM server on http://127.0.0.1:8000
"""


def test_vllm_boot_phases_are_read_from_its_log():
    phases = boot_phases(VLLM_BOOT_LOG, ADAPTERS["vllm"], started=datetime(2026, 12, 1, 10, 0, 1, 500000))
    assert phases == {
        "boot_first_log": 19.0,
        "boot_weights": 0.61,
        "boot_model_load": 1.234567,
        "boot_dynamo": 5.91,
        "boot_compile_cache_load": 1.25,
        "boot_torch_compile": 7.8,
        "boot_cuda_graphs": 1.0,
        "boot_engine_init": 3.4,
    }
    assert boot_phases("stub: serving 'stub' on 127.0.0.1:8000", ADAPTERS["vllm"]) == {}  # a log naming no phase
    assert boot_phases(VLLM_BOOT_LOG, ADAPTERS["openai"]) == {}  # a stack whose adapter reads no phase
