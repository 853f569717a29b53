"""A serving study: each trial runs its profile's load levels after the challenge's measurement, and the study
maximises goodput (requests a second that met the SLO) subject to that level's p99 under the SLO's bounds, with
PPL under the gate, through the one ask/tell core (``sweep.search``)."""

from __future__ import annotations

import io
import json

import optuna
import pandas as pd
import pytest
from rich.console import Console

from dashboards.export import export_study
from errors import StudySpecError
from sweep.judgement import Slo, judge_serving, serving_front
from sweep.search import SweepConsole, load_study
from sweep.store import open_storage
from sweep.store._trial import SLO_CONSTRAINT
from tests.stacks import stub_profile
from tests.sweep.kit import run_in_process, write_manifest, write_study


def _serving_study(tmp_path, *, slo: dict, load: dict | None = None):
    # one request at a time, ~0.4 s each (8 tokens at 50 ms): its first token in ~50 ms alone, while at 3 in flight
    # the last waits for two (~0.85 s); the bound sits far from both, as a busy machine's jitter needs
    manifest = write_manifest(tmp_path, STUB_SERIAL="1", STUB_DECODE_STEP_S="0.05")
    profile = stub_profile(tmp_path).with_overrides(
        load or {"load_concurrency": (1, 3), "load_num_prompts": 3, "load_output_len": 8}, source="test"
    )
    return write_study(
        tmp_path,
        manifest=manifest,
        profile=profile,
        name="serving",
        space={"centroid_top_k": {"choices": [32, 64]}},
        sampler="grid",
        serving=slo,
    )


def test_a_serving_study_maximises_goodput_under_its_slo(ray_connected, tmp_path):
    study = _serving_study(tmp_path, slo={"ttft_ms": 300, "percentile": 99})
    spec = load_study(study)
    assert spec.objective == "goodput" and spec.serving == Slo(ttft_ms=300)
    url = f"sqlite:///{tmp_path / 's.db'}"
    _, printed = run_in_process(study, url, tmp_path / "runs")
    # each trial's levels as it finished: one boot, one run a level, judged under the SLO
    assert "load c1 (3 requests, one run)" in printed and "SLO (p99 TTFT <= 300 ms) held" in printed
    assert "load c3 (3 requests, one run)" in printed and "SLO (p99 TTFT <= 300 ms) missed" in printed
    storage = open_storage(url)
    try:
        optuna_study = optuna.load_study(study_name="serving", storage=storage.optuna)
        assert optuna_study.user_attrs["objectives"] == "maximize goodput, minimize ppl"
        trials = [t for t in optuna_study.get_trials() if t.state.name == "COMPLETE"]
        records = {r.trial_number: r for r in storage.records("serving")}
    finally:
        storage.close()
    assert len(trials) == 3  # the baseline (32), the grid's 32 (told the baseline's measurement, no boot), 64
    for trial in trials:
        record = records[trial.number]
        load = record.measurement.load
        assert [level.workload for level in load] == ["c1", "c3"] and all(len(x.requests) == 3 for x in load)
        # one at a time: at 3 in flight the last request's TTFT is two requests' wait, over the bound
        assert load[1].ttft_ms.p99 > 300 >= load[0].ttft_ms.p99
        served = judge_serving(load, spec.serving)
        assert served is not None and served.level == "c1"  # all three met the bound there, one of three at c3
        assert trial.values[0] == pytest.approx(served.goodput) and trial.values[1] == pytest.approx(record.ppl)
        assert trial.system_attrs["constraints"][-1] == pytest.approx(served.excess) and served.excess <= 0
    # a bound nothing meets: the best level's excess is the constraint, > 0, and its goodput counts no request
    tight = judge_serving(records[0].measurement.load, Slo(ttft_ms=1))
    assert tight is not None and tight.excess > 0 and tight.goodput == 0.0
    assert SLO_CONSTRAINT in records[0].constraints(identity_required=False, slo=spec.serving)

    # the end of the run: the serving front, goodput at each trial's best level, one boot and one run a level
    buffer = io.StringIO()
    SweepConsole(Console(file=buffer, width=200)).serving_front(
        list(records.values()), knobs=["centroid_top_k"], slo=spec.serving
    )
    shown = buffer.getvalue()
    assert "Serving front: goodput under p99 TTFT <= 300 ms, PPL under the gate (one boot" in shown
    assert " c1 " in shown and " c3 " not in shown

    # the exports: the latency-vs-throughput chart (a real browser's PNG) and every level's figures and judgement
    out = tmp_path / "exports"
    written = export_study("serving", url, out)
    assert out / "serving.png" in written and (out / "serving.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "c=3" in (out / "serving.html").read_text()
    table = pd.read_csv(out / "serving.csv")
    assert sorted(set(table["number"])) == sorted({t.number for t in trials if not records[t.number].reused})
    assert set(table["workload"]) == {"c1", "c3"} and set(table["slo"]) == {"p99 TTFT <= 300 ms"}
    best = table[table["best_level"]]
    assert list(best["workload"].unique()) == ["c1"] and best["slo_held"].all() and table["on_serving_front"].any()

    # one front: the console's table and the export's column name the same trials, on a study with a reused trial
    # (the grid's 32, told the baseline's measurement), which neither counts a second time
    reused = [r.trial_number for r in records.values() if r.reused]
    front = serving_front(records.values(), spec.serving)
    assert reused and front and not {r.trial_number for r, _ in front} & set(reused)
    assert set(table[table["on_serving_front"]]["number"]) == {r.trial_number for r, _ in front}
    shown_rows = [line.split("│")[1].strip() for line in shown.splitlines() if line.startswith("│")]  # not the header
    assert shown_rows == [str(r.trial_number) for r, _ in front]


@pytest.mark.parametrize(
    ("slo", "load", "fragment"),
    [
        ({"ttft_ms": 100}, {"load_concurrency": ()}, "runs none: set its load_concurrency"),
        ({"percentile": 99}, None, "[serving] needs at least one bound"),
        ({"ttft_ms": 100, "itl": 5}, None, "[serving] unknown field(s) ['itl']"),
        ({"ttft_ms": -5}, None, "ttft_ms must be a positive number"),
        ({"ttft_ms": 100, "percentile": 95}, None, "percentile must be 50, 90 or 99"),
    ],
)
def test_a_bad_serving_table_is_refused_naming_the_field(tmp_path, slo, load, fragment):
    study = _serving_study(tmp_path, slo=slo, load=load)
    with pytest.raises(StudySpecError) as refused:
        load_study(study)
    assert fragment in str(refused.value) and str(study) in str(refused.value)


def test_a_serving_study_states_goodput_as_its_objective(tmp_path):
    study = _serving_study(tmp_path, slo={"ttft_ms": 100})
    text = study.read_text() + '\nobjectives = { tps = "maximize", ppl = "minimize" }\n'
    lines = text.splitlines()
    study.write_text("\n".join([lines[-1], *lines[:-1]]) + "\n")  # a top-level field goes before the tables
    with pytest.raises(StudySpecError, match=r"must be \{ goodput = \"maximize\", ppl = \"minimize\" \}"):
        load_study(study)
    assert json.loads(json.dumps(load_study("serving-cpu").profile.load_concurrency)) == [1, 4]
