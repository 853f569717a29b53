"""A sweep survives what clusters do: readers during writes, a killed driver, a lost node."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import optuna
import ray
import sqlalchemy as sa
from optuna.trial import TrialState

from sweep.store import open_storage
from tests.stacks import stub_profile
from tests.sweep.conftest import start_cluster
from tests.sweep.kit import run_in_process, stub_processes, write_manifest, write_study

REPO = Path(__file__).resolve().parents[2]
A10G = {"accelerator_type": "A10G", "num_cpus": 1}
# A slower stub, so that a trial is still running when the test strikes: about 2-4 s a trial.
SLOW = {"STUB_DECODE_STEP_S": "0.05"}


def sweep_command(study: Path, url: str, address: str) -> list[str]:
    return [sys.executable, "-m", "sweep.run", "--study", str(study), "--storage", url, "--ray-address", address]


# ``python -m MODULE ARGS`` as an interactive shell starts it: SIGINT at Python's default. Tests
# run in the background of a non-interactive shell (``.ci/run ... &``) inherit SIGINT ignored,
# which Python keeps, as nohup-style launches rely on; a Ctrl-C test must not depend on that.
_WITH_CTRL_C = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)


def interactive(command: list[str]) -> list[str]:
    python, flag, module, *args = command
    assert flag == "-m", command
    return [python, "-c", _WITH_CTRL_C, module, *args]


def start_driver(command: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def kill_driver(driver: subprocess.Popen, tmp_path: Path) -> None:
    """SIGKILL the driver: its worker dies with its job, and the worker's watchdog stops the engine."""
    try:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    wait_for(lambda: no_stub_left(str(tmp_path)), timeout_s=60, what="the orphaned engine to be stopped")


