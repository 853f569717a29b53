"""engine.host's telemetry and client placement on real stacks: a stack pinned to one CPU runs only there (its
/proc says so, and so does the telemetry its measurement records), the timing client keeps off the
stack's CPUs, and the GPU's readings come from nvidia-smi where one is present (a FAKE one here:
this machine has no GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from engine.bench import measure, run_trial
from engine.config import is_client_rule, load_manifest, parse_knobs
from engine.host import Telemetry, client_cpus, group_members, per_cpu_times, pinned, thread_cpus_allowed
from engine.launch import EngineProcess, build_launch
from engine.measurement import Stages
from engine.stacks import ADAPTERS
from engine.stackside import format_cpus, parse_cpus
from errors import StudySpecError
from tests.stacks import stub_manifest, stub_profile

VLLM, REFERENCE = ADAPTERS["vllm"], ADAPTERS["reference"]
ALLOWED = os.sched_getaffinity(0)
CPU = max(ALLOWED)  # core 1 of a 2-core machine
needs_two_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="pinning to one CPU of several needs two")


def _tasks_allowed(pgid: int) -> dict[int, set[int]]:
    """Every thread of every process of the group, read from /proc by the test itself."""
    out = {}
    for pid in group_members(pgid):
        for tid in os.listdir(f"/proc/{pid}/task"):
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            line = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
            out[int(tid)] = parse_cpus(line.split(":", 1)[1])
    return out


def _check_ran_only_on(telemetry: dict, cpu: int) -> None:
    assert telemetry["affinity"]["stack"] == str(cpu)
    assert telemetry["stack"]["threads_ran"] >= 1 and telemetry["stack"]["ran_on"] == {str(cpu): 1.0}
    assert telemetry["threads"] and all(set(t["ran_on"]) == {str(cpu)} for t in telemetry["threads"])
    assert telemetry["stack"]["migrations"] is not None  # this kernel keeps se.nr_migrations


@needs_two_cpus
@pytest.mark.parametrize("bridge", ["0", "3"], ids=["exec", "bridge"])
def test_a_stub_pinned_to_one_cpu_runs_only_there_and_its_telemetry_says_so(tmp_path, bridge):
    profile = stub_profile(tmp_path, num_prompts=6, output_len=48)
    manifest = stub_manifest(
        CPU_AFFINITY=str(CPU), STUB_CHILD="1", WARMUP_NUM_PROMPTS=bridge, STUB_DECODE_STEP_S="0.003"
    )
    launch = build_launch(manifest, parse_knobs(manifest, {}))
    prompts, records = profile.load_data()
    with EngineProcess.for_profile(launch, profile, log_path=tmp_path / "engine.log") as engine:
        assert engine.pid is not None
        processes = group_members(engine.pid)
        with httpx.Client(base_url=launch.base_url) as client:  # an open connection: its serving threads live
            assert client.get("/v1/models").status_code == 200
            allowed = _tasks_allowed(engine.pid)
            resident_mib = sum(psutil.Process(pid).memory_info().rss for pid in processes) / 2**20
        with Telemetry(engine.pid) as probe:
            m = measure(
                launch.base_url,
                model="stub",
                stack=VLLM,
                profile=profile,
                prompts=prompts,
                records=records,
                probe=probe,
            )
    assert len(processes) == (3 if bridge != "0" else 2)  # (the wrapper,) the stub and the child it spawned
    assert len(allowed) > len(processes) and set(map(frozenset, allowed.values())) == {frozenset({CPU})}
    t = m.telemetry
    _check_ran_only_on(t, CPU)
    assert t["stack"]["processes"] == len(processes)
    # the stack's memory, read with every boot: its processes' resident set at its peak during the timed run
    assert resident_mib > 5 and t["stack"]["rss_peak_mib"] >= 0.8 * resident_mib
    # one run, its requests as (start offset, duration, tokens), and the stack's own step figures
    (run,) = t["runs"]
    assert run["label"] == "public" and run["tps"] == m.tps and run["wall_s"] == pytest.approx(m.tps_wall_s, abs=1e-3)
    assert len(run["requests"]) == 6 and [r[2] for r in run["requests"]] == m.prompt_tokens
    assert run["requests"][0][0] == 0.0 and all(a[0] < b[0] for a, b in zip(run["requests"], run["requests"][1:]))
    assert [r[1] for r in run["requests"]] == pytest.approx(m.prompt_latencies_s, abs=1e-4)
    stack = run["stack"]
    assert stack["steps_from"] == "vllm:spec_decode_num_drafts_total" and stack["steps"] > 0
    assert stack["acceptance"] == pytest.approx(m.acceptance_rate, abs=1e-6)
    assert stack["step_ms"] == pytest.approx(1000 * run["wall_s"] / stack["steps"], rel=1e-3)
    assert run["host"]["samples"] >= 2 and 0 <= run["host"]["cpu_steal"] <= 1
    assert set(t["cpus"]) == {str(c) for c in per_cpu_times()}
    assert all(0 <= c["busy"] <= 1 and 0 <= c["steal"] <= 1 for c in t["cpus"].values())
    assert t["sampler"]["samples"] >= 2 and t["sampler"]["cpu_s"] >= 0
    if shutil.which("nvidia-smi") is None:
        assert t["gpu"] == {"available": False, "reason": "no nvidia-smi on PATH"}


@pytest.mark.slow
@needs_two_cpus
def test_the_reference_stack_pinned_to_one_cpu_runs_only_there(tmp_path):
    manifest = load_manifest("reference")
    launch = build_launch(manifest, parse_knobs(manifest, {"cpu_affinity": str(CPU)}))
    profile = stub_profile(tmp_path).with_overrides(
        {"num_prompts": 2, "output_len": 16, "ppl_records": 2, "warmup_requests": 1, "boot_timeout_s": 300.0},
        source="test",
    )
    prompts, records = profile.load_data()
    with EngineProcess.for_profile(launch, profile, log_path=tmp_path / "engine.log") as engine:
        assert engine.pid is not None
        allowed = _tasks_allowed(engine.pid)
        with Telemetry(engine.pid) as probe:
            m = measure(
                launch.base_url,
                model="gemma-3-270m",
                stack=REFERENCE,
                profile=profile,
                prompts=prompts,
                records=records,
                probe=probe,
            )
        allowed |= _tasks_allowed(engine.pid)  # the threads it started to serve
    assert len(allowed) > 1 and set(map(frozenset, allowed.values())) == {frozenset({CPU})}
    _check_ran_only_on(m.telemetry, CPU)
    (run,) = m.telemetry["runs"]
    # the reference stack counts its drafts as vLLM does: one a speculative step
    assert run["stack"]["steps"] > 0 and run["stack"]["tokens_per_step"] >= 1.0


@needs_two_cpus
def test_the_client_keeps_off_the_stacks_cpu_and_the_trial_records_both(tmp_path):
    manifest = stub_manifest(CPU_AFFINITY="none")
    knobs = parse_knobs(manifest, {"cpu_affinity": str(CPU)})
    profile = stub_profile(tmp_path, client_cpus="rest")
    before = {int(tid): os.sched_getaffinity(int(tid)) for tid in os.listdir("/proc/self/task")}
    outcome = run_trial(manifest, knobs, profile, workdir=tmp_path / "trial")
    assert outcome.status == "complete", outcome.reason
    assert outcome.knobs["cpu_affinity"] == str(CPU)
    affinity = outcome.measurement.telemetry["affinity"]
    assert affinity["stack"] == str(CPU) and affinity["client"] == format_cpus(ALLOWED - {CPU})
    assert affinity["client_rule"] == f"client_cpus = rest: the stack's CPUs are {CPU}"
    _check_ran_only_on(outcome.measurement.telemetry, CPU)
    # every thread of this process is back where it was
    assert {t: os.sched_getaffinity(t) for t in before if Path(f"/proc/self/task/{t}").exists()} == {
        t: m for t, m in before.items() if Path(f"/proc/self/task/{t}").exists()
    }


def test_an_unpinned_stack_leaves_the_client_where_it_was():
    assert client_cpus("none", stack_pgid=None) == (None, "client_cpus = none")
    cpus, why = client_cpus("rest", stack_pgid=os.getpgrp())  # this test's own group may use every CPU
    assert cpus is None and why.startswith("client_cpus = rest: the stack may use every CPU")
    assert client_cpus(str(CPU), stack_pgid=None) == ({CPU}, f"client_cpus = {CPU}")
    with pinned({CPU}):
        assert os.sched_getaffinity(0) == {CPU}
    assert os.sched_getaffinity(0) == ALLOWED


@pytest.mark.parametrize("rule", ["rest", "none", "0-1", "3"])
def test_a_client_rule_is_none_rest_or_a_cpu_list(rule, tmp_path):
    assert is_client_rule(rule) and stub_profile(tmp_path, client_cpus=rule).client_cpus == rule


def test_a_bad_client_rule_is_refused_with_the_profile(tmp_path):
    with pytest.raises(StudySpecError, match="'client_cpus' must be 'none', 'rest' or a CPU list"):
        stub_profile(tmp_path, client_cpus="others")


def test_a_cpu_list_this_machine_lacks_fails_the_trial_before_it_boots(tmp_path):
    manifest = stub_manifest(CPU_AFFINITY="none")
    outcome = run_trial(
        manifest, parse_knobs(manifest, {"cpu_affinity": "4096"}), stub_profile(tmp_path), workdir=tmp_path
    )
    assert outcome.status == "failed" and "CPU_AFFINITY='4096'" in (outcome.reason or "")
    assert "boot" not in outcome.timings_s  # nothing started


FAKE_SMI = """#!{python}
# FAKE nvidia-smi for a test (this machine has no GPU): logs its argv, then prints readings as
# `nvidia-smi --query-gpu=... --loop-ms=N` does until it is stopped
import sys, time
open({log!r}, "a").write(repr(sys.argv[1:]) + "\\n")
loop = next(int(a.split("=")[1]) for a in sys.argv if a.startswith("--loop-ms="))
i = 0
while True:
    power = "[N/A]" if i % 2 else "310.5"
    print(f"0, {{1980 - 10 * (i % 3)}}, {{power}}, 97, {{4000 + 10 * i}}", flush=True)
    i += 1
    time.sleep(loop / 1000)
