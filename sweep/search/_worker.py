"""Ray workers: one actor per engine slot, pinned by the study's resources.

An actor asks Ray for ``num_cpus``, ``num_gpus`` and, when the study names one, a sliver of
the node resource ``accelerator_type:<X>`` that Ray advertises on nodes with that accelerator
(and that test clusters declare by hand): trials land only on matching nodes, and the engine
inherits ``CUDA_VISIBLE_DEVICES`` from the GPUs Ray assigned. Workers run one trial at a time
through ``engine.bench.run_trial`` and return the outcome as a dict; they never open the
database (one writer: docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import ray

from engine.config import BenchProfile, KnobValues, Manifest
from engine.measurement import TrialOutcome
from engine.reaper import engine_groups, stop_engine_groups
from engine.secrets import Scrubber
from sweep.search._fidelity import FidelityPlan, stages_for
from sweep.search._spec import Resources

__all__ = ["ACCELERATOR_PREFIX", "TrialWorker", "actor_options", "collect", "error_text"]

ACCELERATOR_PREFIX = "accelerator_type:"
# A share of the accelerator resource that any node advertising it can satisfy many times over:
# it only selects nodes, the GPU itself is counted by num_gpus.
_ACCELERATOR_SHARE = 0.001


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def error_text(exc: BaseException, manifest: Manifest) -> str:
    """A Ray error in one line: its first line and its last (where Ray puts the cause), with no secret
    that a stack of ``manifest`` or this process's environment holds (scrubbed before it is cut)."""
    scrub = Scrubber.for_stack(manifest.env, manifest.serve)
    lines = [line.strip() for line in scrub(_ANSI.sub("", str(exc))).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= 400 else text[:397] + "..."


def collect(
    ref: ray.ObjectRef, *, knobs: dict[str, Any], manifest: Manifest, node: dict[str, Any] | None = None
) -> tuple[TrialOutcome, bool]:
    """A trial's outcome from its Ray reference, and whether the worker was lost on the way.

    The trial code raising is a bug in this project, not a lost worker: a failed outcome that says so.
    An actor, node or object lost (any other Ray error) is a failed outcome marked lost, whose worker
    the caller replaces."""
    try:
        return TrialOutcome.from_dict(ray.get(ref)), False
    except ray.exceptions.RayTaskError as exc:
        reason, lost = f"the worker raised: {error_text(exc, manifest)}", False
    except ray.exceptions.RayError as exc:
        where = f" on node {node['node_id']}" if node and node.get("node_id") else ""
        reason, lost = f"worker lost mid-trial{where}: {type(exc).__name__}: {error_text(exc, manifest)}", True
    return TrialOutcome(status="failed", knobs=knobs, argv=[], env={}, reason=reason), lost


def actor_options(resources: Resources) -> dict[str, Any]:
    options: dict[str, Any] = {
        "num_cpus": resources.num_cpus,
        "num_gpus": resources.num_gpus,
        "max_restarts": 0,  # a lost worker is the driver's to replace, with a fresh trial
        "max_concurrency": 2,  # so stop_engines() runs while run() is busy
    }
    if resources.accelerator_type:
        options["resources"] = {ACCELERATOR_PREFIX + resources.accelerator_type: _ACCELERATOR_SHARE}
    return options


@ray.remote
class TrialWorker:
    def __init__(self) -> None:
        # Ray SIGKILLs a worker that is killed or whose node goes; its watchdog stops the
        # engine it was running (see engine.reaper).
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "engine.reaper", str(os.getpid())],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        self._reaper.wait()  # its first process exits at once, leaving the watchdog detached
        # The engine's benchmark stack (httpx, the bench client) is needed only where trials
        # run, so not at module level, which the driver imports. Importing it here, while the
        # baseline trial runs alone, keeps its second or so (more on a busy CPU) off each
        # worker's first trial: 2-3% of 4-worker efficiency in benchmarks.scaling.
        from engine.bench import run_trial

        self._run_trial = run_trial

    def node(self) -> dict[str, Any]:
        """Where this worker runs: node id, host, accelerator type, assigned GPUs."""
        context = ray.get_runtime_context()
        node_id = context.get_node_id()
        accelerators = sorted(
            key[len(ACCELERATOR_PREFIX) :]
            for node in ray.nodes()
            if node.get("NodeID") == node_id
            for key in node.get("Resources", {})
            if key.startswith(ACCELERATOR_PREFIX)
        )
        return {
            "node_id": node_id,
            "hostname": socket.gethostname(),
            "accelerator_type": accelerators[0] if len(accelerators) == 1 else (accelerators or None),
            "gpu_ids": [str(g) for g in context.get_accelerator_ids().get("GPU", [])],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "worker_pid": os.getpid(),
        }

    def run(
        self,
        manifest: Manifest,
        knobs: KnobValues,
        profile: BenchProfile,
        *,
        workdir: str,
        cache_dir: str,
        plan: FidelityPlan | None = None,
        heldout_first: bool | None = None,
    ) -> dict[str, Any]:
        """One trial; without a plan (multi-fidelity's rule for it) it is measured to the end. With
        ``heldout_first`` (True or False) a promotion or verification boot: the profile's held-out run too."""
        Path(workdir).mkdir(parents=True, exist_ok=True)
        outcome = self._run_trial(
            manifest,
            knobs,
            profile,
            workdir=Path(workdir),
            host="127.0.0.1",
            cache_dir=Path(cache_dir),
            stages=stages_for(plan) if plan else None,
            heldout_first=heldout_first,
        )
        outcome.node = {**outcome.node, **self.node()}
        if outcome.measurement is not None and plan is not None:
            outcome.measurement.fidelity = plan.record()
        return outcome.to_dict()

    def stop_engines(self) -> int:
        """Stop the engine(s) this worker started; returns how many groups were stopped."""
        groups = engine_groups(psutil.Process(), exclude={self._reaper.pid})
        stop_engine_groups(groups)
        return len(groups)
