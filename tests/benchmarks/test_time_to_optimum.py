"""Multi-fidelity replayed on a recorded grid with traces: the same core and rule as the driver."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import time_to_optimum
from benchmarks._replay import replay, surface_spec
from benchmarks._surface import load_surface
from sweep.spec import load_study
from tests.stacks import stub_profile
from tests.sweep.kit import write_manifest, write_study

PROMPTS, TOKENS = 8, 32
PHASES = {"boot": 5.0, "warmup": 1.0, "ppl": 2.0, "stop": 0.3}


def trace_row(trial, ctk, window, *, baseline=False, repeat=1.0):
    """A configuration whose speed rises with CENTROID_TOP_K; window 64 is over the gate."""
    rate = (10 + ctk / 4) * repeat
    latencies = [TOKENS / rate * (1.1 if i % 2 else 0.9) for i in range(PROMPTS)]
    tps = TOKENS * PROMPTS / sum(latencies)
    return {"study": "g", "trial": trial, "is_baseline": baseline, "status": "complete",
            "knobs": {"centroid_top_k": ctk, "sliding_window": window, "num_speculative_tokens": 3},
            "tps": tps, "ppl": 2.3 if window == 512 else 2.6, "latencies_s": latencies, "tokens": [TOKENS] * PROMPTS,
            "timings_s": {**PHASES, "tps": sum(latencies)}}


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    rows = [trace_row(0, 32, 512, baseline=True)]
    rows += [trace_row(i, ctk, w) for i, (ctk, w) in enumerate([(c, w) for c in (8, 16, 32, 64) for w in (64, 512)], 1)]
    rows.append(trace_row(9, 32, 512, repeat=1.02))  # a repeat: the noise
    profile = {"name": "quick", "prompts": "p.json", "refs": "r.jsonl", "num_prompts": PROMPTS, "output_len": TOKENS,
               "ppl_records": 2}
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"notes": ["made by hand"], "profile": profile, "rows": rows}))
    return path


@pytest.fixture
def study(tmp_path: Path) -> Path:
    return write_study(
        tmp_path, manifest=write_manifest(tmp_path), profile=stub_profile(tmp_path), name="joint",
        space={"centroid_top_k": {"choices": [8, 16, 32, 64]}, "sliding_window": {"choices": [64, 512]}},
        sampler="tpe", seed=1, n_trials=12, fidelity={"mode": "multi", "stages": [0.25]},
    )  # fmt: skip


def test_a_replay_stops_trials_at_the_gate_and_prunes_slow_ones_as_the_driver_would(grid, study):
    surface = load_surface(grid)
    spec = replace(surface_spec(load_study(study), surface), sampler="grid")
    assert spec.profile.num_prompts == PROMPTS  # the grid's own profile: stages are counted in its prompts
    run = replay(spec, surface, seed=0, n_trials=20)
    by_config = {(t.knobs["centroid_top_k"], t.knobs["sliding_window"]): t for t in run[1:]}
    assert run[0].record.full and run[0].record.measurement.fidelity["mode"] == "full"
    for ctk in (8, 16, 32, 64):  # window 64: over the gate, known after the first 2 prompts
        gated = by_config[ctk, 64].record
        assert gated.status == "complete" and gated.stopped == "gate" and not gated.feasible
        assert gated.measurement.prompts_timed == 2
    stopped = [t for t in run if t.record.stopped]
    full = [t for t in run if t.record.full]
    assert all(t.cost_s < min(f.cost_s for f in full) for t in stopped)
    pruned = [t.record for t in run if t.record.status == "pruned"]
    # CTK 8 (10 + 2 tok/s) cannot reach the front once the faster ones are measured to the end
    assert pruned and all(r.knobs["centroid_top_k"] < 64 for r in pruned)
    assert "cannot reach the front" in pruned[0].reason and pruned[0].measurement.fidelity["ratios"]


def test_a_full_fidelity_replay_measures_every_trial_to_the_end(grid, study):
    surface = load_surface(grid)
    spec = surface_spec(load_study(study), surface)
    run = replay(replace(spec, fidelity=replace(spec.fidelity, mode="full"), sampler="grid"), surface, seed=0, n_trials=20)
    assert all(t.record.full for t in run)
    assert all(t.cost_s == pytest.approx(sum(PHASES.values()) + sum(surface.traces[surface.key(t.knobs)].latencies_s)
                                         / (t.record.tps / surface.traces[surface.key(t.knobs)].tps)) for t in run)


def test_the_benchmark_reports_both_modes_their_ratio_and_the_seeds_that_differ(grid, study, capsys):
    code = time_to_optimum.main(["--grid", str(grid), "--study", str(study), "--seeds", "4", "--trials", "9",
                                 "--processes", "1"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "median minutes to the best" in out and "ratio of median times to the best (full / multi):" in out
    assert "seeds whose final best differs:" in out and "of 4" in out
    assert "rule: multi-fidelity: PPL gate first, then the front rule after 25% of the first run" in out
    assert time_to_optimum.main(["--grid", str(grid), "--study", str(study), "--seeds", "2", "--trials", "9",
                                 "--processes", "1", "--stages", "0.25,0.5"]) == 0  # fmt: skip
    assert "the front rule after 25%, 50% of the first run" in capsys.readouterr().out


def test_stages_out_of_order_are_refused(grid, study, capsys):
    with pytest.raises(SystemExit):
        time_to_optimum.main(["--grid", str(grid), "--study", str(study), "--stages", "0.5,0.25"])
    assert "stages must be increasing fractions" in capsys.readouterr().err


def test_a_grid_without_traces_is_refused(tmp_path, study, capsys):
    csv = tmp_path / "g.csv"
    csv.write_text("study,trial,is_baseline,status,centroid_top_k,sliding_window,tps,ppl\ng,0,True,complete,32,512,1,1\n")
    assert time_to_optimum.main(["--grid", str(csv), "--study", str(study)]) == 2
    assert "records no prompt timings" in capsys.readouterr().err
