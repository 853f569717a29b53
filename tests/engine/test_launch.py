import json
import re
import sys

import pytest

from engine.config import REPO_ROOT, load_manifest, parse_knobs, parse_manifest
from engine.launch import build_launch, check_machine
from engine.stackside import STACKWRAP
from errors import EngineBootError, ManifestError
from tests.stacks import STUB_MANIFEST, stub_manifest


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


# --- the stability knobs: CPU affinity and the warm-up bridge through engine/stackside/_stackwrap.py ---

WRAPPER = str(STACKWRAP)
STUB_ARGV = [sys.executable, f"{REPO_ROOT}/tests/stacks/stub_server.py"]


def test_at_their_off_values_the_stack_starts_itself():
    launch = build_launch(load_manifest("reference"))
    assert launch.argv == [sys.executable, "-m", "engine.reference.serve"] == launch.stack_command
    assert launch.knobs["warmup_prompts"] == 0 and launch.knobs["cpu_affinity"] == "none"


def test_cpu_affinity_starts_the_stack_through_the_wrapper_on_its_own_port():
    manifest = stub_manifest(CPU_AFFINITY="0")
    launch = build_launch(manifest, parse_knobs(manifest, {}))
    assert launch.argv == [
        sys.executable,
        "-I",
        WRAPPER,
        "--listen",
        f"127.0.0.1:{launch.port}",
        "--cpus",
        "0",
        "--",
        *STUB_ARGV,
    ]
    assert launch.stack_command == STUB_ARGV and launch.env["PORT"] == str(launch.port)  # no bridge: one port


def test_the_bridge_moves_the_stack_to_a_loopback_port_of_its_own():
    manifest = stub_manifest(WARMUP_NUM_PROMPTS="8", WARMUP_MAX_TOKENS="2", WARMUP_SEED="5", CPU_AFFINITY="0")
    launch = build_launch(manifest, parse_knobs(manifest, {"warmup_prompts": 16}), host="0.0.0.0")
    inner = int(launch.env["PORT"])
    assert inner != launch.port and launch.env["HOST"] == "127.0.0.1"  # the stack: loopback only
    assert launch.argv[:3] == [sys.executable, "-I", WRAPPER] and launch.argv[-3:] == ["--", *STUB_ARGV]
    flags = launch.argv[3:-3]
    assert dict(zip(flags[::2], flags[1::2])) == {
        "--listen": f"0.0.0.0:{launch.port}",  # the wrapper: where the harness connects
        "--cpus": "0",
        "--upstream-port": str(inner),
        "--model": "stub",
        "--warmup-prompts": "16",
        "--warmup-max-tokens": "2",
        "--warmup-seed": "5",
        "--warmup-kind": "plain",
    }
    assert launch.base_url == f"http://0.0.0.0:{launch.port}"


def test_a_manifest_that_bridges_itself_gets_no_second_bridge():
    launch = build_launch(load_manifest("vidraft-w188-ctk49"))
    assert launch.knobs["warmup_prompts"] == 64 and launch.argv == ["python", "serve.py"]  # WARMUP_BRIDGE=1


def test_the_bridge_needs_a_manifest_that_says_where_its_port_goes():
    fixed = parse_manifest(
        {
            "name": "fixed",
            "model_id": "m",
            "served_model_name": "s",
            "serve": ["python", "serve.py"],
            "env": {"WARMUP_NUM_PROMPTS": "4"},
        }
    )
    with pytest.raises(ManifestError, match="says nowhere where its port goes"):
        build_launch(fixed)


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        # a knob of the registry: refused as the manifest is read, with the knob's range
        ("WARMUP_MAX_TOKENS", "one", "knob 'warmup_max_tokens': value 'one' is not an integer; valid range 1..4096"),
        ("WARMUP_SEED", "-3", "WARMUP_SEED='-3' is not a whole number"),
    ],
)
def test_a_bridge_setting_that_is_no_whole_number_is_a_manifest_error(name, value, said):
    manifest = stub_manifest(WARMUP_NUM_PROMPTS="2", **{name: value})
    with pytest.raises(ManifestError, match=re.escape(said)):
        build_launch(manifest)


def test_a_cpu_list_this_machine_cannot_honour_is_named_on_the_machine_that_boots():
    manifest = stub_manifest(CPU_AFFINITY="0")
    launch = build_launch(manifest, parse_knobs(manifest, {"cpu_affinity": "4096"}))  # a dry run may plan it
    with pytest.raises(EngineBootError, match=r"CPU_AFFINITY='4096': CPU list '4096' names CPU\(s\) 4096"):
        check_machine(launch)
    check_machine(build_launch(manifest))  # CPU 0: every machine has it
