"""One seeded soak sweep, start to finish: ``run_soak_sweep(SoakSpec(seed=3), folder)``.

The sweep is a real ``python -m sweep.run`` on a real multi-node Ray cluster over the stub
stack; every trial's stack carries the fault the seeded plan gives its trial number
(``tests.soak.faults``). While it runs, a reader polls the SQLite file, and at seeded moments
(after a seeded number of measurement rows, plus a seeded delay) a worker node is removed and
the driver is SIGKILLed and started again with the same command. When the driver has finished,
``tests.soak.checks`` reads everything back.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from engine.config import REPO_ROOT, BenchProfile
from sweep.store import TrialRecord
from tests.soak.chaos import MARKER_ENV, Driver, SoakCluster, marked_processes
from tests.soak.checks import LOST_TO_DRIVER, LOST_TO_NODE, TrialView, check_leftovers, check_study
from tests.soak.faults import plan, write_plan
from tests.soak.reader import DbReader
from tests.stacks import stub_manifest, stub_profile
from tests.sweep.kit import write_study

__all__ = ["SoakSpec", "SweepReport", "run_soak_sweep"]

SAMPLERS = ("random", "tpe", "nsga2")
_LEFTOVER_WAIT_S = 30.0  # a reaper stopping a stack that ignores TERM takes its 10 s grace


@dataclass(frozen=True, kw_only=True)
class SoakSpec:
    seed: int
    n_trials: int = 12
    workers: int = 2
    node_removals: int = 1
    driver_kills: int = 1
    timeout_s: float = 900.0

    @property
    def sampler(self) -> str:
        return SAMPLERS[self.seed % len(SAMPLERS)]

    @classmethod
    def seeded(cls, seed: int, **fields: int) -> SoakSpec:
        """One or two node removals and driver kills, as the seed says."""
        rng = random.Random(f"soak-chaos-{seed}")
        return cls(seed=seed, node_removals=rng.randint(1, 2), driver_kills=rng.randint(1, 2), **fields)


@dataclass
class SweepReport:
    spec: SoakSpec
    views: list[TrialView] = field(default_factory=list)
    rows: Counter[str] = field(default_factory=Counter)  # complete / failed:<kind>
    node_removals: int = 0  # applied
    node_removals_busy: int = 0  # applied while the node ran a stack
    driver_kills: int = 0
    lost_to_node: int = 0
    lost_to_driver: int = 0
    rerun: int = 0  # lost trials whose knobs ran again
    lost: int = 0  # trials with no row: must stay 0
    duplicated: int = 0  # trial numbers with two rows: must stay 0
    budget_used: int = 0
    reader_polls: int = 0
    reader_errors: int = 0
    leftovers: int = 0
    problems: list[str] = field(default_factory=list)
    duration_s: float = 0.0


@dataclass(order=True)
class _Event:
    rows: int  # fire once the database holds this many measurement rows ...
    delay_s: float  # ... and this much later
    kind: str = field(compare=False)


def _events(spec: SoakSpec, rng: random.Random) -> list[_Event]:
    kinds = ["node_removed"] * spec.node_removals + ["driver_killed"] * spec.driver_kills
    top = max(1, spec.n_trials - 3)  # early enough that the sweep still runs when it fires
    return sorted(_Event(rng.randint(1, top), round(rng.uniform(0.0, 2.0), 2), kind) for kind in kinds)


def _stage(spec: SoakSpec, folder: Path) -> tuple[Path, BenchProfile]:
    """Write the plan, the manifest and the study; return the study file and its profile."""
    plan_path = write_plan(folder / "plan.json", plan(spec.seed, rounds=3))
    manifest = stub_manifest(SOAK_PLAN=str(plan_path), SOAK_WORKDIR="{workdir}").to_json_dict()
    manifest["serve"] = ["{python}", "{repo}/tests/soak/faulty_stub.py"]
    manifest_path = folder / "manifest.json"
    manifest_path.write_text(json.dumps(manifest, indent=2))
    # Short timeouts: a stack that never becomes ready or stops answering costs seconds, not minutes.
    profile = stub_profile(folder, boot_timeout_s=4.0, request_timeout_s=3.0)
    study = write_study(
        folder,
        manifest=manifest_path,
        profile=profile,
        name=f"soak{spec.seed}",
        gate={"ppl_max": 2.42},
        space={"centroid_top_k": {"low": 1, "high": 256}, "sliding_window": {"low": 32, "high": 512}},
        n_trials=spec.n_trials,
        sampler=spec.sampler,
        seed=spec.seed,
        workers=spec.workers,
    )
    return study, profile


@contextmanager
def _soak_env(marker: str) -> Iterator[Path]:
    """This process's env for one sweep (the cluster's nodes and the driver inherit it): the
    marker, the project importable by the nodes' workers, and Ray's files in a short private
    folder (Unix socket paths must stay short). Ray's single-host mode keeps
    the driver's ``--ray-address 127.0.0.1:...`` on loopback, where the cluster listens;
    otherwise Ray rewrites it to the host's outward address and never connects."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))  # for the workers
    env = {MARKER_ENV: marker, "HF_HUB_OFFLINE": "1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": path}
    saved = {key: os.environ.get(key) for key in [*env, "RAY_TMPDIR"]}
    ray_tmp = Path(tempfile.mkdtemp(prefix="gssoak", dir="/tmp"))
    os.environ.update({**env, "RAY_TMPDIR": str(ray_tmp)})
    try:
        yield ray_tmp
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(ray_tmp, ignore_errors=True)


