"""``python -m sweep.verify`` against a real sweep on the stub stack (known timing, real Ray)."""

from __future__ import annotations

import json

import optuna
import pandas as pd
import pytest
import sqlalchemy as sa

from dashboards.data import load_study_data
from dashboards.export import export_study
from dashboards.figures import pareto_figure
from engine.bench import run_trial
from engine.config import load_manifest, parse_knobs
from sweep.claims import load_evidence
from sweep.store._database import measurements, open_storage
from sweep.verify import main, parse_args
from tests.stacks import stub_profile, write_ppl_refs
from tests.sweep.kit import run_in_process, write_manifest, write_study

INFLATION = 1.5


def _held_out(folder) -> tuple[str, str]:
    prompts = [
        {
            "id": f"h{i}",
            "conversations": [
                {"from": "human", "value": f"Held-out {i}: name a prime above {7 * i}."},
                {"from": "gpt", "value": ""},
            ],
        }
        for i in range(6)
    ]
    (folder / "held.json").write_text(json.dumps(prompts))
    write_ppl_refs(folder / "held.jsonl", 6, seed=7)
    return str(folder / "held.json"), str(folder / "held.jsonl")


def _inflate(url: str, study_name: str, number: int, factor: float) -> None:
    """What a hand-edited database looks like: the row and Optuna's value both say faster."""
    storage = open_storage(url)
    try:
        trial_id = storage.optuna.get_trial_id_from_study_id_trial_number(
            storage.optuna.get_study_id_from_name(study_name), number
        )
        with storage.engine.begin() as conn:
            conn.execute(
                measurements.update()
                .where(measurements.c.study_name == study_name, measurements.c.trial_number == number)
                .values(
                    tps=measurements.c.tps * factor,
                    measurement=sa.func.json_set(
                        measurements.c.measurement,
                        "$.tps",
                        sa.func.json_extract(measurements.c.measurement, "$.tps") * factor,
                    ),
                )
            )
            conn.execute(
                sa.text("UPDATE trial_values SET value = value * :f WHERE trial_id = :t AND objective = 0"),
                {"f": factor, "t": trial_id},
            )
    finally:
        storage.close()


