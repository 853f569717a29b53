"""Multi-fidelity's rule (sweep.search) on hand-made records, and its study setting (sweep.search)."""

import math
import tempfile
from pathlib import Path

import pytest

from engine.measurement import Measurement, Partial
from errors import StudySpecError
from sweep.run import parse_args
from sweep.search import load_study
from sweep.search._fidelity import FidelitySpec, build_plan, decide, gate_first_unsafe, stage_counts
from sweep.store import TrialRecord
from tests.stacks import stub_profile, write_ppl_refs
from tests.sweep.kit import write_manifest, write_study

SPEC = FidelitySpec(stages=(0.25,), z=2.0, floor=0.03)


def record(number, *, tps, ppl=2.3, feasible=True, first_rate=None, prompts=8, stopped=None, status="complete"):
    """A measured trial whose first two prompts ran at ``first_rate`` tok/s (default: its TPS)."""
    latencies = [10 / (first_rate or tps)] * 2 + [10 / tps] * (prompts - 2)
    m = Measurement(
        tps=tps,
        ppl=ppl,
        ppl_mean_record=ppl,
        completion_tokens=10 * prompts,
        tps_wall_s=10 * prompts / tps,
        ppl_target_tokens=10,
        num_prompts=prompts,
        num_ppl_records=2,
        prompt_latencies_s=latencies,
        prompt_tokens=[10] * prompts,
        stopped=stopped,
    )
    return TrialRecord(
        study_name="s", trial_number=number, status=status, knobs={}, measurement=m, gate=2.4, feasible=feasible
    )


def partial(rate, *, ppl=2.3, timed=2, planned=8):
    return Partial(
        prompts_timed=timed,
        prompts_planned=planned,
        tps=rate,
        latencies_s=(10 / rate,) * timed,
        tokens=(10,) * timed,
        ppl=ppl,
    )


def plan_from(records, gate=2.4):
    return build_plan(SPEC, PROFILE_8, gate=gate, records=records)


PROFILE_8 = stub_profile(Path(tempfile.mkdtemp(prefix="fidelity-")), num_prompts=8)  # stages after 2 of 8 prompts


def test_stage_counts_round_each_fraction_inside_the_run(tmp_path):
    assert stage_counts(FidelitySpec(stages=(0.25, 0.5)), stub_profile(tmp_path, num_prompts=8)) == (2, 4)
    assert stage_counts(FidelitySpec(stages=(0.1,)), stub_profile(tmp_path, num_prompts=4)) == (1,)
    assert stage_counts(FidelitySpec(stages=(0.25,)), stub_profile(tmp_path, num_prompts=1)) == ()


def test_the_ratio_of_a_run_to_its_first_prompts_is_learned_from_full_trials_only():
    full = [record(0, tps=20, first_rate=25), record(1, tps=10, first_rate=12.5), record(2, tps=30, first_rate=37.5)]
    stopped = [record(3, tps=50, first_rate=10, stopped="gate"), record(4, tps=50, first_rate=10, status="pruned")]
    plan = plan_from(full + stopped)
    median, spread, trials = plan.ratios[2]
    assert median == pytest.approx(0.8) and spread == pytest.approx(0, abs=1e-9) and trials == 3
    assert plan.front == ((30, 2.3),) and plan.gate == 2.4
    assert plan_from(full[:1]).ratios == {}  # one full trial cannot say how noisy the ratio is


def test_the_gate_stops_a_trial_as_soon_as_its_ppl_is_known():
    stop = decide(plan_from([]), partial(20, ppl=2.5))
    assert (
        stop.kind == "gate" and "PPL 2.5000 is over the gate 2.4000" in stop.reason and "2 of 8 prompts" in stop.reason
    )
    assert decide(plan_from([]), partial(20, ppl=2.39)) is None


def test_a_trial_that_cannot_reach_the_front_even_with_its_noise_is_pruned():
    plan = plan_from([record(0, tps=20, first_rate=20), record(1, tps=30, first_rate=30)])
    limit = 30 / math.exp(2 * 0.03)  # the best front point, over the optimism of z x the noise floor
    stop = decide(plan, partial(limit * 0.99))
    assert stop.kind == "front" and "front point 30.00 tok/s has PPL 2.3000" in stop.reason
    assert decide(plan, partial(limit * 1.01)) is None
    # a lower PPL than every front point is a front point whatever its speed
    assert decide(plan, partial(5, ppl=2.2)) is None


def test_an_unsteady_trial_or_an_unsteady_study_is_given_more_room():
    noisy = plan_from(
        [record(0, tps=20, first_rate=25), record(1, tps=30, first_rate=30), record(2, tps=10, first_rate=10)]
    )
    assert noisy.ratios[2][1] > 0.1
    assert decide(noisy, partial(26)) is None
    steady = plan_from([record(0, tps=20, first_rate=20), record(1, tps=30, first_rate=30)])
    assert decide(steady, partial(26)).kind == "front"
    shaky = Partial(
        prompts_timed=2, prompts_planned=8, tps=26, latencies_s=(10 / 40, 10 / 17), tokens=(10, 10), ppl=2.3
    )
    assert decide(steady, shaky) is None  # its own two prompts differ by 2x: the standard error covers 30