def resume(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The same command again, to its end."""
    rerun = subprocess.run(
        command, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    return rerun


def wait_for(predicate, *, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


class StudyReader:
    """Reads a study the way optuna-dashboard does: one Optuna storage of its own on the file.

    It opens that storage only once the driver has created the study, so the test never races
    the driver at initialising the file (a reader that creates tables is a writer).
    """

    def __init__(self, url: str, name: str) -> None:
        self.url, self.name = url, name
        self.path = sa.engine.make_url(url).database
        self.storage: optuna.storages.RDBStorage | None = None

    def _study_exists(self) -> bool:
        try:
            with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as conn:
                query = "SELECT 1 FROM studies WHERE study_name = ?"
                return conn.execute(query, (self.name,)).fetchone() is not None
        except sqlite3.OperationalError:  # no file, or no tables yet
            return False

    def trials(self) -> list[optuna.trial.FrozenTrial]:
        if self.storage is None:
            if not self._study_exists():
                return []
            self.storage = optuna.storages.RDBStorage(self.url)
        return optuna.load_study(study_name=self.name, storage=self.storage).trials

    def states(self) -> list[TrialState]:
        return [t.state for t in self.trials()]


def stored_records(url: str) -> list:
    storage = open_storage(url)
    try:
        return storage.records("stubstudy")
    finally:
        storage.close()


def no_stub_left(marker: str) -> bool:
    return not stub_processes(marker)


def slow_study(tmp_path: Path, **fields) -> Path:
    manifest = write_manifest(tmp_path, GS_TEST_MARKER=str(tmp_path), **SLOW)
    return write_study(
        tmp_path,
        manifest=manifest,
        profile=stub_profile(tmp_path),
        resources=A10G,
        space={"centroid_top_k": {"low": 8, "high": 64, "step": 8}},
        **fields,
    )


def test_optuna_reads_the_storage_while_a_sweep_writes(ray_cluster, tmp_path):
    study = slow_study(tmp_path, n_trials=4, sampler="random", seed=2)
    url = f"sqlite:///{tmp_path}/sweeps.db"
    driver = start_driver(sweep_command(study, url, ray_cluster.address), tmp_path, tmp_path / "driver.log")
    try:
        reader = StudyReader(url, "stubstudy")
        wait_for(reader.trials, timeout_s=120, what="the study to appear")
        engine = sa.create_engine(url)
        reads, seen = 0, set()
        while driver.poll() is None:
            study_back = optuna.load_study(study_name="stubstudy", storage=reader.storage)
            seen |= {t.state for t in study_back.get_trials(deepcopy=False)}
            _ = study_back.best_trials  # reading the front while the sweep writes must not fail
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT count(*) FROM measurements").scalar()
            reads += 1
            time.sleep(0.05)
        out = (tmp_path / "driver.log").read_text()
        assert driver.returncode == 0, out
        assert reads >= 20 and TrialState.RUNNING in seen
        # The end of the run: the front as a table, and where the database is.
        assert "Pareto front of stubstudy" in out and "gate margin" in out and f"Database: {url}" in out
        final = reader.trials()
        assert {t.state for t in final} == {TrialState.COMPLETE}
        booted = [t for t in final if "reuse" not in t.user_attrs]  # a proposal of measured knobs: a copy
        assert len(booted) == 4  # the budget counts boots
        assert {"tps", "ppl", "feasible", "measurement_id", "node_id"} <= set(booted[-1].user_attrs)
    finally:
        if driver.poll() is None:
            driver.kill()


def test_a_driver_killed_mid_study_resumes_to_its_budget_without_losing_or_doubling(ray_cluster, tmp_path):
    study = slow_study(tmp_path, n_trials=6, sampler="random", seed=3)
    url = f"sqlite:///{tmp_path}/sweeps.db"
    command = sweep_command(study, url, ray_cluster.address)
    driver = start_driver(command, tmp_path, tmp_path / "first.log")
    reader = StudyReader(url, "stubstudy")
    try:

        def two_done_one_running():
            states = reader.states()
            return states.count(TrialState.COMPLETE) >= 2 and states[-1] == TrialState.RUNNING

        wait_for(two_done_one_running, timeout_s=180, what="two complete trials and one running")
        before = {
            t.number: t.values
            for t in optuna.load_study(study_name="stubstudy", storage=url).trials
            if t.state == TrialState.COMPLETE
        }
    finally:
        kill_driver(driver, tmp_path)
    rerun = resume(command, tmp_path)
    assert "closed, left running by an earlier driver" in rerun.stdout

    trials = optuna.load_study(study_name="stubstudy", storage=url).trials
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    lost = [t for t in trials if t.state == TrialState.FAIL]
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    booted = [t for t in complete if "reuse" not in t.user_attrs]  # copies boot nothing and cost no budget
    assert len(booted) == 6 and len(lost) == 1  # the budget, reached; the killed trial, re-run
    assert "driver stopped before the trial finished" in lost[0].user_attrs["fail_reason"]
    retry = next(t for t in trials if t.user_attrs.get("retry_of") == lost[0].number)
    assert retry.state == TrialState.COMPLETE and retry.params == lost[0].params
    assert {n: v for n, v in before.items()} == {t.number: t.values for t in complete if t.number in before}

    records = stored_records(url)
    assert sorted(r.trial_number for r in records) == [t.number for t in trials]  # one row each, none twice
    by_number = {r.trial_number: r for r in records}
    for t in complete:
        assert t.user_attrs["measurement_id"] == by_number[t.number].id
        assert by_number[t.number].tps == t.values[0]


def test_a_node_lost_mid_trial_is_recorded_and_its_trial_re_run(ray_cluster, tmp_path):
    # A cluster of its own: the worker's node is removed while its trial runs, and a second
    # A10G node (added just before) takes over.
    if ray.is_initialized():
        ray.shutdown()
    session_tmp = os.environ["RAY_TMPDIR"]
    temp_dir = tempfile.mkdtemp(prefix="gsray", dir="/tmp")
    cluster, nodes = start_cluster(temp_dir, first={"num_cpus": 1, "resources": {"accelerator_type:A10G": 1}})
    result: dict = {}
    try:
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        study = slow_study(tmp_path, n_trials=4, sampler="grid")
        url = f"sqlite:///{tmp_path}/sweeps.db"
        reader = StudyReader(url, "stubstudy")

        def drive():
            try:
                result["value"] = run_in_process(study, url, tmp_path / "runs", n_trials=4)
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                result["error"] = exc

        thread = threading.Thread(target=drive, daemon=True)
        thread.start()

        def a_trial_after_the_baseline_running():
            assert thread.is_alive(), result
            states = reader.states()
            return len(states) >= 2 and states[0] == TrialState.COMPLETE and states[-1] == TrialState.RUNNING

        # The worker is placed once the baseline runs: on the first node, the only one then.
        def baseline_started():
            assert thread.is_alive(), result
            return reader.states()

        wait_for(baseline_started, timeout_s=120, what="the baseline to start")
        second = cluster.add_node(num_cpus=1, resources={"accelerator_type:A10G": 1})
        wait_for(a_trial_after_the_baseline_running, timeout_s=120, what="a trial after the baseline to run")
        time.sleep(0.5)
        cluster.remove_node(nodes["first"])
        thread.join(timeout=240)
        assert not thread.is_alive(), "the driver did not finish after the node loss"
        assert "error" not in result, result.get("error")
        _, log = result["value"]

        records = stored_records(url)
        lost = [r for r in records if r.fail_kind == "lost"]
        assert len(lost) == 1, log
        assert f"worker lost mid-trial on node {nodes['first'].node_id}" in lost[0].reason
        rerun = [r for r in records if r.knobs == lost[0].knobs and r.status == "complete"]
        assert len(rerun) == 1 and rerun[0].node["node_id"] == second.node_id, log
        complete = [r for r in records if r.status == "complete" and r.booted]  # not the grid's copy of the baseline
        assert len(complete) == 4  # the study is complete: its budget, with the lost trial re-run
        assert {r.node["node_id"] for r in complete} <= {nodes["first"].node_id, second.node_id}
        assert "re-queued" in log
        wait_for(lambda: no_stub_left(str(tmp_path)), timeout_s=60, what="the lost worker's engine to stop")
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.environ["RAY_TMPDIR"] = session_tmp
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_ctrl_c_stops_the_engine_closes_the_trial_and_says_how_to_resume(ray_cluster, tmp_path):
    study = slow_study(tmp_path, n_trials=3, sampler="random", seed=4)
    url = f"sqlite:///{tmp_path}/sweeps.db"
    driver = start_driver(interactive(sweep_command(study, url, ray_cluster.address)), tmp_path, tmp_path / "first.log")
    reader = StudyReader(url, "stubstudy")
    try:
        wait_for(
            lambda: len(reader.states()) >= 2 and reader.states()[-1] == TrialState.RUNNING,
            timeout_s=180,
            what="a trial after the baseline to run",
        )
        time.sleep(0.5)
        driver.send_signal(signal.SIGINT)
        assert driver.wait(timeout=90) == 130
    finally:
        if driver.poll() is None:
            driver.kill()
    out = (tmp_path / "first.log").read_text()
    assert "interrupted: 1 in-flight trial(s) closed and re-queued, engines stopped" in out, out
    wait_for(lambda: no_stub_left(str(tmp_path)), timeout_s=15, what="the engine to be stopped")
    trials = reader.trials()
    interrupted = [t for t in trials if t.state == TrialState.FAIL]
    assert len(interrupted) == 1 and interrupted[0].user_attrs["fail_kind"] == "interrupted"
    assert [t.user_attrs["retry_of"] for t in trials if t.state == TrialState.WAITING] == [interrupted[0].number]

    said = out.split("resume with: ", 1)[1].split()
    assert said[:3] == ["python", "-m", "sweep.run"] and url in said and ray_cluster.address in said
    resume([sys.executable, *said[1:]], tmp_path)
    final = optuna.load_study(study_name="stubstudy", storage=url).trials
    assert sum(t.state == TrialState.COMPLETE and "reuse" not in t.user_attrs for t in final) == 3  # booted
    retry = next(t for t in final if t.user_attrs.get("retry_of") == interrupted[0].number)
    assert retry.state == TrialState.COMPLETE and retry.params == interrupted[0].params


def test_a_driver_killed_mid_stage_resumes_without_losing_or_doubling(ray_cluster, tmp_path):
    """Multi-fidelity: the driver dies while a trial is between its stages (its PPL pass done, the
    rest of its run going); the next start closes it as lost, re-runs it, and keeps the rest."""
    manifest = write_manifest(
        tmp_path, GS_TEST_MARKER=str(tmp_path), STUB_REQUEST_LOG="{workdir}/requests.jsonl", **SLOW
    )
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=stub_profile(tmp_path, num_prompts=8),
        resources=A10G,
        space={"centroid_top_k": {"choices": [16, 32, 64]}},
        n_trials=4,
        sampler="grid",
        seed=1,
        fidelity={"mode": "multi", "stages": [0.25]},
    )
    url = f"sqlite:///{tmp_path}/sweeps.db"
    command = sweep_command(study, url, ray_cluster.address)
    driver = start_driver(command, tmp_path, tmp_path / "first.log")
    reader = StudyReader(url, "stubstudy")

    def staged_trial_between_stages():
        states = reader.states()
        if len(states) < 2 or states[-1] != TrialState.RUNNING:
            return None
        log = tmp_path / "runs" / "stubstudy" / f"trial-{len(states) - 1:04d}" / "requests.jsonl"
        lines = log.read_text().splitlines() if log.exists() else []
        return len(states) - 1 if any('"/v1/completions"' in line for line in lines) else None

    try:
        killed = wait_for(staged_trial_between_stages, timeout_s=180, what="a trial past its first stage and PPL pass")
        before = {
            t.number: (t.state, t.values)
            for t in optuna.load_study(study_name="stubstudy", storage=url).trials
            if t.state != TrialState.RUNNING
        }
    finally:
        kill_driver(driver, tmp_path)
    rerun = resume(command, tmp_path)
    assert f"trial {killed}: closed, left running by an earlier driver" in rerun.stdout

    trials = optuna.load_study(study_name="stubstudy", storage=url).trials
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert trials[killed].state == TrialState.FAIL
    retry = next(t for t in trials if t.user_attrs.get("retry_of") == killed)
    assert retry.params == trials[killed].params and retry.state in (TrialState.COMPLETE, TrialState.PRUNED)
    ended = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(ended) == 4  # the budget, the killed trial's retry in its place
    assert before == {n: (t.state, t.values) for n, t in enumerate(trials) if n in before}

    records = stored_records(url)
    assert sorted(r.trial_number for r in records) == [t.number for t in trials]  # one row each, none twice
    for r in records:
        if r.measurement is not None and r.booted:  # what each trial measured, kept whole or partial as it ran
            assert r.measurement.prompts_timed == len(r.measurement.prompt_latencies_s)
            assert r.full == (r.measurement.prompts_timed == 8)
