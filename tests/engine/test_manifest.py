import json

import pytest

from engine.config import MANIFESTS_DIR, load_manifest, parse_manifest
from errors import ManifestError

VALID = {
    "name": "demo",
    "model_id": "google/gemma-4-E4B-it",
    "served_model_name": "gemma-4-e4b-it",
    "port": 8000,
    "serve": ["python", "serve.py"],
    "env": {"MAX_MODEL_LEN": "4096"},
    "dependencies": ["vllm==0.22.0"],
}


def write(tmp_path, data, name="manifest.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_loads_the_challenge_format_and_keeps_unknown_fields(tmp_path):
    manifest = load_manifest(write(tmp_path, {**VALID, "notes": {"author": "x"}}))
    assert manifest.serve == ["python", "serve.py"]
    assert manifest.env == {"MAX_MODEL_LEN": "4096"}
    assert manifest.to_json_dict()["notes"] == {"author": "x"}
    assert manifest.source == tmp_path / "manifest.json"


def test_a_bare_name_means_studies_manifests():
    manifest = load_manifest("reference")
    assert manifest.source == MANIFESTS_DIR / "reference.json"


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ManifestError, match=r"'no-such-stack' not found.*known names: \[.*'reference'"):
        load_manifest("no-such-stack")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ('{"name": "demo", "serve": [', r"not valid JSON"),
        ("[1, 2]", r"must be a JSON object, got list"),
        ({k: v for k, v in VALID.items() if k != "serve"}, r"field serve: Field required"),
        ({**VALID, "serve": []}, r"field serve: .*at least 1"),
        ({**VALID, "env": {"MAX_MODEL_LEN": 4096}}, r"field env\.MAX_MODEL_LEN: Input should be a valid string"),
        ({**VALID, "port": 70000}, r"field port: .*65535"),
        ({**VALID, "serve": ["python", "serve.py", "--port", "{prot}"]}, r"unknown placeholder \{prot\}"),
    ],
)
def test_a_malformed_manifest_names_its_file_and_problem(tmp_path, data, message):
    path = write(tmp_path, data)
    with pytest.raises(ManifestError, match=message) as info:
        load_manifest(path)
    assert str(path) in str(info.value)


def test_json_values_in_env_are_not_placeholders():
    manifest = parse_manifest({**VALID, "env": {"HF_OVERRIDES": '{"text_config": {"sliding_window": 188}}'}})
    assert not manifest.uses_placeholder("port")


def test_shipped_manifests_validate():
    for path in sorted(MANIFESTS_DIR.glob("*.json")):
        assert load_manifest(path).name
