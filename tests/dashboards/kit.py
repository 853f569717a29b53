"""Helpers for the dashboards' tests: real sweeps on the stub stack, and the serve process."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.stacks import stub_profile, write_ppl_refs
from tests.sweep.kit import write_manifest, write_study

REPO = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(HF_HUB_OFFLINE="1", RAY_AUTH_MODE="disabled")
    return env


def python_m(module: str, *args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=timeout
    )


@dataclass(frozen=True)
class StubStudy:
    folder: Path
    toml: Path
    name: str
    url: str


def stub_study(
    folder: Path,
    *,
    name: str,
    space: dict,
    decode_step_s: str = "0.004",
    tps_repeats: int = 1,
    length_texts: bool = False,
    **fields,
) -> StubStudy:
    """A study on the stub stack where CENTROID_TOP_K=8 fails at boot and 16 changes the
    greedy output (a lossless knob breaking identity): every kind of point a chart shows. ``length_texts``: each
    trial also scores two texts of 40 tokens by context length, in buckets ending at 16 and 32."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = write_manifest(
        folder,
        fault_if="CENTROID_TOP_K=16:wrong_tokens",
        STUB_BOOT_EXIT_IF="CENTROID_TOP_K=8",
        STUB_DECODE_STEP_S=decode_step_s,
    )
    lengths = (
        {
            "length_refs": str(write_ppl_refs(folder / "long.jsonl", 2, context_len=1, target_len=40)),
            "length_buckets": [16, 32],
        }
        if length_texts
        else {}
    )
    profile = stub_profile(folder, tps_repeats=tps_repeats, **lengths)
    # The PPL memo off: the memo would answer a configuration whose window is known over the gate
    # without booting it, and these studies are to boot every kind of trial (K=8 at every window).
    fields.setdefault("ppl_memo", False)
    toml = write_study(
        folder, manifest=manifest, profile=profile, space=space, name=name, sampler="grid", seed=1, workers=1, **fields
    )
    return StubStudy(folder=folder, toml=toml, name=name, url=f"sqlite:///{folder / 'sweep.db'}")


def run_sweep(study: StubStudy, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m sweep.run`` as a user runs it (its own local Ray), in the study's folder."""
    return python_m(
        "sweep.run", "--study", str(study.toml), "--storage", study.url, *extra, cwd=study.folder, timeout=timeout
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]
    lines: list[str]  # everything it printed (stdout and stderr), as it came


@contextmanager
def serving(url: str, *args: str, cwd: Path, ready_s: float = 120) -> Iterator[Served]:
    """``python -m dashboards.serve`` on ``url``; stopped with SIGTERM (exit 0 expected)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "dashboards.serve", "--storage", url, "--port", str(port), *args],
        cwd=cwd,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    ready: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if "optuna-dashboard on" in line:
                ready.put(line)

    threading.Thread(target=pump, daemon=True).start()
    served = Served(url=f"http://127.0.0.1:{port}", process=process, lines=lines)
    try:
        deadline = time.monotonic() + ready_s
        while ready.empty():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"dashboards.serve did not start (exit {process.poll()}):\n{''.join(lines)}")
            time.sleep(0.1)
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
