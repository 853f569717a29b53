"""The sweep on the real reference stack (Gemma 3 270M on CPU): three short trials."""

from __future__ import annotations

import pytest

from sweep.search import load_study
from sweep.search._dryrun import plan_trials
from tests.sweep.kit import run_in_process

# Tiny on purpose: three boots of the real model, a few tokens each.
TINY = """
name = "reference-tiny"
manifest = "reference"
sampler = "grid"
seed = 14
n_trials = 3
identity_required = true

[gate]
ppl_max_ratio = 1.05

[profile]
name = "quick"
num_prompts = 2
output_len = 16
ppl_records = 2
warmup_requests = 1
warmup_output_len = 4

[fidelity]
mode = "full"

[space.centroid_top_k]
choices = [8, 32]

[space.num_speculative_tokens]
choices = [1, 3]
"""

# Multi-fidelity on the real model: window 32 is far over the +5% gate; the rule, left at its
# default (the reference stack says it caches no prefixes), stops it once its PPL is known.
GATED = """
name = "reference-gated"
manifest = "reference"
sampler = "grid"
seed = 1
n_trials = 2

[gate]
ppl_max_ratio = 1.05

[profile]
name = "quick"
num_prompts = 4
output_len = 16
ppl_records = 2
warmup_requests = 1
warmup_output_len = 4

[space.sliding_window]
choices = [32, 512]
"""


@pytest.mark.slow
def test_drafter_knobs_on_the_reference_stack_keep_ppl_and_greedy_output(ray_connected, tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    # the seed draws one trial per lossless knob: K=8 alone, then 1 speculative token alone
    assert [p.knobs for p in plan_trials(load_study(path))[1:3]] == [
        {"centroid_top_k": 8, "num_speculative_tokens": 3},
        {"centroid_top_k": 32, "num_speculative_tokens": 1},
    ]

    result, log = run_in_process(path, f"sqlite:///{tmp_path}/s.db", tmp_path / "runs")
    baseline, *trials = result.records
    lossless = ("centroid_top_k", "num_speculative_tokens")
    assert baseline.is_baseline and [baseline.knobs[k] for k in lossless] == [32, 3], log
    assert [[t.knobs[k] for k in lossless] for t in trials] == [[8, 3], [32, 1]]
    assert {r.knobs["sliding_window"] for r in result.records} == {512}  # the target's own window throughout
    assert baseline.status == "complete" and baseline.tps > 0 and baseline.feasible, log
    for trial in trials:
        assert trial.status == "complete" and trial.tps > 0, log
        assert trial.ppl == pytest.approx(baseline.ppl, rel=1e-6)  # the drafter never touches the target's PPL
        assert trial.identity_diff_prompts == 0 and trial.feasible
        assert len(trial.measurement.output_text_sha256) == 2  # the identity evidence: one hash a prompt
        assert trial.metric("acceptance_rate") is not None and 0 <= trial.metric("acceptance_rate") <= 1


@pytest.mark.slow
def test_a_window_over_the_gate_is_stopped_after_its_probe_on_the_reference_stack(ray_connected, tmp_path):
    path = tmp_path / "gated.toml"
    path.write_text(GATED)
    spec = load_study(path)
    assert spec.fidelity.mode == "multi", spec.fidelity.describe()
    result, log = run_in_process(path, f"sqlite:///{tmp_path}/s.db", tmp_path / "runs")
    baseline, gated = result.records
    assert baseline.full and baseline.feasible and baseline.measurement.prompts_timed == 4, log
    assert gated.knobs["sliding_window"] == 32 and gated.stopped == "gate" and not gated.feasible, log
    assert gated.ppl > baseline.gate and gated.measurement.prompts_timed == 1 and gated.tps > 0
    assert "(probe: 1 of 4 prompts)" in log and "infeasible: stopped at the gate" in log
    # the probe saved the other three prompts' time: its TPS phase is a quarter of the baseline's, or so
    assert gated.timings["tps"] < baseline.timings["tps"] / 2
    assert result.front == [baseline]
