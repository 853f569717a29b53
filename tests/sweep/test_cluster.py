"""The driver on a real Ray cluster (conftest.py): pinning, failures as results, identity."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from errors import ConfigError
from sweep.search import load_study
from sweep.store import open_storage
from tests.stacks import stub_profile
from tests.sweep.kit import run_in_process, write_manifest, write_study

A10G = {"accelerator_type": "A10G", "num_cpus": 1}


def rows(url: str, study: str):
    storage = open_storage(url)
    try:
        return storage.records(study)
    finally:
        storage.close()


def test_trials_run_only_on_the_a10g_node_and_a_boot_failure_is_a_result(ray_connected, tmp_path):
    # CENTROID_TOP_K=8 makes the stack exit at boot: one FAILED trial, and the study goes on.
    # Three workers, and the A10G node has CPUs for two: the third is never placed, and must
    # neither get a trial nor keep the study from ending.
    manifest = write_manifest(tmp_path, STUB_BOOT_EXIT_IF="CENTROID_TOP_K=8")
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=stub_profile(tmp_path),
        sampler="grid",
        workers=3,
        resources=A10G,
        space={"centroid_top_k": {"choices": [8, 16, 32, 48]}},
    )
    url = f"sqlite:///{tmp_path}/s.db"
    result, log = run_in_process(study, url, tmp_path / "runs")

    records = rows(url, "stubstudy")
    # the grid's point 32 is the baseline's knobs: a copy of trial 0, no boot, outside the budget
    assert len(records) == 5 and result.progress.done == 4 and result.progress.unbooted == 1
    failed = [r for r in records if r.status == "failed"]
    assert [(r.knobs["centroid_top_k"], r.fail_kind) for r in failed] == [(8, "engine")]
    assert "exited with status 1 during boot" in failed[0].reason
    assert "refusing to boot with CENTROID_TOP_K=8" in failed[0].log_tail
    complete = [r for r in records if r.status == "complete" and r.booted]
    assert len(complete) == 3 and sum(r.is_baseline for r in complete) == 1
    for r in complete:
        assert r.node["node_id"] == ray_connected.a10g.node_id != ray_connected.l4.node_id
        assert r.node["accelerator_type"] == "A10G"
        assert r.tps > 0 and r.ppl > 0 and r.argv and r.env["CENTROID_TOP_K"] == str(r.knobs["centroid_top_k"])
        assert {"boot", "total"} <= set(r.timings)

    trials = optuna.load_study(study_name="stubstudy", storage=url).trials
    assert [t.state for t in trials].count(TrialState.FAIL) == 1
    assert trials[0].user_attrs["is_baseline"] and trials[0].params == {"centroid_top_k": 32}
    assert "FAILED (engine)" in log and "trial 0: baseline started" in log
    assert "last log line: stub: refusing to boot with CENTROID_TOP_K=8 (STUB_BOOT_EXIT_IF)" in log
    assert "(done 4/5  running 0  failed 1  not booted 1  best feasible TPS" in log


def test_a_lossless_knob_that_changes_greedy_output_is_flagged_and_infeasible(ray_connected, tmp_path):
    manifest = write_manifest(tmp_path, fault_if="CENTROID_TOP_K=16:wrong_tokens")
    profile = stub_profile(tmp_path)
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=profile,
        sampler="grid",
        identity_required=True,
        resources=A10G,
        space={"centroid_top_k": {"choices": [16, 32, 48]}},
    )
    url = f"sqlite:///{tmp_path}/s.db"
    _, log = run_in_process(study, url, tmp_path / "runs")

    by_ctk = {r.knobs["centroid_top_k"]: r for r in rows(url, "stubstudy") if not r.is_baseline}
    assert by_ctk[16].identity_diff_prompts == profile.num_prompts and by_ctk[16].feasible is False
    assert by_ctk[48].identity_diff_prompts == 0 and by_ctk[48].feasible
    assert f"greedy output differs on {profile.num_prompts} prompt(s)" in log
    study_back = optuna.load_study(study_name="stubstudy", storage=url)
    flagged = next(
        t for t in study_back.trials if t.params.get("centroid_top_k") == 16 and not t.user_attrs["is_baseline"]
    )
    assert flagged.constraints["greedy_identity"] == profile.num_prompts
    assert flagged.user_attrs["feasible"] is False
    assert flagged.number not in {t.number for t in study_back.best_trials}


def test_the_driver_boots_no_configuration_twice_nor_one_whose_ppl_is_known_over_the_gate(ray_connected, tmp_path):
    # The stub's PPL at window 64 is about 7.5% over the baseline's: over the +5% gate, whatever CTK.
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        sampler="grid",
        resources=A10G,
        space={"centroid_top_k": {"choices": [16, 32]}, "sliding_window": {"choices": [64, 512]}},
    )
    url = f"sqlite:///{tmp_path}/s.db"
    result, log = run_in_process(study, url, tmp_path / "runs")

    records = {r.trial_number: r for r in rows(url, "stubstudy")}
    assert len(records) == 5  # the baseline, then the four grid points
    copy = next(r for r in records.values() if r.reuse == "copy")
    memo = next(r for r in records.values() if r.reuse == "ppl_memo")
    gated = records[memo.source]
    assert copy.source == 0 and copy.knobs == records[0].knobs
    assert gated.booted and gated.knobs["sliding_window"] == memo.knobs["sliding_window"] == 64
    assert gated.knobs["centroid_top_k"] != memo.knobs["centroid_top_k"] and not (gated.feasible or memo.feasible)
    booted = sorted(p.name for p in (tmp_path / "runs" / "stubstudy").glob("trial-*"))
    assert booted == [f"trial-{n:04d}" for n in sorted(records) if records[n].booted]  # no folder, no stack
    assert len(booted) == 3 and result.progress.done == 3 and result.progress.unbooted == 2
    assert f"trial {copy.trial_number}: not booted (copy of trial 0): the same knobs as trial 0" in log
    assert f"trial {memo.trial_number}: not booted (PPL memo of trial {gated.trial_number})" in log
    told = optuna.load_study(study_name="stubstudy", storage=url).trials
    assert told[memo.trial_number].state == TrialState.COMPLETE and told[memo.trial_number].constraints["ppl_gate"] > 0


def test_a_study_no_node_can_host_is_refused_before_anything_boots(ray_connected, tmp_path):
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        n_trials=2,
        resources={"accelerator_type": "H100"},
        space={"centroid_top_k": {"choices": [16, 32]}},
    )
    with pytest.raises(ConfigError, match=r"no node .* accelerator types the nodes advertise: \['A10G', 'L4'\]"):
        run_in_process(study, f"sqlite:///{tmp_path}/s.db", tmp_path / "runs")


def test_a_lent_card_runs_a_study_pinned_to_another_with_the_override_recorded(ray_connected, tmp_path):
    # a study written for one card (H100, which no node has) runs on the lent one with --accelerator, only there,
    # and every trial records the card it ran on; "any" drops the pin
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        n_trials=2,
        resources={"accelerator_type": "H100", "num_cpus": 1},
        space={"centroid_top_k": {"choices": [16, 32]}},
    )
    url = f"sqlite:///{tmp_path}/s.db"
    run_in_process(study, url, tmp_path / "runs", accelerator="L4")
    booted = [r for r in rows(url, "stubstudy") if r.booted]
    assert booted and all(r.status == "complete" for r in booted)
    assert {(r.node["node_id"], r.node["accelerator_type"]) for r in booted} == {(ray_connected.l4.node_id, "L4")}
    assert load_study(study, accelerator="any").resources.accelerator_type is None
    with pytest.raises(ConfigError, match="--accelerator: 'L4:1' is not an accelerator type"):
        load_study(study, accelerator="L4:1")