"""


def test_the_gpu_is_only_read_and_its_readings_summarised(tmp_path, monkeypatch):
    bin_dir, log = tmp_path / "bin", tmp_path / "smi.log"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI.format(python=sys.executable, log=str(log)))
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with Telemetry(None, interval_s=0.1) as probe:
        time.sleep(0.5)  # readings before the window are not the run's
        with probe.window(0):
            time.sleep(1.0)
    gpu = probe.summary()["gpu"]
    assert gpu["available"] is True and set(gpu["gpus"]) == {"0"}
    stats = gpu["gpus"]["0"]
    assert stats["sm_clock_mhz"]["min"] >= 1960 and stats["sm_clock_mhz"]["max"] <= 1980
    assert stats["power_w"]["mean"] == 310.5 and stats["power_w"]["n"] < stats["sm_clock_mhz"]["n"]  # [N/A] skipped
    assert stats["utilization"]["mean"] == 97.0 and 5 <= stats["utilization"]["n"] <= 12
    # the memory in use: its peak over the window is the run's, the readings before it are not
    assert stats["memory_used_mib"]["max"] > stats["memory_used_mib"]["min"] >= 4040
    assert probe.run_figures(0)["gpu"] == {
        "sm_clock_mhz": stats["sm_clock_mhz"]["mean"],
        "power_w": 310.5,
        "utilization": 97.0,
        "memory_used_mib": stats["memory_used_mib"]["mean"],
    }
    # one query process, nothing but a query: no setting of the GPU's is ever changed
    (argv,) = [eval(line) for line in log.read_text().splitlines()]  # noqa: S307 - the fake's own repr
    assert argv == [
        "--query-gpu=index,clocks.sm,power.draw,utilization.gpu,memory.used",
        "--format=csv,noheader,nounits",
        "--loop-ms=100",
        "--id=0",
    ]


def test_without_nvidia_smi_the_gpu_is_recorded_as_not_available(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with Telemetry(None) as probe, probe.window(0):
        pass
    assert probe.summary()["gpu"] == {"available": False, "reason": "no nvidia-smi on PATH"}
    assert thread_cpus_allowed([os.getpid()])[os.getpid()] == os.sched_getaffinity(0)


@needs_two_cpus
def test_a_thread_moved_between_cpus_is_seen_on_both_and_counted_as_moved():
    first, second = sorted(ALLOWED)[:2]
    code = (
        "import os, sys, time\n"
        "sys.stdin.readline()\n"  # start when the test's window is open
        f"for cpu in ({first}, {second}):\n"
        "    os.sched_setaffinity(0, {cpu})\n"
        "    end = time.monotonic() + 1.0\n"
        "    while time.monotonic() < end:\n"
        "        pass\n"
        "print('done', flush=True)\n"
        "sys.stdin.readline()\n"  # alive until the window has closed
    )
    busy = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert busy.stdin is not None and busy.stdout is not None
    try:
        with Telemetry(busy.pid, interval_s=0.1) as probe, probe.window(0):
            busy.stdin.write("go\n")
            busy.stdin.flush()
            assert busy.stdout.readline() == "done\n"
        busy.stdin.write("end\n")
        busy.stdin.flush()
        busy.wait(timeout=30)
    finally:
        if busy.poll() is None:
            busy.kill()
    summary = probe.summary()
    (thread,) = summary["threads"]
    assert set(thread["ran_on"]) == {str(first), str(second)}
    assert all(0.25 <= share <= 0.75 for share in thread["ran_on"].values())
    assert thread["cpu_s"] >= 1.0 and summary["stack"]["cpu_s"] == thread["cpu_s"]
    assert thread["migrations"] >= 1 and summary["stack"]["migrations"] == thread["migrations"]


def test_a_run_timed_in_stages_is_one_run_of_its_windows(tmp_path):
    profile = stub_profile(tmp_path, tps_repeats=2)
    launch = build_launch(stub_manifest())
    prompts, records = profile.load_data()
    stages = Stages(after=(1, 3), ppl_first=True, checkpoint=lambda partial: None)
    with (
        EngineProcess.for_profile(launch, profile, log_path=tmp_path / "engine.log") as engine,
        Telemetry(engine.pid) as probe,
    ):
        m = measure(
            launch.base_url,
            model="stub",
            stack=VLLM,
            profile=profile,
            prompts=prompts,
            records=records,
            stages=stages,
            probe=probe,
        )
    first, second = m.telemetry["runs"]
    assert [len(first["requests"]), len(second["requests"])] == [4, 4] and second["start_s"] > first["start_s"]
    # the first run's three stages are three windows of one run (the PPL pass between them is none of it)
    assert first["host"]["samples"] >= 6 and second["host"]["samples"] >= 2
    assert [r[2] for r in first["requests"]] == m.prompt_tokens
