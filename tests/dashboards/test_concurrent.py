"""A sweep and optuna-dashboard on one SQLite file at once: neither fails, nothing is lost."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import optuna

from sweep.store import open_storage
from tests.dashboards.kit import child_env, serving, stub_study

SPACE = {"centroid_top_k": {"choices": [16, 24, 32, 48, 64]}, "sliding_window": {"choices": [256, 512]}}
BUDGET = 1 + 5 * 2  # the baseline, then the grid


def _poll(base: str, stop: threading.Event, statuses: list[int], counts: list[int]) -> None:
    """What the dashboard page does, as fast as the server answers: list studies, read one."""
    with httpx.Client(base_url=base, timeout=30) as client:
        while not stop.is_set():
            listing = client.get("/api/studies")
            statuses.append(listing.status_code)
            for summary in listing.json().get("study_summaries", []) if listing.status_code == 200 else []:
                detail = client.get(f"/api/studies/{summary['study_id']}")
                statuses.append(detail.status_code)
                if detail.status_code == 200:
                    counts.append(len(detail.json()["trials"]))
            time.sleep(0.05)


def test_sweep_and_dashboard_share_the_database(short_tmp):
    study = stub_study(short_tmp, name="busy", space=SPACE)
    database = short_tmp / "sweep.db"
    with (short_tmp / "sweep.log").open("w") as log:
        sweep = subprocess.Popen(
            [sys.executable, "-m", "sweep.run", "--study", str(study.toml), "--storage", study.url],
            cwd=short_tmp,
            env=child_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while not database.exists():  # the sweep creates it; the dashboard only opens one
                assert sweep.poll() is None and time.monotonic() < deadline, (short_tmp / "sweep.log").read_text()
                time.sleep(0.1)
            statuses: list[int] = []
            counts: list[int] = []
            stop = threading.Event()
            # --refresh 0.2: the dashboard also writes (the attached chart) while the sweep writes
            with serving(study.url, "--refresh", "0.2", cwd=short_tmp) as served:
                poller = threading.Thread(target=_poll, args=(served.url, stop, statuses, counts), daemon=True)
                poller.start()
                sweep_rc = sweep.wait(timeout=400)
                time.sleep(1.0)  # a few more refreshes and polls on the finished study
                stop.set()
                poller.join(timeout=60)
        finally:
            if sweep.poll() is None:
                sweep.kill()
                sweep.wait()
    sweep_log = (short_tmp / "sweep.log").read_text()
    served_log = "".join(served.lines)
    assert sweep_rc == 0, sweep_log
    assert served.process.returncode == 0, served_log
    assert "database is locked" not in sweep_log.lower() and "database is locked" not in served_log.lower()
    assert "Traceback" not in served_log and "warning" not in served_log, served_log
    assert statuses and set(statuses) == {200}
    assert len(set(counts)) >= 3, f"the polls never overlapped the sweep: trial counts seen {sorted(set(counts))}"

    storage = open_storage(study.url)
    try:
        trials = optuna.load_study(study_name="busy", storage=storage.optuna).get_trials()
        records = storage.records("busy")
    finally:
        storage.close()
    # no K=8 in this space: every trial of the budget completed, each with its one row
    assert len(trials) == BUDGET and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert sorted(r.trial_number for r in records) == [t.number for t in trials]
    assert max(counts) == BUDGET
