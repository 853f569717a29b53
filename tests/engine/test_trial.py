"""run_trial end to end against the stub stack: complete and failed outcomes."""

import re
import socket
import time
from pathlib import Path

import pytest

from engine.bench import run_trial
from engine.config import parse_knobs
from engine.measurement import TrialOutcome
from errors import DataError, KnobError
from tests.stacks import stub_manifest
from tests.stacks.stub_server import expected_ppl


def test_a_complete_trial_records_knobs_argv_redacted_env_timings_and_node(tmp_path, stub_profile):
    manifest = stub_manifest(HF_TOKEN="hf_secret_value")
    outcome = run_trial(manifest, parse_knobs(manifest, {"sliding_window": 128}), stub_profile, workdir=tmp_path)
    assert outcome.status == "complete", outcome.reason
    assert outcome.knobs == {"sliding_window": 128, "centroid_top_k": 32, "num_speculative_tokens": 3}
    assert outcome.env["HF_TOKEN"] == "***"
    assert "hf_secret_value" not in str(outcome.to_dict())
    assert outcome.env["SLIDING_WINDOW"] == "128"
    assert set(outcome.timings_s) == {"gpu_wait", "boot", "warmup", "tps", "ppl", "stop", "total"}
    assert outcome.timings_s["total"] >= sum(v for k, v in outcome.timings_s.items() if k != "total")
    assert outcome.node["hostname"]
    assert outcome.measurement.ppl == pytest.approx(expected_ppl(128), rel=0.1)
    assert (tmp_path / "engine.log").exists()
    assert "stub: serving 'stub'" in outcome.log_tail  # a measured trial keeps its log tail too
    assert TrialOutcome.from_dict(outcome.to_dict()) == outcome


def test_the_window_moves_ppl_and_tps_the_way_the_stub_promises(tmp_path, stub_profile):
    # 20 ms a token: a request takes ~0.3 s, a run of four ~1.2 s, so a busy machine's stalls (tens of ms) cannot
    # undo the narrow window's ~40% faster step (at the default 2 ms one stall did, under CI's load)
    m = stub_manifest(STUB_DECODE_STEP_S="0.02")
    wide = run_trial(m, parse_knobs(m, {"sliding_window": 512}), stub_profile, workdir=tmp_path / "a")
    narrow = run_trial(m, parse_knobs(m, {"sliding_window": 32}), stub_profile, workdir=tmp_path / "b")
    assert narrow.measurement.ppl > wide.measurement.ppl
    assert narrow.measurement.tps > wide.measurement.tps


@pytest.mark.parametrize(
    ("env", "knobs", "reason", "in_log"),
    [
        ({"STUB_FAULT": "boot_exit"}, {}, r"exited with status 1 during boot", "simulated boot failure"),
        (
            {"STUB_BOOT_EXIT_IF": "CENTROID_TOP_K=7"},
            {"centroid_top_k": 7},
            r"exited with status 1 during boot",
            "refusing to boot with CENTROID_TOP_K=7",
        ),
        (
            {"STUB_FAULT": "crash_mid"},
            {},
            r"TPS prompt p1: .*failed .*engine process had exited with status 1",
            "simulated crash",
        ),
        ({"STUB_FAULT": "malformed_json"}, {}, r"warm-up request 1: .*malformed JSON", "stub: serving"),
        ({"STUB_FAULT": "no_usage"}, {}, r"no 'usage.completion_tokens' count", "stub: serving"),
        ({"STUB_FAULT": "hang_after_ready"}, {}, r"warm-up request 1: .*timed out after 1 s", "stub: serving"),
        ({"STUB_FAULT": "never_ready"}, {}, r"not ready after 2 s", "stub: serving"),
    ],
)
def test_a_misbehaving_stack_is_a_failed_outcome_with_reason_and_log_tail(
    tmp_path, stub_profile, env, knobs, reason, in_log
):
    profile = stub_profile.with_overrides({"boot_timeout_s": 2, "request_timeout_s": 1}, source="test")
    began = time.monotonic()
    manifest = stub_manifest(**env)
    outcome = run_trial(manifest, parse_knobs(manifest, knobs), profile, workdir=tmp_path)
    assert outcome.status == "failed"
    assert outcome.measurement is None
    assert outcome.reason and re.search(reason, outcome.reason), outcome.reason
    assert in_log in outcome.log_tail
    assert "stop" in outcome.timings_s and time.monotonic() - began < 20
    with socket.socket() as sock:  # the stack is gone: a server can bind its port again
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do (TIME_WAIT)
        sock.bind(("127.0.0.1", int(outcome.env["PORT"])))


def test_a_knob_value_that_fails_only_that_trial(tmp_path, stub_profile):
    manifest = stub_manifest(STUB_BOOT_EXIT_IF="CENTROID_TOP_K=7")
    seven, eight = parse_knobs(manifest, {"centroid_top_k": 7}), parse_knobs(manifest, {"centroid_top_k": 8})
    assert run_trial(manifest, seven, stub_profile, workdir=tmp_path / "a").status == "failed"
    assert run_trial(manifest, eight, stub_profile, workdir=tmp_path / "b").status == "complete"


def test_user_errors_raise_before_anything_boots(tmp_path, stub_profile):
    with pytest.raises(KnobError, match="unknown knob"):  # knob values are checked before a trial exists
        parse_knobs(stub_manifest(), {"nope": 1})
    too_many = stub_profile.with_overrides({"num_prompts": 100}, source="test")
    with pytest.raises(
        DataError, match=r"100 prompts asked for \(100 a run x 1 run\(s\), none timed twice\), the file has 32"
    ):
        run_trial(stub_manifest(), parse_knobs(stub_manifest(), {}), too_many, workdir=tmp_path)
    assert not (tmp_path / "engine.log").exists()


def test_tmpdir_is_a_short_private_folder_that_lives_as_long_as_the_engine(tmp_path, stub_profile):
    # vLLM binds UNIX sockets in TMPDIR; a run folder this deep would put them past 107 bytes.
    deep = tmp_path / ("runs-" + "d" * 60) / "study" / "trial-0000"
    shallow = stub_manifest(TMPDIR="{workdir}", STUB_IPC_SOCKET="1")
    in_workdir = run_trial(shallow, parse_knobs(shallow, {}), stub_profile, workdir=deep / "a")
    assert in_workdir.status == "failed" and "cannot bind the IPC socket" in in_workdir.log_tail

    private = stub_manifest(TMPDIR="{tmpdir}", STUB_IPC_SOCKET="1")
    outcome = run_trial(private, parse_knobs(private, {}), stub_profile, workdir=deep / "b")
    assert outcome.status == "complete", outcome.reason
    tmpdir = Path(outcome.env["TMPDIR"])
    assert f"stub: IPC socket {tmpdir}/" in (deep / "b" / "engine.log").read_text()
    assert tmpdir.name.startswith("gemma-sweep-") and not tmpdir.exists()
