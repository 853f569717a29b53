import json

import pytest

from engine.errors import KnobError, ManifestError
from engine.knobs import (
    KNOBS,
    Knob,
    Target,
    apply_knobs,
    baseline_knobs,
    consumed_knobs,
    parse_assignments,
    validate_knob_values,
)
from engine.manifest import load_manifest, parse_manifest

VIDRAFT = "vidraft-w188-ctk49"


def manifest(env=None, serve=("python", "serve.py"), name="demo"):
    return parse_manifest({"name": name, "model_id": "m", "served_model_name": "s",
                           "serve": list(serve), "env": env or {}})


def test_the_registry_holds_the_three_swept_knobs_with_ranges():
    assert {n: (k.minimum, k.maximum) for n, k in KNOBS.items()} == {
        "sliding_window": (1, 131072),
        "centroid_top_k": (1, 2048),
        "num_speculative_tokens": (1, 64),
    }


def test_the_winning_manifest_consumes_all_three_and_its_baseline_is_as_published():
    m = load_manifest(VIDRAFT)
    assert consumed_knobs(m) == ["sliding_window", "centroid_top_k", "num_speculative_tokens"]
    assert baseline_knobs(m) == {"sliding_window": 188, "centroid_top_k": 49, "num_speculative_tokens": 7}


def test_applying_patches_the_json_in_env_and_leaves_everything_else_alone():
    m = load_manifest(VIDRAFT)
    patched = apply_knobs(m, {"sliding_window": 160, "num_speculative_tokens": "5"})
    changed = {k for k in m.env if m.env[k] != patched.env[k]}
    assert changed == {"SLIDING_WINDOW", "HF_OVERRIDES", "SPECULATIVE_CONFIG"}
    assert patched.env["SLIDING_WINDOW"] == "160"
    assert json.loads(patched.env["HF_OVERRIDES"]) == {"text_config": {"sliding_window": 160}}
    spec = json.loads(patched.env["SPECULATIVE_CONFIG"])
    assert spec == {"method": "mtp", "model": "/tmp/qat-assistant", "num_speculative_tokens": 5}
    # the author's compact JSON stays compact, so only the value differs
    assert patched.env["SPECULATIVE_CONFIG"] == m.env["SPECULATIVE_CONFIG"].replace(":7}", ":5}")
    assert m.env["SLIDING_WINDOW"] == "188"  # the original is not modified


def test_a_window_label_alone_gets_the_hf_overrides_json_created():
    patched = apply_knobs(manifest({"SLIDING_WINDOW": "512"}), {"sliding_window": 64})
    assert json.loads(patched.env["HF_OVERRIDES"]) == {"text_config": {"sliding_window": 64}}


def test_existing_hf_overrides_without_a_window_are_merged_not_replaced():
    m = manifest({"SLIDING_WINDOW": "512", "HF_OVERRIDES": '{"text_config": {"rope_theta": 1}}'})
    patched = apply_knobs(m, {"sliding_window": 100})
    assert json.loads(patched.env["HF_OVERRIDES"]) == {"text_config": {"rope_theta": 1, "sliding_window": 100}}


def test_cli_flags_with_json_values_are_patched_in_both_spellings():
    serve = ["vllm", "serve", "model", "--hf-overrides", '{"sliding_window": 512}',
             '--speculative_config={"method": "ngram", "num_speculative_tokens": 3}']
    m = manifest(serve=serve)
    assert consumed_knobs(m) == ["sliding_window", "num_speculative_tokens"]
    assert baseline_knobs(m) == {"sliding_window": 512, "num_speculative_tokens": 3}
    patched = apply_knobs(m, {"sliding_window": 64, "num_speculative_tokens": 6})
    assert json.loads(patched.serve[4]) == {"sliding_window": 64}  # top-level path kept
    flag, _, value = patched.serve[5].partition("=")
    assert flag == "--speculative_config"
    assert json.loads(value) == {"method": "ngram", "num_speculative_tokens": 6}
    assert "HF_OVERRIDES" not in patched.env  # a flag-configured stack gets no env var


