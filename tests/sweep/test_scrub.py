"""A starting driver, or run of boots, scrubs the boot logs an earlier run did not see finish: trials,
promotion, verification and calibration boots."""

import io

import pytest
from rich.console import Console

from engine.secrets import Scrubber
from errors import ClusterError
from sweep.search import SweepConsole, load_study, run_study
from sweep.store import BootRecord, scrub_unfinished_logs
from sweep.store._database import BOOT_TABLES, open_storage
from tests.stacks import stub_profile
from tests.sweep.kit import measured_record, write_manifest, write_study


def _log(folder, text):
    folder.mkdir(parents=True)
    (folder / "engine.log").write_text(text)
    return folder / "engine.log"


def _trial_log(study_dir, number, text):
    return _log(study_dir / f"trial-{number:04d}", text)


def _boot(order, *, status="complete", run_id="r1", trial=0):
    measured = status == "complete"
    return BootRecord(
        study_name="s",
        trial_number=trial,
        run_id=run_id,
        repeat=0,
        order=order,
        status=status,
        claimed_tps=30.0,
        claimed_ppl=2.3,
        gate=2.4,
        tps=30.0 if measured else None,
        public_tps=30.0 if measured else None,
        ppl=2.3 if measured else None,
        prompts="held.json",
        refs="held.jsonl",
        profile="quick",
    )


def test_logs_of_lost_interrupted_and_unrecorded_trials_and_boots_are_scrubbed_and_measured_ones_left(tmp_path):
    secret = "hf_8d0c1b2a3f"
    echo = f"stub: env HF_TOKEN={secret}\nconnecting to postgresql://sweeper:pw-4711@db/runs\n"
    clean = "stub: env HF_TOKEN=***\nconnecting to postgresql://sweeper:***@db/runs\n"
    runs = tmp_path / "runs"
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    try:
        storage.insert_record(measured_record(0, 30.0, 2.3))
        storage.insert_record(measured_record(1, None, None, fail_kind="lost", reason="the driver stopped"))
        # trial 2: killed before its record was written
        logs = {f"trial {n}": _trial_log(runs / "s", n, echo) for n in (0, 1, 2)}
        (runs / "s" / "cache").mkdir()  # not a trial folder
        # every kind of run of boots: its measured boots left, a failed one and one never stored scrubbed
        for kind in BOOT_TABLES:
            storage.insert_boots(kind, [_boot(0), _boot(1, status="failed")])
            for order in (0, 1, 2):
                logs[f"{kind} {order}"] = _log(runs / kind / "s" / "r1" / f"boot-{order:03d}-trial-0000", echo)
            # the same order in another run, never stored: scrubbed
            logs[f"{kind} other run"] = _log(runs / kind / "s" / "r2" / "boot-000-trial-0000", echo)
        scrub = Scrubber({"HF_TOKEN": secret})

        scrubbed = scrub_unfinished_logs(runs, "s", storage, scrub)

        left = {"trial 0", *(f"{kind} 0" for kind in BOOT_TABLES)}
        assert sorted(scrubbed) == sorted(log for name, log in logs.items() if name not in left)
        for name, log in logs.items():
            # a measured one came back through its worker, scrubbed there: not read again
            assert log.read_text() == (echo if name in left else clean), name
        assert scrub_unfinished_logs(runs, "s", storage, scrub) == []
    finally:
        storage.close()


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