def test_nothing_is_pruned_at_a_stage_the_rule_has_not_learned():
    plan = plan_from([record(0, tps=20), record(1, tps=30)])
    assert decide(plan, partial(1, timed=3)) is None


# --- the study setting ---------------------------------------------------------------------


def study(tmp_path, *, fidelity=None, shared_ids=False, prefix_caching=None, sampler="tpe"):
    profile = stub_profile(tmp_path, num_prompts=4)
    if shared_ids:  # reference records named like timed prompts: the PPL pass could warm them
        refs = write_ppl_refs(tmp_path / "refs.jsonl", 6)
        refs.write_text(refs.read_text().replace('"id": "r', '"id": "p'))
    manifest = write_manifest(tmp_path, prefix_caching=prefix_caching)
    fields = {} if fidelity is None else {"fidelity": fidelity}
    path = write_study(
        tmp_path,
        manifest=manifest,
        profile=profile,
        n_trials=3,
        sampler=sampler,
        space={"centroid_top_k": {"choices": [16, 32]}},
        **fields,
    )
    if fidelity is None:  # the kit's default is full fidelity; a study that says nothing is tested here
        path.write_text(path.read_text().replace('\n[fidelity]\nmode = "full"\n', "\n"))
    return path


def test_a_study_that_says_nothing_gets_multi_fidelity_where_it_is_safe(tmp_path):
    spec = load_study(study(tmp_path))
    assert spec.fidelity.mode == "multi" and spec.fidelity.stages == (0.25,)
    assert "gate first" in spec.fidelity.describe()


def test_where_the_ppl_pass_could_warm_a_timed_prompt_the_default_is_full_and_says_why(tmp_path):
    spec = load_study(study(tmp_path, shared_ids=True))
    assert spec.fidelity.mode == "full" and "share 3 prompt(s) with the timed set" in spec.fidelity.describe()
    assert load_study(study(tmp_path, shared_ids=True, prefix_caching=False)).fidelity.mode == "multi"
    with pytest.raises(StudySpecError, match=r"'fidelity.mode' = \"multi\" is not safe here: the PPL records share"):
        load_study(study(tmp_path, shared_ids=True, fidelity={"mode": "multi"}))


def test_with_a_sampler_blind_to_pruned_trials_only_the_gate_stops_a_trial(tmp_path):
    # GP models COMPLETE trials only: a pruned configuration it cannot see, it proposes again.
    spec = load_study(study(tmp_path, sampler="gp", fidelity={"stages": [0.25, 0.5]}))
    assert spec.fidelity.mode == "multi" and "the front rule is off (the gp sampler" in spec.fidelity.describe()
    assert stage_counts(spec.fidelity, PROFILE_8) == (2,)  # the gate's stage alone
    assert build_plan(spec.fidelity, PROFILE_8, gate=3.0, records=[]).record()["front_rule_off"]
    assert load_study(study(tmp_path, sampler="tpe")).fidelity.front_rule_off is None


def test_the_cli_overrides_the_mode_for_one_run_and_resumes_with_it(tmp_path):
    path = study(tmp_path)
    assert load_study(path, fidelity="full").fidelity.mode == "full"
    with pytest.raises(StudySpecError, match=r"--fidelity = \"multi\" is not safe here"):
        load_study(study(tmp_path, shared_ids=True), fidelity="multi")
    args = parse_args(["--study", str(path), "--fidelity", "full"])
    assert args.fidelity == "full" and "--fidelity full" in args.resume_command()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"mode": "half"}, r"'fidelity.mode' must be \"multi\" or \"full\", got 'half'"),
        ({"stages": [0.5, 0.25]}, r"'fidelity.stages' must be increasing fractions"),
        ({"stages": [1.0]}, r"'fidelity.stages' must be increasing fractions"),
        ({"z": -1}, r"'fidelity.z' must be a number >= 0"),
        ({"min_trials": 1}, r"'fidelity.min_trials' must be an integer >= 2"),
        ({"pruner": "median"}, r"\[fidelity\] unknown field\(s\) \['pruner'\]"),
    ],
)
def test_a_bad_fidelity_table_is_a_clear_error(tmp_path, table, message):
    with pytest.raises(StudySpecError, match=message):
        load_study(study(tmp_path, fidelity=table))


def test_gate_first_is_unsafe_without_a_stage():
    assert gate_first_unsafe(None, PROFILE_8, ()) == "no stage fits a run of 8 prompt(s)"  # type: ignore[arg-type]
