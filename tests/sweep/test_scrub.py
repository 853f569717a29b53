"""A starting driver scrubs the logs of the trials an earlier one did not see finish."""

import io

import pytest
from rich.console import Console

from engine.secrets import Scrubber
from errors import ClusterError
from sweep.console import SweepConsole
from sweep.driver import run_study
from sweep.scrub import scrub_unfinished_logs
from sweep.spec import load_study
from sweep.storage import open_storage
from tests.stacks import stub_profile
from tests.sweep.kit import measured_record, write_manifest, write_study


def _trial_log(study_dir, number, text):
    folder = study_dir / f"trial-{number:04d}"
    folder.mkdir(parents=True)
    (folder / "engine.log").write_text(text)
    return folder / "engine.log"


def test_logs_of_lost_interrupted_and_unrecorded_trials_are_scrubbed_and_measured_ones_left(tmp_path):
    secret = "hf_8d0c1b2a3f"
    echo = f"stub: env HF_TOKEN={secret}\nconnecting to postgresql://sweeper:pw-4711@db/runs\n"
    measured = measured_record(0, 30.0, 2.3)
    lost = measured_record(1, None, None, fail_kind="lost", reason="the driver stopped")
    logs = {n: _trial_log(tmp_path, n, echo) for n in (0, 1, 2)}  # trial 2: killed before its record was written
    (tmp_path / "cache").mkdir()  # not a trial folder

    scrubbed = scrub_unfinished_logs(tmp_path, [measured, lost], Scrubber({"HF_TOKEN": secret}))

    assert scrubbed == [logs[1], logs[2]]
    for n in (1, 2):
        assert logs[n].read_text() == "stub: env HF_TOKEN=***\nconnecting to postgresql://sweeper:***@db/runs\n"
    assert logs[0].read_text() == echo  # came back through its worker, scrubbed there: not read again
    assert scrub_unfinished_logs(tmp_path, [measured, lost], Scrubber({"HF_TOKEN": secret})) == []


def test_a_starting_driver_scrubs_them_before_anything_else(ray_connected, tmp_path):
    key = "wk_5e6f7a8b9c0d"
    manifest = write_manifest(tmp_path, WANDB_API_KEY=key)
    # A node no cluster offers: the driver stops at its first check, after the scrub or not at all.
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=stub_profile(tmp_path),
        space={"centroid_top_k": {"choices": [32]}},
        n_trials=2,
        resources={"accelerator_type": "H100", "num_cpus": 1},
    )
    log = _trial_log(tmp_path / "runs" / "stubstudy", 3, f"stub: env WANDB_API_KEY={key}\n")
    storage = open_storage(f"sqlite:///{tmp_path}/sweeps.db")
    out = io.StringIO()
    try:
        with pytest.raises(ClusterError):
            run_study(load_study(study), storage, console=SweepConsole(Console(file=out)), run_dir=tmp_path / "runs")
    finally:
        storage.close()
    assert log.read_text() == "stub: env WANDB_API_KEY=***\n"
