"""The soak's own checks can fail: a duplicate boot, planted in the stacks' start records, is found."""

from __future__ import annotations

from tests.soak.checks import duplicate_boots, injected_trials
from tests.sweep.kit import measured_record


def _boot(folder, number: int, pgid: int, fault: str = "healthy") -> None:
    log = folder / f"trial-{number:04d}" / "engine.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:  # the engine log is appended to, one start line per boot
        fh.write(f"soak: trial {number} pid {pgid} pgid {pgid} fault {fault}\n")


def test_one_boot_per_trial_passes_and_a_planted_second_boot_fails(tmp_path):
    rows = [measured_record(0, 10.0, 2.3, study="soak"), measured_record(1, 11.0, 2.3, study="soak")]
    rows = {r.trial_number: r for r in rows}
    _boot(tmp_path, 0, 100)
    _boot(tmp_path, 1, 200)
    assert duplicate_boots(injected_trials(tmp_path, rows), list(rows.values())) == []
    _boot(tmp_path, 1, 300)  # the same trial number booted again
    assert duplicate_boots(injected_trials(tmp_path, rows), list(rows.values())) == ["trial 1 booted 2 times"]


def test_knobs_whose_stack_failed_booting_again_is_a_duplicate(tmp_path):
    failed = measured_record(
        0, None, None, study="soak", knobs={"centroid_top_k": 8}, fail_kind="engine", reason="boot"
    )
    again = measured_record(1, 10.0, 2.3, study="soak", knobs={"centroid_top_k": 8})
    rows = {0: failed, 1: again}
    _boot(tmp_path, 0, 100, "boot_exit")
    _boot(tmp_path, 1, 200)
    found = duplicate_boots(injected_trials(tmp_path, rows), list(rows.values()))
    assert found == ["trial 1 booted knobs whose stack failed in trial 0"]