def test_an_inflated_point_is_invalid_on_tps_and_an_honest_one_verified(ray_connected, tmp_path, monkeypatch, capsys):
    # One request of 384 tokens a run (a 20 ms decode step, ~10 ms a token with the stub's drafts: ~3.7-3.9 s,
    # as long as the 4 requests of 96 tokens it replaced): a loaded 2-core machine delays each
    # request by a few tens of ms (scheduling, not the stub's sleep), so the claim, measured at one
    # load, and the re-runs, at another, must not differ by that. Beside two busy cores the claims read
    # 0.8% under an idle machine's, where 4 requests of 96 tokens read 3-6% under it and a re-run on
    # a quieter machine came out UNDECIDED (+3.7%, its interval over 5%), as CI saw once.
    manifest = write_manifest(tmp_path, STUB_DECODE_STEP_S="0.02")
    profile = stub_profile(tmp_path, output_len=384, num_prompts=1)
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=profile,
        name="verifyme",
        space={"centroid_top_k": {"choices": [32, 48, 64]}},
        sampler="grid",
        # the stub's timing moves well under 1%; at the default floor of 2% one re-run's odds of landing within 5%
        # reach 0.9 only on >= ~4 degrees of freedom, and where a loaded machine makes the configurations' noise
        # differ (CI: Bartlett apart, 2.3 df) an honest point read UNDECIDED: at that floor the odds top out at 0.886
        # and a target of 0.8: on a loaded 2-core machine the stub's claim and its re-runs move by 1-2% (CI read an
        # honest point UNDECIDED at 0.9 with 1.7 degrees of freedom, here at 5.7 with the public runs 2.3% off);
        # the test is of VERIFIED against INVALID, which a 50% inflation tells at any target
        promotion={"candidates": 0, "noise_floor": 0.01, "target": 0.8},
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    result, _ = run_in_process(study, url, tmp_path / "runs")
    honest, inflated = [r.trial_number for r in result.records if not r.is_baseline and r.booted][:2]  # 32: a copy
    claimed = {r.trial_number: r.tps for r in result.records}
    _inflate(url, "verifyme", inflated, INFLATION)
    prompts, refs = _held_out(tmp_path)

    monkeypatch.chdir(tmp_path)  # its runs/ folder
    rc = main(
        [
            "--study",
            str(study),
            "--storage",
            url,
            "--prompts",
            prompts,
            "--refs",
            refs,
            "--trials",
            f"{honest},{inflated}",
            "--repeats",
            "4",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1, out  # one INVALID

    storage = open_storage(url)
    try:
        verdicts = load_evidence(storage, "verifyme").verdicts
        reruns = storage.boots("verification", "verifyme")
        data = load_study_data(storage, "verifyme")
    finally:
        storage.close()
    baseline = next(r.trial_number for r in result.records if r.is_baseline)
    # the relative gate is re-resolved on the held-out references: the baseline is re-run first
    # the baseline's boots first (they resolve the gate), then the two points' interleaved: A B A B A B A B. Where
    # a loaded machine makes the two points' noise differ (Bartlett apart) each keeps only its own boots: three
    # left 1.7 degrees of freedom on CI and one more re-run's odds of landing within 5% of an honest claim under
    # the 0.9 target (UNDECIDED); four leave about 3
    assert [r.trial_number for r in reruns] == [baseline] * 4 + [honest, inflated] * 4
    assert all(r.status == "complete" and r.prompts == prompts and r.refs == refs for r in reruns)
    assert len({r.run_id for r in reruns}) == 1 and [r.repeat for r in reruns] == [0, 1, 2, 3, 0, 0, 1, 1, 2, 2, 3, 3]
    assert [r.order for r in reruns] == list(range(12)) and [r.first for r in reruns[4:]] == (
        ["public"] * 2 + ["heldout"] * 2
    ) * 2
    assert all(r.public_tps is not None for r in reruns)  # every boot timed the public prompts too
    good = verdicts[honest]
    assert good.verdict == "VERIFIED", f"{good.undecided} (gap {good.tps_gap_pct:+.2f}%, df {good.df})"
    assert abs(verdicts[honest].tps_gap_pct) <= 5.0
    bad = verdicts[inflated]
    assert bad.verdict == "INVALID" and bad.claimed_tps == pytest.approx(claimed[inflated] * INFLATION)
    expected_gap = (1 / INFLATION - 1) * 100  # -33.3%: the re-run runs at the real speed
    assert bad.tps_gap_pct == pytest.approx(expected_gap, abs=5.0)
    assert bad.reasons[0].startswith(f"TPS gap {bad.tps_gap_pct:+.1f}% (90% interval") and len(bad.reasons) == 1
    assert bad.gate == verdicts[honest].gate == pytest.approx(1.05 * verdicts[baseline].ppl_median)
    assert f"trial {inflated} INVALID: TPS gap" in out and "VERIFIED" in out
    # a study never promoted is judged at the target its [promotion] states, as printed and as read back
    assert "with P >= 0.8" in out and {v.target for v in verdicts.values()} == {0.8}

    # the verdicts reach the export and the chart's markers
    written = export_study("verifyme", url, tmp_path / "export")
    frame = pd.read_csv(next(p for p in written if p.name == "trials.csv")).set_index("number")
    assert frame.loc[honest, "verify_verdict"] == "VERIFIED" and frame.loc[inflated, "verify_verdict"] == "INVALID"
    assert frame.loc[inflated, "verify_tps_gap_pct"] == pytest.approx(bad.tps_gap_pct)
    traces = {trace.name.split(" (")[0]: trace for trace in pareto_figure(data).data}
    by_number = {t.number: t for t in data.trials}
    assert by_number[inflated].tps in list(traces["INVALID"].y)
    assert by_number[honest].tps in list(traces["VERIFIED"].y)


def test_verify_refuses_bad_input_before_booting(tmp_path, capsys):
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        space={"centroid_top_k": {"choices": [32, 64]}},
        sampler="grid",
    )
    assert main(["--study", str(study), "--storage", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no database file there" in err
    for argv, message in (
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--top", "1", "--trials", "2"], "--top and --trials exclude each other"),
        (["--trials", "a,b"], "--trials must be comma-separated trial numbers"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(["--study", "ctk", *argv])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()


def test_verify_names_trials_that_are_not_measured(ray_connected, tmp_path, capsys):
    manifest = write_manifest(tmp_path)
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=stub_profile(tmp_path),
        name="few",
        space={"centroid_top_k": {"choices": [32, 64]}},
        sampler="grid",
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    run_in_process(study, url, tmp_path / "runs")
    assert main(["--study", str(study), "--storage", url, "--trials", "0,9"]) == 2
    assert "no trial measured to the end numbered [9]" in capsys.readouterr().err
    storage = open_storage(url)
    try:
        assert storage.boots("verification", "few") == []
        assert len(optuna.load_study(study_name="few", storage=storage.optuna).trials) == 3  # baseline + grid
    finally:
        storage.close()


def test_a_missing_held_out_set_is_bad_input_not_a_failed_re_run(ray_connected, tmp_path, capsys):
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        name="nodata",
        space={"centroid_top_k": {"choices": [32, 64]}},
        sampler="grid",
        n_trials=1,
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    run_in_process(study, url, tmp_path / "runs")
    assert main(["--study", str(study), "--storage", url, "--refs", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    storage = open_storage(url)
    try:
        assert storage.boots("verification", "nodata") == []
    finally:
        storage.close()


def test_a_caching_stack_is_verified_at_the_speed_a_fresh_boot_sees(ray_connected, tmp_path, capsys, monkeypatch):
    # A prompt served before skips 0.6 s of prefill (0.3 s of decoding each: HTTP noise on a busy
    # machine stays small beside it). The sweep's three runs per boot time disjoint
    # prompts and verification boots afresh for one run each: claim and re-runs agree, where
    # timing the same prompts again would have claimed the cached speed.
    manifest = write_manifest(tmp_path, STUB_PREFILL_S="0.6", STUB_DECODE_STEP_S="0.01", SHARED_CACHE="{cache}")
    profile = stub_profile(tmp_path, num_prompts=4, output_len=32, tps_repeats=3)
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=profile,
        name="cached",
        space={"centroid_top_k": {"choices": [32, 48]}},
        sampler="grid",
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    result, _ = run_in_process(study, url, tmp_path / "runs")
    claimed = result.records[0]
    # every trial of the study gets one {cache}: what a stack caches (vLLM's compiled graphs) is reused
    assert {r.env["SHARED_CACHE"] for r in result.records if r.booted} == {
        str((tmp_path / "runs" / "cached" / "cache").resolve())
    }
    assert len(claimed.measurement.tps_runs) == 3 and "no prompt timed twice" in claimed.measurement.tps_rule
    prompts, refs = _held_out(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(
        [
            "--study",
            str(study),
            "--storage",
            url,
            "--prompts",
            prompts,
            "--refs",
            refs,
            "--trials",
            "0",
            "--repeats",
            "3",
        ]
    ) in (0, 1), capsys.readouterr().out
    storage = open_storage(url)
    try:
        verdict = load_evidence(storage, "cached").verdicts[0]
    finally:
        storage.close()
    # Never INVALID: the cached speed would have claimed about twice the fresh one (a -50% gap). VERIFIED
    # here, alone on this machine; beside another test process the three boots' spread can leave it
    # UNDECIDED (seen once in -n 2), which is the rule working, not the cache leaking.
    assert verdict.verdict in ("VERIFIED", "UNDECIDED") and abs(verdict.tps_gap_pct) < 10.0, verdict
    # ... and both are what one run on a fresh boot measures
    fresh = run_trial(
        load_manifest(manifest),
        parse_knobs(load_manifest(manifest), {}),
        profile.with_overrides({"tps_repeats": 1, "prompts": prompts, "refs": refs}, source="test"),
        workdir=tmp_path / "fresh",
    ).measurement.tps
    print(
        f"claimed {claimed.tps:.2f} (runs {claimed.measurement.tps_runs}), re-runs median {verdict.tps_median:.2f}, "
        f"fresh boot {fresh:.2f} tok/s"
    )
    assert verdict.tps_median == pytest.approx(fresh, rel=0.10) and claimed.tps == pytest.approx(fresh, rel=0.10)


def test_re_runs_scoring_the_sweeps_own_references_keep_its_gate_and_boot_no_baseline(
    ray_connected, tmp_path, monkeypatch, capsys
):
    profile = stub_profile(tmp_path)
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=profile,
        name="samerefs",
        space={"centroid_top_k": {"choices": [32, 48]}},
        sampler="grid",
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    result, _ = run_in_process(study, url, tmp_path / "runs")
    trial = next(r for r in result.records if not r.is_baseline and r.booted)  # 32 is the baseline's: a copy
    prompts, _ = _held_out(tmp_path)
    monkeypatch.chdir(tmp_path)
    # one boot is one draw of a re-run: UNDECIDED on TPS, never INVALID here (exit 1: not every trial VERIFIED)
    assert (
        main(
            [
                "--study",
                str(study),
                "--storage",
                url,
                "--prompts",
                prompts,
                "--refs",
                profile.refs,
                "--trials",
                str(trial.trial_number),
                "--repeats",
                "1",
            ]
        )
        == 1
    ), capsys.readouterr().out
    storage = open_storage(url)
    try:
        reruns = storage.boots("verification", "samerefs")
        verdict = load_evidence(storage, "samerefs").verdicts[trial.trial_number]
    finally:
        storage.close()
    assert [r.trial_number for r in reruns] == [trial.trial_number]  # no baseline re-run
    assert reruns[0].gate == pytest.approx(trial.gate)
    assert verdict.verdict == "UNDECIDED" and "one measured boot" in verdict.undecided


def test_a_verification_stopped_part_way_goes_on_with_resume(ray_connected, tmp_path, monkeypatch, capsys):
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        name="resumed",
        space={"centroid_top_k": {"choices": [32, 48]}},
        sampler="grid",
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    result, _ = run_in_process(study, url, tmp_path / "runs")
    trial = next(r for r in result.records if not r.is_baseline and r.booted)
    baseline = next(r for r in result.records if r.is_baseline)
    prompts, refs = _held_out(tmp_path)  # other references: the baseline's boots resolve the gate
    monkeypatch.chdir(tmp_path)
    common = ["--study", str(study), "--storage", url, "--prompts", prompts, "--refs", refs]
    plan = [*common, "--trials", str(trial.trial_number), "--repeats", "1", "--baseline-boots", "1"]

    # a limit no boot fits: nothing booted, nothing stored, and it says so
    assert main([*plan, "--time-limit", "0.001"]) == 3
    assert "0 of 2 boot(s) stored" in " ".join(capsys.readouterr().out.split())

    assert main(plan) == 1, capsys.readouterr().out  # one boot of the trial: UNDECIDED, never a TPS verdict
    storage = open_storage(url)
    try:
        first = storage.boots("verification", "resumed")
    finally:
        storage.close()
    assert [b.trial_number for b in first] == [baseline.trial_number, trial.trial_number]  # --baseline-boots 1
    run_id = first[0].run_id
    # another plan is not this run's: refused before a boot
    assert main([*plan[:-1], "2", "--resume", run_id]) == 2
    assert "not the start of this plan" in capsys.readouterr().err

    storage = open_storage(url)
    try:
        with storage.engine.begin() as conn:  # as if the run had stopped after its first boot
            conn.execute(sa.text("DELETE FROM verifications WHERE id = (SELECT max(id) FROM verifications)"))
    finally:
        storage.close()
    assert main([*plan, "--resume", run_id]) == 1
    out = " ".join(capsys.readouterr().out.split())  # the console wraps its lines
    assert "going on after 1 of 2 stored boot(s)" in out and "Verification of resumed" in out
    storage = open_storage(url)
    try:
        again = storage.boots("verification", "resumed")
    finally:
        storage.close()
    # the baseline's boot is the stored one (not booted again); the trial's is new, in the same run
    assert [b.trial_number for b in again] == [baseline.trial_number, trial.trial_number]
    assert again[0].created_at == first[0].created_at and again[1].created_at > first[1].created_at
    assert again[1].run_id == run_id and again[1].order == 1
