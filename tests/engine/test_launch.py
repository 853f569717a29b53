import json
import sys

from engine.knobs import parse_knobs
from engine.launch import build_launch
from engine.manifest import REPO_ROOT, load_manifest, parse_manifest
from tests.stacks import STUB_MANIFEST


def test_placeholders_are_filled_and_the_port_is_free_and_exported():
    manifest = load_manifest(STUB_MANIFEST)
    launch = build_launch(manifest, parse_knobs(manifest, {"sliding_window": 64}), host="127.0.0.1")
    assert launch.argv == [sys.executable, f"{REPO_ROOT}/tests/stacks/stub_server.py"]
    assert launch.cwd == REPO_ROOT
    assert launch.env["PORT"] == str(launch.port) and launch.port != 8000
    assert launch.env["HOST"] == "127.0.0.1"
    assert launch.env["HF_HUB_OFFLINE"] == "1"
    assert json.loads(launch.env["HF_OVERRIDES"]) == {"text_config": {"sliding_window": 64}}
    assert launch.knobs == {"sliding_window": 64, "centroid_top_k": 32, "num_speculative_tokens": 3}
    assert launch.base_url == f"http://127.0.0.1:{launch.port}"


def test_a_port_placeholder_in_argv_gets_a_free_port_too():
    m = parse_manifest(
        {
            "name": "a",
            "model_id": "m",
            "served_model_name": "s",
            "serve": ["vllm", "serve", "m", "--port", "{port}", "--host", "{host}"],
        }
    )
    launch = build_launch(m, host="127.0.0.1")
    assert launch.argv[4] == str(launch.port) != "8000"
    assert launch.argv[6] == "127.0.0.1"


def test_a_manifest_that_cannot_be_told_a_port_keeps_its_own(tmp_path):
    launch = build_launch(load_manifest("vidraft-w188-ctk49"))
    assert launch.port == 8000 and launch.env["PORT"] == "8000"
    assert launch.argv == ["python", "serve.py"]
    # serve runs in the manifest's folder, as the challenge runs it in the submission folder
    assert launch.cwd == REPO_ROOT / "studies" / "manifests"


def test_two_launches_get_different_ports():
    m = load_manifest(STUB_MANIFEST)
    ports = {build_launch(m).port for _ in range(20)}
    assert len(ports) == 20
