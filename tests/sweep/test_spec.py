import json
from pathlib import Path

import pytest

from errors import StudySpecError
from sweep.judgement import BETWEEN_PRIOR_DF, DEFAULT_CONFIRM_MAX_BOOTS
from sweep.search import SAMPLERS, KnobSpace, load_study
from tests.stacks import stub_profile
from tests.sweep.kit import write_manifest, write_study

STUDIES = Path(__file__).resolve().parents[2] / "studies"


@pytest.fixture
def stub(tmp_path):
    return {"manifest": write_manifest(tmp_path), "profile": stub_profile(tmp_path)}


def study_file(tmp_path, stub, **fields):
    fields.setdefault("space", {"centroid_top_k": {"choices": [16, 32]}})
    return write_study(tmp_path, manifest=stub["manifest"], profile=stub["profile"], **fields)


def edit(path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def refused(path: Path, *fragments: str, **overrides) -> str:
    with pytest.raises(StudySpecError) as info:
        load_study(path, **overrides)
    message = str(info.value)
    assert str(path) in message or overrides
    for fragment in fragments:
        assert fragment in message
    return message


def test_a_valid_study_reads_into_a_frozen_spec(tmp_path, stub):
    path = study_file(
        tmp_path,
        stub,
        n_trials=5,
        sampler="nsga2",
        seed=7,
        workers=2,
        identity_required=True,
        space={"sliding_window": {"low": 32, "high": 512, "step": 32}, "centroid_top_k": {"choices": [8, 32]}},
        fixed={"num_speculative_tokens": 4},
        resources={"accelerator_type": "A10G", "num_gpus": 1, "num_cpus": 2},
    )
    spec = load_study(path)
    assert (spec.name, spec.n_trials, spec.sampler, spec.seed, spec.workers) == ("stubstudy", 5, "nsga2", 7, 2)
    assert spec.identity_required and spec.fixed == {"num_speculative_tokens": 4}
    assert spec.space["sliding_window"] == KnobSpace(knob="sliding_window", low=32, high=512, step=32)
    assert spec.space["centroid_top_k"].values() == [8, 32]
    assert spec.gate.limit([2.0]) == pytest.approx(2.1)
    assert (spec.resources.accelerator_type, spec.resources.num_gpus, spec.resources.num_cpus) == ("A10G", 1, 2)
    assert spec.profile.num_prompts == stub["profile"].num_prompts
    assert spec.baseline() == {"sliding_window": 512, "centroid_top_k": 32, "num_speculative_tokens": 3}
    assert (spec.repeats, spec.ppl_memo) == ("copy", True)  # the defaults: nothing booted twice by accident
    assert load_study(study_file(tmp_path, stub, n_trials=2, repeats="allow", ppl_memo=False)).repeats == "allow"
    with pytest.raises(AttributeError):
        spec.n_trials = 3  # type: ignore[misc]


def test_a_grid_study_without_a_budget_measures_the_baseline_then_every_point(tmp_path, stub):
    spec = load_study(study_file(tmp_path, stub, sampler="grid", space={"centroid_top_k": {"choices": [8, 16, 32]}}))
    assert spec.n_trials == 4


def test_cli_overrides_replace_budget_profile_and_workers(tmp_path, stub):
    spec = load_study(study_file(tmp_path, stub, n_trials=5), n_trials=2, workers=3)
    assert (spec.n_trials, spec.workers) == (2, 3)
    with pytest.raises(StudySpecError, match="unknown profile 'nope'; valid: .*quick"):
        load_study(study_file(tmp_path, stub, n_trials=5), profile="nope")


def test_an_unknown_field_is_named_with_the_valid_ones(tmp_path, stub):
    path = study_file(tmp_path, stub, n_trials=3, n_trails=4)
    refused(path, "unknown field(s) ['n_trails']", "'n_trials'")


def test_the_promotions_machine_prior_reads_with_the_degrees_of_freedom_it_is_worth(tmp_path, stub):
    stated = load_study(
        study_file(tmp_path, stub, n_trials=3, promotion={"between_prior": 0.05, "between_prior_df": 6})
    )
    assert (stated.promotion.between_prior, stated.promotion.between_prior_df) == (0.05, 6.0)
    default = load_study(study_file(tmp_path, stub, n_trials=3, promotion={"candidates": 2}))
    assert default.promotion.between_prior_df == BETWEEN_PRIOR_DF


def test_the_confirmations_cap_defaults_to_its_documented_value_and_never_under_its_minimum(tmp_path, stub):
    default = load_study(study_file(tmp_path, stub, n_trials=3, promotion={"candidates": 2}))
    assert default.promotion.confirm_max_boots == DEFAULT_CONFIRM_MAX_BOOTS
    many = load_study(
        study_file(tmp_path, stub, n_trials=3, promotion={"confirm_boots": DEFAULT_CONFIRM_MAX_BOOTS + 2})
    )
    assert many.promotion.confirm_max_boots == DEFAULT_CONFIRM_MAX_BOOTS + 2  # a fixed confirmation of that many


def test_a_bad_sampler_lists_the_samplers(tmp_path, stub):
    refused(study_file(tmp_path, stub, n_trials=3, sampler="annealing"), "field 'sampler'", str(list(SAMPLERS)))


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"n_trials": 0}, "field 'n_trials' must be an integer >= 1"),
        ({"n_trials": 3, "workers": "two"}, "field 'workers' must be an integer >= 1"),
        ({"n_trials": 3, "identity_required": "yes"}, "field 'identity_required' must be true or false"),
        ({"n_trials": 3, "gate": {"ppl_max": 2.4, "ppl_max_ratio": 1.05}}, "[gate] needs exactly one of"),
        ({"n_trials": 3, "gate": {"ppl_max_ratio": 0.9}}, "field 'gate.ppl_max_ratio' must be a number >= 1"),
        ({"n_trials": 3, "resources": {"gpus": 1}}, "[resources] unknown field(s) ['gpus']"),
        (
            {"n_trials": 3, "space": {"centroid_top_k": {"low": 64, "high": 8}}},
            "'space.centroid_top_k.high' (8) is below",
        ),
        ({"n_trials": 3, "space": {"centroid_top_k": {"low": 8}}}, "[space.centroid_top_k] must have either 'choices'"),
        ({"n_trials": 3, "space": {"centroid_top_k": {"choices": [32, 4096]}}}, "out of range 1..2048"),
        (
            {"n_trials": 3, "space": {"centroid_top_k": {"choices": [8, 16]}}},
            "does not contain the manifest's own value 32",
        ),
        ({"n_trials": 3, "fixed": {"centroid_top_k": 8}}, "[fixed] knob 'centroid_top_k' is also swept"),
        ({"n_trials": 3, "objectives": {"tps": "minimize", "ppl": "minimize"}}, "field 'objectives'"),
        ({"n_trials": 3, "repeats": "often"}, "field 'repeats' must be \"copy\""),
        ({"n_trials": 3, "ppl_memo": "on"}, "field 'ppl_memo' must be true or false"),
        (
            {"n_trials": 3, "promotion": {"candidates": 2, "between_prior_df": 0}},
            "field 'promotion.between_prior_df' must be a number > 0",
        ),
        (
            {"n_trials": 3, "promotion": {"candidates": 2, "confirm_boots": 4, "confirm_max_boots": 3}},
            "field 'promotion.confirm_max_boots' must be an integer >= 4",
        ),
    ],
)
def test_bad_fields_are_refused_naming_file_and_field(tmp_path, stub, fields, fragment):
    refused(study_file(tmp_path, stub, **fields), fragment)


