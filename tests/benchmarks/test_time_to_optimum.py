"""Multi-fidelity replayed on a recorded grid with traces: the same core and rule as the driver."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import time_to_optimum
from benchmarks._replay import Replayed, replay, surface_spec
from benchmarks._surface import load_surface
from sweep.search import load_study
from tests.stacks import stub_profile
from tests.sweep.kit import measured_record, write_manifest, write_study

PROMPTS, TOKENS = 8, 32
PHASES = {"boot": 5.0, "warmup": 1.0, "ppl": 2.0, "stop": 0.3}


def trace_row(trial, ctk, window, *, baseline=False, repeat=1.0):
    """A configuration whose speed rises with CENTROID_TOP_K; window 64 is over the gate."""
    rate = (10 + ctk / 4) * repeat
    latencies = [TOKENS / rate * (1.1 if i % 2 else 0.9) for i in range(PROMPTS)]
    tps = TOKENS * PROMPTS / sum(latencies)
    return {
        "study": "g",
        "trial": trial,
        "is_baseline": baseline,
        "status": "complete",
        "knobs": {"centroid_top_k": ctk, "sliding_window": window, "num_speculative_tokens": 3},
        "tps": tps,
        "ppl": 2.3 if window == 512 else 2.6,
        "latencies_s": latencies,
        "tokens": [TOKENS] * PROMPTS,
        "timings_s": {**PHASES, "tps": sum(latencies)},
    }


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    rows = [trace_row(0, 32, 512, baseline=True)]
    rows += [trace_row(i, ctk, w) for i, (ctk, w) in enumerate([(c, w) for c in (8, 16, 32, 64) for w in (64, 512)], 1)]
    rows.append(trace_row(9, 32, 512, repeat=1.02))  # a repeat: the noise
    profile = {
        "name": "quick",
        "prompts": "p.json",
        "refs": "r.jsonl",
        "num_prompts": PROMPTS,
        "output_len": TOKENS,
        "ppl_records": 2,
    }
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"notes": ["made by hand"], "profile": profile, "rows": rows}))
    return path


@pytest.fixture
def study(tmp_path: Path) -> Path:
    return write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=stub_profile(tmp_path),
        name="joint",
        space={"centroid_top_k": {"choices": [8, 16, 32, 64]}, "sliding_window": {"choices": [64, 512]}},
        sampler="tpe",
        seed=1,
        n_trials=12,
        fidelity={"mode": "multi", "stages": [0.25]},
    )


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
    old = replace(spec, fidelity=replace(spec.fidelity, mode="full"), sampler="grid", repeats="allow", ppl_memo=False)
    run = replay(old, surface, seed=0, n_trials=20)
    assert all(t.record.full for t in run)
    assert all(
        t.cost_s
        == pytest.approx(
            sum(PHASES.values())
            + sum(surface.traces[surface.key(t.knobs)].latencies_s)
            / (t.record.tps / surface.traces[surface.key(t.knobs)].tps)
        )
        for t in run
    )


def test_a_knob_the_study_sweeps_and_the_grid_holds_at_one_value_is_replayed_fixed(grid, tmp_path):
    # a GPU grid over some of a study's knobs: the grid holds num_speculative_tokens at 3
    def study(spec_choices):
        space = {
            "centroid_top_k": {"choices": [8, 16, 32, 64]},
            "sliding_window": {"choices": [64, 512]},
            "num_speculative_tokens": {"choices": spec_choices},
        }
        folder = tmp_path / f"s{len(spec_choices)}"
        folder.mkdir()
        return load_study(
            write_study(
                folder, manifest=write_manifest(folder), profile=stub_profile(folder), name="j", space=space, n_trials=9
            )
        )

    surface = load_surface(grid)
    spec = surface_spec(study([1, 3, 5]), surface)
    assert sorted(spec.space) == ["centroid_top_k", "sliding_window"] and spec.fixed["num_speculative_tokens"] == 3
    run = replay(replace(spec, sampler="grid"), surface, seed=0, n_trials=10)
    assert all(t.knobs["num_speculative_tokens"] == 3 for t in run[1:])
    data = json.loads(grid.read_text())
    for row in data["rows"]:
        row["knobs"]["num_speculative_tokens"] = 5
    (tmp_path / "five.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="holds num_speculative_tokens at 5, outside"):
        surface_spec(study([1, 3]), load_surface(tmp_path / "five.json"))


def test_the_benchmark_reports_each_grid_paired_by_seed_and_names_the_grids(grid, study, capsys):
    code = time_to_optimum.main(
        [
            "--grid",
            str(grid),
            "--grid",
            f"{study}={grid}",
            "--study",
            str(study),
            "--seeds",
            "4",
            "--trials",
            "9",
            "--processes",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert len(re.findall(r"^per-seed ratio: median (\S+), geometric mean (\S+)", out, re.M)) == 2
    assert len(re.findall(r"^\d of 4 seeds end more than 1% slower", out, re.M)) == 2
    assert f"grids replayed: grid.json (study {study}); grid.json (study {study})" in out
    assert "new: multi-fidelity: PPL gate first, then the front rule after 25% of the first run" in out
    assert (
        time_to_optimum.main(
            [
                "--grid",
                str(grid),
                "--study",
                str(study),
                "--seeds",
                "2",
                "--trials",
                "9",
                "--processes",
                "1",
                "--stages",
                "0.25,0.5",
            ]
        )
        == 0
    )
    assert "the front rule after 25%, 50% of the first run" in capsys.readouterr().out


def replayed(costs, *, best_at=None, copies=()):
    """A replayed study with these trial costs, the trial at ``best_at`` a full one of the best
    configuration, those in ``copies`` closed without a boot (cost 0)."""
    run = []
    for i, cost in enumerate(costs):
        best = i == best_at
        record = measured_record(
            i,
            20.0 if best else 10.0,
            2.3,
            knobs={"centroid_top_k": 64 if best else 8 * (i + 1)},
            feasible=True,
            reuse="copy" if i in copies else None,
        )
        run.append(Replayed(knobs=record.knobs, tps=record.tps, ppl=2.3, feasible=True, record=record, cost_s=cost))
    return run


def test_the_paired_ratio_is_the_old_time_to_the_best_over_the_new_seed_by_seed():
    old = [replayed([10, 30], best_at=1), replayed([10, 20, 50], best_at=2), replayed([10, 20])]
    new = [
        replayed([10, 0, 5, 10], best_at=3, copies=(1,)),
        replayed([10, 10], best_at=1),
        replayed([10, 6], best_at=1),
    ]
    old_out = [time_to_optimum.time_to_best(run, best_tps=20.0) for run in old]
    new_out = [time_to_optimum.time_to_best(run, best_tps=20.0) for run in new]
    assert [o.time_to_best_s for o in old_out] == [40, 80, None]
    assert [o.time_to_best_s for o in new_out] == [25, 20, 16]
    assert [o.boots_to_best for o in new_out] == [3, 2, 2]  # the copy booted nothing
    paired = time_to_optimum.paired_ratio(old_out, new_out)
    assert paired.ratios == pytest.approx((1.6, 4.0))  # 40 / 25, 80 / 20; the third found it in the new sweep only
    assert (paired.only_old, paired.only_new, paired.neither) == (0, 1, 0)
    assert paired.median == pytest.approx(2.8) and paired.geometric_mean == pytest.approx(6.4**0.5)


def test_the_ceiling_is_the_baselines_ppl_boot_and_one_best_trial_measured_to_the_end(grid, capsys, study):
    surface = load_surface(grid)
    best = {"centroid_top_k": 64, "sliding_window": 512, "num_speculative_tokens": 3}  # the fastest under the gate
    run_s = PROMPTS * TOKENS / (10 + 64 / 4)  # its timed run: its prompts' recorded seconds
    ppl_boot = PHASES["boot"] + PHASES["ppl"] + PHASES["stop"]  # the baseline's, its TPS run and warm-up skipped
    assert time_to_optimum.least_time_s(surface, [best]) == pytest.approx(ppl_boot + sum(PHASES.values()) + run_s)
    baseline = dict(zip(surface.knobs, surface.baseline))
    assert time_to_optimum.least_time_s(surface, [best, baseline]) == pytest.approx(
        sum(PHASES.values()) + PROMPTS * TOKENS / (10 + 32 / 4)  # a best baseline: that one trial alone
    )
    assert time_to_optimum.least_time_s(surface, []) is None
    seeds = ["--seeds", "3", "--trials", "9", "--processes", "1"]
    assert time_to_optimum.main(["--grid", str(grid), "--study", str(study), *seeds]) == 0
    ceiling = re.search(
        r"^the ceiling of the per-seed ratio: .* median (\S+) \((\d) seeds", capsys.readouterr().out, re.M
    )
    assert ceiling and float(ceiling[1]) > 0 and int(ceiling[2]) <= 3


def test_a_seed_ending_on_a_best_more_than_1_percent_slower_is_counted(tmp_path):
    csv = tmp_path / "g.csv"
    csv.write_text(
        "study,trial,is_baseline,status,centroid_top_k,tps,ppl\n"
        "g,0,True,complete,32,100,2\ng,1,False,complete,16,99.5,2\ng,2,False,complete,8,98,2\n"
    )
    surface = load_surface(csv)

    def ended(ctk):
        return time_to_optimum.Outcome(
            time_to_best_s=None,
            boots_to_best=None,
            total_s=0.0,
            final_best=None if ctk is None else (("centroid_top_k", ctk),),
        )

    old = [ended(32), ended(32), ended(32), ended(None)]
    new = [ended(16), ended(8), ended(None), ended(8)]  # within 1%, 2% slower, none at all, nothing to compare
    assert time_to_optimum.slower_seeds(old, new, surface) == 2


def test_stages_out_of_order_are_refused(grid, study, capsys):
    with pytest.raises(SystemExit):
        time_to_optimum.main(["--grid", str(grid), "--study", str(study), "--stages", "0.5,0.25"])
    assert "stages must be increasing fractions" in capsys.readouterr().err


def test_a_grid_without_traces_is_refused(tmp_path, study, capsys):
    csv = tmp_path / "g.csv"
    csv.write_text(
        "study,trial,is_baseline,status,centroid_top_k,sliding_window,tps,ppl\ng,0,True,complete,32,512,1,1\n"
    )
    assert time_to_optimum.main(["--grid", str(csv), "--study", str(study)]) == 2
    assert "records no prompt timings" in capsys.readouterr().err


def test_the_stage_noise_is_measured_on_the_repeated_configurations(tmp_path):
    # one configuration booted twice: the second's first 2 prompts ran 10% faster, the rest alike
    first = trace_row(0, 32, 512, baseline=True)
    second = trace_row(1, 32, 512)
    second["latencies_s"] = [s / 1.1 for s in second["latencies_s"][:2]] + second["latencies_s"][2:]
    second["tps"] = TOKENS * PROMPTS / sum(second["latencies_s"])
    path = tmp_path / "g.json"
    rows = [first, second, trace_row(2, 64, 512)]
    path.write_text(json.dumps({"profile": {"num_prompts": PROMPTS}, "rows": rows}))
    noise = load_surface(path).run_noise((2,))
    apart = math.log(1.1) / math.sqrt(2)  # the sd of two values log(1.1) apart
    assert noise.segment_sds == pytest.approx((apart / math.sqrt(2),) * 2) and noise.df == 1
    whole = abs(math.log(second["tps"] / first["tps"])) / math.sqrt(2)
    assert noise.boot_sd == pytest.approx(math.sqrt(max(whole**2 - (0.25**2 + 0.75**2) * noise.segment_sds[0] ** 2, 0)))
    assert load_surface(path).run_noise(()).segment_sds == (0.0,)  # one segment: nothing moves apart from it


def test_a_study_ends_on_its_promotions_best_not_on_a_lucky_search_figure(tmp_path):
    csv = tmp_path / "g.csv"
    csv.write_text(
        "study,trial,is_baseline,status,centroid_top_k,tps,ppl\n"
        "g,0,True,complete,32,100,2.3\ng,1,False,complete,8,90,2.3\ng,2,False,complete,64,110,2.3\n"
        "g,3,False,complete,16,99.5,2.3\n"
    )
    surface = load_surface(csv)  # one row a configuration: no noise to draw, the promotion reads the means
    assert surface.tps_rel_sd == 0.0

    def spec(candidates):
        study = write_study(
            tmp_path,
            manifest=write_manifest(tmp_path),
            profile=stub_profile(tmp_path),
            name=f"promo{candidates}",
            space={"centroid_top_k": {"choices": [8, 16, 32, 64]}},
            gate={"ppl_max": 3.0},
            sampler="grid",
            promotion={"candidates": candidates, "boots": 3},
        )
        return load_study(study)

    # the search read K=8 (truly the slowest) 120 tok/s by luck, K=64 105, K=16 101, the baseline 100
    run = []
    for i, (ctk, measured) in enumerate([(32, 100.0), (8, 120.0), (64, 105.0), (16, 101.0)]):
        record = measured_record(i, measured, 2.3, knobs={"centroid_top_k": ctk}, feasible=True, is_baseline=i == 0)
        run.append(
            Replayed(knobs=record.knobs, tps=surface.point(record.knobs).tps, ppl=2.3, feasible=True, record=record)
        )
    assert time_to_optimum.time_to_best(run, best_tps=110.0).final_best == (("centroid_top_k", 8),)
    # promoted: the two fastest by the search's figures (K=8, K=64), booted again; K=64 is the faster
    assert time_to_optimum.promoted_best(run, spec(2), surface, seed=0) == (("centroid_top_k", 64),)
    assert time_to_optimum.promoted_best(run, spec(0), surface, seed=0) is None  # a study that promotes nothing
