"""The soak's moving parts: a real multi-node Ray cluster, the driver as a process, and the
processes that must not outlive a sweep.

``SoakCluster`` is ``ray.cluster_utils.Cluster`` on this machine: a head with no CPUs (drivers
only) and one single-CPU node per worker, so every node hosts exactly one trial worker and
removing a node always takes a worker with it. ``Driver`` is ``python -m sweep.run`` joined to
that cluster, killed with SIGKILL and started again with the same command.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from ray._private import ray_constants
from ray.cluster_utils import Cluster

__all__ = ["MARKER_ENV", "Driver", "SoakCluster", "cmdline", "marked_processes"]

# Every process of one soak sweep inherits this variable (cluster nodes, driver, workers,
# reapers, stacks), so leftovers are found by it and never confused with anyone else's.
MARKER_ENV = "GEMMA_TEST_RUN"
_LOOPBACK = {"node_ip_address": "127.0.0.1"}


def marked_processes(marker: str, *, words: tuple[str, ...] = ()) -> list[psutil.Process]:
    """Live processes carrying ``MARKER_ENV=marker`` whose command line has one of ``words``."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
                continue
            if process.environ().get(MARKER_ENV) != marker:
                continue
            text = " ".join(process.info["cmdline"] or [])
            if not words or any(word in text for word in words):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


class SoakCluster:
    def __init__(self, *, workers: int) -> None:
        os.environ["RAY_AUTH_MODE"] = "disabled"  # a private loopback cluster (Ray 2.60 turns auth on)
        head = {"num_cpus": 0, "include_dashboard": False, **_LOOPBACK}
        self.cluster = Cluster(initialize_head=True, head_node_args=head)
        for _ in range(workers):
            self._add()
        self.cluster.wait_for_nodes()

    @property
    def address(self) -> str:
        return self.cluster.address

    def _add(self) -> None:
        self.cluster.add_node(num_cpus=1, **_LOOPBACK)

    def remove_node(self, rng: random.Random) -> bool:
        """Remove a worker node, one running a stack if any, and add a fresh one in its place.
        Returns whether the removed node was running a stack at that moment."""
        nodes = sorted(self.cluster.worker_nodes, key=lambda node: node.unique_id)
        busy = [node for node in nodes if _runs_stack(node)]
        victim = rng.choice(busy or nodes)
        self.cluster.remove_node(victim, allow_graceful=False)
        self._add()
        return bool(busy)

    def shutdown(self) -> None:
        self.cluster.shutdown()


def _runs_stack(node: object) -> bool:
    raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid  # type: ignore[attr-defined]
    try:
        below = psutil.Process(raylet).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    return any("stub" in " ".join(cmdline(p)) for p in below)


def cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


class Driver:
    """``python -m sweep.run`` in ``folder`` (its ``runs/`` lives there), one log per start."""

    def __init__(self, *, study: Path, storage: str, address: str, folder: Path, env: dict[str, str]) -> None:
        self.argv = [
            sys.executable,
            "-m",
            "sweep.run",
            "--study",
            str(study),
            "--storage",
            storage,
            "--ray-address",
            address,
        ]
        self.folder = folder
        self.env = env
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.starts += 1
        with open(self.folder / f"driver-{self.starts}.log", "wb") as log:
            self._proc = subprocess.Popen(
                self.argv,
                cwd=self.folder,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def poll(self) -> int | None:
        assert self._proc is not None
        return self._proc.poll()

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed or closed by the driver itself."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGKILL)
        self._proc.wait()

    def log(self) -> str:
        return "".join((self.folder / f"driver-{i}.log").read_text(errors="replace") for i in range(1, self.starts + 1))