def test_a_missing_gate_and_missing_budget_are_named(tmp_path, stub):
    path = study_file(tmp_path, stub)
    refused(path, "field 'n_trials' is required")
    refused(
        edit(study_file(tmp_path, stub, n_trials=2), "[gate]\nppl_max_ratio = 1.05\n", ""), "[gate] needs exactly one"
    )


def test_an_unknown_knob_is_refused_with_the_known_knobs(tmp_path, stub):
    path = study_file(tmp_path, stub, n_trials=3, space={"top_p": {"choices": [1, 2]}})
    refused(path, "[space.top_p] unknown knob 'top_p'", "'centroid_top_k'", "'sliding_window'")


def test_a_knob_the_manifest_does_not_consume_is_refused(tmp_path, stub):
    manifest = json.loads(stub["manifest"].read_text())
    del manifest["env"]["CENTROID_TOP_K"]
    stub["manifest"].write_text(json.dumps(manifest))
    refused(study_file(tmp_path, stub, n_trials=3), "knob 'centroid_top_k' is not consumed by manifest")


def test_a_missing_manifest_and_missing_data_are_named(tmp_path, stub):
    path = edit(study_file(tmp_path, stub, n_trials=3), str(stub["manifest"]), str(tmp_path / "nope.json"))
    refused(path, "field 'manifest'", "nope.json")
    path = edit(study_file(tmp_path, stub, n_trials=3), str(stub["profile"].prompts), str(tmp_path / "gone.json"))
    refused(path, "gone.json", "cannot read prompt set")


def test_an_unknown_study_name_lists_the_shipped_studies():
    with pytest.raises(StudySpecError, match=r"study 'nosuch' not found .* known studies: \[.*'ctk'"):
        load_study("nosuch")


@pytest.mark.parametrize("name", ["ctk", "window", "spec", "joint"])
def test_the_shipped_studies_are_valid_on_the_reference_stack(name):
    spec = load_study(name)
    assert spec.manifest.name == "reference" and spec.profile.name == "quick"
    assert spec.gate.ppl_max_ratio == pytest.approx(1.05)
    assert spec.n_trials >= 6
    if name == "window":
        assert min(spec.space["sliding_window"].values()) <= 32  # where the gate bites
