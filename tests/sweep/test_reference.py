"""The sweep on the real reference stack (Gemma 3 270M on CPU): two short trials."""

from __future__ import annotations

import pytest

from sweep.dryrun import plan_trials
from sweep.spec import load_study
from tests.sweep.kit import run_in_process

# Tiny on purpose: two boots of the real model, a few tokens each.
TINY = """
name = "reference-tiny"
manifest = "reference"
sampler = "grid"
seed = 3
n_trials = 2
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

[space.centroid_top_k]
choices = [8, 32]
"""


@pytest.mark.slow
def test_a_drafter_knob_on_the_reference_stack_keeps_ppl_and_greedy_output(ray_connected, tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    assert plan_trials(load_study(path))[1] == ({"centroid_top_k": 8}, False)  # the seed draws K=8 second

    result, log = run_in_process(path, f"sqlite:///{tmp_path}/s.db", tmp_path / "runs")
    baseline, trial = result.records
    assert baseline.is_baseline and baseline.status == trial.status == "complete", log
    assert trial.knobs["centroid_top_k"] == 8 and baseline.knobs["centroid_top_k"] == 32
    assert baseline.tps > 0 and trial.tps > 0
    assert trial.ppl == pytest.approx(baseline.ppl, rel=1e-6)  # the drafter never touches the target's PPL
    assert trial.identity_diff_prompts == 0 and trial.feasible and baseline.feasible
    assert len(trial.token_ids) == 2 and all(len(ids) == 16 for ids in trial.token_ids)
    assert trial.acceptance_rate is not None and 0 <= trial.acceptance_rate <= 1