def run_soak_sweep(spec: SoakSpec, folder: Path) -> SweepReport:
    began = time.monotonic()
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    report = SweepReport(spec=spec)
    study, profile = _stage(spec, folder)
    name, db = f"soak{spec.seed}", folder / "sweep.db"
    marker = f"{folder}#{spec.seed}"
    with _soak_env(marker):
        cluster = SoakCluster(workers=spec.workers)
        driver = Driver(
            study=study, storage=f"sqlite:///{db}", address=cluster.address, folder=folder, env=dict(os.environ)
        )
        try:
            with DbReader(db, study=name) as reader:
                _drive(spec, report, driver=driver, cluster=cluster, reader=reader)
            report.reader_polls, report.reader_errors = reader.stats.polls, len(reader.stats.errors)
            report.problems += [f"reader: {error}" for error in reader.stats.errors[:5]]
            _settle(marker, words=("stub", "engine.reaper"))
            check = check_study(
                storage_url=f"sqlite:///{db}",
                study=name,
                n_trials=spec.n_trials,
                profile=profile,
                trials_dir=folder / "runs" / name,
                node_removals=report.node_removals,
                driver_kills=report.driver_kills,
                workers=spec.workers,
                reader_complete=reader.stats.complete,
            )
            leftovers = check_leftovers(check.views, marker=marker)
            report.problems += check.problems + leftovers
            report.views, report.leftovers = check.views, len(leftovers)
            report.lost, report.duplicated, report.budget_used = check.lost, check.duplicated, check.budget_used
            rows = check.rows
            report.rows = Counter(r.status if r.status == "complete" else f"failed:{r.fail_kind}" for r in rows)
            report.lost_to_node = sum(1 for r in rows if (r.reason or "").startswith(LOST_TO_NODE))
            report.lost_to_driver = sum(1 for r in rows if r.reason == LOST_TO_DRIVER)
            report.rerun = sum(1 for r in rows if r.fail_kind in ("lost", "interrupted") and _rerun(r, rows))
        finally:
            if driver.poll() is None:
                driver.kill()
            cluster.shutdown()
        report.problems += [f"after the cluster stopped, pid {p.pid} ({p.name()}) still runs" for p in _settle(marker)]
    report.duration_s = time.monotonic() - began
    return report


def _drive(spec: SoakSpec, report: SweepReport, *, driver: Driver, cluster: SoakCluster, reader: DbReader) -> None:
    """Run the driver to its end, firing the seeded cluster faults on the way."""
    rng = random.Random(f"soak-events-{spec.seed}")
    events = _events(spec, rng)
    deadline = time.monotonic() + spec.timeout_s
    due: float | None = None
    driver.start()
    while (code := driver.poll()) is None:
        if time.monotonic() > deadline:
            report.problems.append(f"the sweep did not finish within {spec.timeout_s:g} s")
            return
        if events and due is None and reader.stats.rows >= events[0].rows:
            due = time.monotonic() + events[0].delay_s
        if due is not None and time.monotonic() >= due:
            event, due = events.pop(0), None
            if event.kind == "node_removed":
                report.node_removals += 1
                report.node_removals_busy += cluster.remove_node(rng)
            else:
                report.driver_kills += 1
                driver.kill()
                driver.start()
        time.sleep(0.1)
    if code != 0:
        tail = "\n".join(driver.log().splitlines()[-15:])
        report.problems.append(f"the driver exited with status {code}:\n{tail}")


def _settle(marker: str, *, words: tuple[str, ...] = ()) -> list[psutil.Process]:
    """Wait (bounded) for the sweep's processes whose command line has one of ``words`` (all of
    them: none given) to end; returns those still alive. Reapers take their grace period to stop
    what a lost worker left behind; Ray's idle workers exit on their own once they notice their
    raylet is gone (seen up to a few seconds after the cluster stopped)."""
    deadline = time.monotonic() + _LEFTOVER_WAIT_S
    while (alive := marked_processes(marker, words=words)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive


def _rerun(lost: TrialRecord, rows: list[TrialRecord]) -> bool:
    """Whether a later trial ran the lost trial's knobs (to an end other than another loss)."""
    return any(
        r.trial_number > lost.trial_number and r.knobs == lost.knobs and r.fail_kind not in ("lost", "interrupted")
        for r in rows
    )