def test_a_plain_cli_flag_target_is_one_registry_entry():
    registry = {**KNOBS, "max_model_len": Knob(
        name="max_model_len", minimum=16, maximum=131072,
        targets=(Target("flag", "--max-model-len"),), doc="context length")}
    m = manifest(serve=["vllm", "serve", "model", "--max-model-len", "4096"])
    assert consumed_knobs(m, registry=registry) == ["max_model_len"]
    assert baseline_knobs(m, registry=registry) == {"max_model_len": 4096}
    assert apply_knobs(m, {"max_model_len": 2048}, registry=registry).serve[-1] == "2048"


def test_an_unknown_knob_lists_the_valid_ones():
    with pytest.raises(KnobError, match=r"unknown knob 'windw'; valid knobs: \['centroid_top_k', "
                                        r"'num_speculative_tokens', 'sliding_window'\]"):
        validate_knob_values(load_manifest(VIDRAFT), {"windw": 3})


def test_a_knob_the_manifest_does_not_consume_names_manifest_and_knob():
    m = manifest({"SLIDING_WINDOW": "512"}, name="window-only")
    with pytest.raises(KnobError, match=r"manifest 'window-only' does not consume knob 'centroid_top_k'"
                                        r": it sets none of CENTROID_TOP_K"):
        apply_knobs(m, {"centroid_top_k": 8})


def test_a_knob_a_file_manifest_does_not_consume_names_the_file(tmp_path):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"name": "p", "model_id": "m", "served_model_name": "s", "serve": ["x"]}))
    with pytest.raises(KnobError, match=rf"{path} does not consume knob 'sliding_window'"):
        validate_knob_values(load_manifest(path), {"sliding_window": 8})


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("sliding_window", 0, r"value 0 is out of range 1\.\.131072"),
        ("sliding_window", "200000", r"value 200000 is out of range 1\.\.131072"),
        ("centroid_top_k", 4096, r"value 4096 is out of range 1\.\.2048 \(.*2,048 clusters"),
        ("num_speculative_tokens", 65, r"value 65 is out of range 1\.\.64"),
        ("sliding_window", "3.5", r"value '3\.5' is not an integer; valid range 1\.\.131072"),
        ("sliding_window", 3.0, r"value 3\.0 is not an integer"),
        ("centroid_top_k", True, r"value True is not an integer"),
        ("centroid_top_k", "abc", r"value 'abc' is not an integer; valid range 1\.\.2048"),
    ],
)
def test_bad_values_name_the_knob_value_and_range(knob, value, message):
    with pytest.raises(KnobError, match=rf"knob '{knob}': {message}"):
        validate_knob_values(load_manifest(VIDRAFT), {knob: value})


def test_a_manifest_with_a_garbage_knob_value_is_a_manifest_error():
    with pytest.raises(ManifestError, match=r"CENTROID_TOP_K|knob 'centroid_top_k': value 'lots'"):
        baseline_knobs(manifest({"CENTROID_TOP_K": "lots"}))
    with pytest.raises(ManifestError, match=r"HF_OVERRIDES is not valid JSON"):
        consumed_knobs(manifest({"HF_OVERRIDES": "{sliding_window: 3}"}))


def test_parse_assignments():
    assert parse_assignments(["sliding_window=32", " centroid_top_k = 8 "]) == {
        "sliding_window": "32", "centroid_top_k": "8"}
    with pytest.raises(KnobError, match=r"--set 'sliding_window': expected knob=value"):
        parse_assignments(["sliding_window"])


def test_a_json_target_whose_parent_is_not_an_object_is_a_manifest_error():
    m = manifest({"SLIDING_WINDOW": "512", "HF_OVERRIDES": '{"text_config": 5}'})
    with pytest.raises(ManifestError, match=r"HF_OVERRIDES: 'text_config' must be a JSON object"):
        apply_knobs(m, {"sliding_window": 64})
