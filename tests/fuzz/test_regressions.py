"""The inputs the fuzz tests found crashing the project, kept as fixed cases (each was a
traceback, or a server's 500, before its fix)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from engine.config import (
    REPO_ROOT,
    get_profile,
    load_manifest,
    load_ppl_records,
    load_prompts,
    parse_knobs,
    parse_manifest,
)
from engine.launch import build_launch
from engine.reference._config import parse_config
from errors import ConfigError, DataError, KnobError, ManifestError, StudySpecError
from sweep.search import load_study
from sweep.search._dryrun import MAX_SHOWN
from tests.fuzz.values import deep_json
from tests.stacks import STUB_MANIFEST, stub_manifest, stub_profile
from tests.sweep.kit import write_study

BASE = json.loads(STUB_MANIFEST.read_text())


@pytest.mark.parametrize(
    ("patch", "named"),
    [
        ({"serve": ["{python}", "-c\x00", "pass"]}, "NUL character"),
        ({"env": {**BASE["env"], "TOKEN": "a\x00b"}}, "NUL character"),
        ({"env": {**BASE["env"], "A=B": "x"}}, "env name 'A=B'"),
        ({"env": {**BASE["env"], "": "x"}}, "env name ''"),
        ({"env": {**BASE["env"], "X": "\ud800"}}, "lone surrogate"),
    ],
)
def test_a_manifest_no_process_could_start_with_is_refused(patch, named):
    # Before: it loaded, and the boot raised ValueError from subprocess.Popen.
    with pytest.raises(ManifestError, match=named):
        parse_manifest({**BASE, **patch}, source="m.json")


@pytest.mark.parametrize(
    ("data", "named"),
    [(b"\xff{}", "not UTF-8 text"), (deep_json(100_000).encode(), "nested too deeply")],
)
def test_a_manifest_file_that_is_not_text_or_too_deep_is_a_manifest_error(tmp_path, data, named):
    # Before: UnicodeDecodeError / RecursionError.
    path = tmp_path / "manifest.json"
    path.write_bytes(data)
    with pytest.raises(ManifestError, match=f"{path}: .*{named}"):
        load_manifest(path)


def test_a_knob_value_of_thousands_of_digits_is_out_of_range():
    # Before: ValueError from int() (it refuses more than 4,300 digits).
    with pytest.raises(
        KnobError,
        match=r"knob 'centroid_top_k': value 999999999999\.\.\. \(5000 characters\) is out of range 1\.\.2048",
    ):
        parse_knobs(stub_manifest(), {"centroid_top_k": "9" * 5000})
    with pytest.raises(ManifestError, match="knob 'centroid_top_k'.*out of range"):
        build_launch(stub_manifest(CENTROID_TOP_K="9" * 5000))


def test_a_knob_target_holding_json_nested_too_deeply_is_a_manifest_error():
    # Before: RecursionError from json.loads.
    with pytest.raises(ManifestError, match="HF_OVERRIDES is not valid JSON \\(nested too deeply\\)"):
        build_launch(stub_manifest(HF_OVERRIDES=deep_json(100_000)))


@pytest.mark.parametrize("loader", [load_prompts, load_ppl_records])
@pytest.mark.parametrize(
    ("data", "named"),
    [
        (b"\xff[]", "not UTF-8 text"),
        ("\udcff".encode("utf-8", "surrogatepass"), "not UTF-8 text"),
        (deep_json(100_000).encode(), "nested too deeply"),
    ],
)
def test_a_data_file_that_is_not_text_or_too_deep_is_a_data_error(tmp_path, loader, data, named):
    # Before: UnicodeDecodeError / RecursionError.
    path = tmp_path / "data.json"
    path.write_bytes(data)
    with pytest.raises(DataError, match=f"{path}.*{named}"):
        loader(path)


def test_a_json_number_too_long_to_convert_is_invalid_json_everywhere(tmp_path):
    # Before: ValueError from json.loads (int() refuses more than 4,300 digits), not a JSON error.
    huge = "9" * 5000
    (tmp_path / "m.json").write_text(huge)
    with pytest.raises(ManifestError, match="not valid JSON.*4300 digits"):
        load_manifest(tmp_path / "m.json")
    with pytest.raises(ManifestError, match="SPECULATIVE_CONFIG is not valid JSON"):
        build_launch(stub_manifest(SPECULATIVE_CONFIG=huge))
    for loader in (load_prompts, load_ppl_records):
        with pytest.raises(DataError, match="not valid JSON"):
            loader(tmp_path / "m.json")


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"prompts": 0}, "'prompts' must be a file path"),
        ({"refs": "a\x00b"}, "'refs' must be a file path"),
        ({"warmup_requests": "4"}, "'warmup_requests' must be an integer >= 0"),
        ({"warmup_output_len": -5}, "'warmup_output_len' must be an integer >= 1"),
        ({"stream_pass": "yes"}, "'stream_pass' must be true or false"),
        ({"warmup_pause_s": float("nan")}, "'warmup_pause_s' must be a finite number"),
        ({"request_timeout_s": float("inf")}, "'request_timeout_s' must be a finite number"),
    ],
)
def test_every_profile_field_is_checked(override, named):
    # Before: accepted, then a TypeError in pathlib (prompts = 0), range("4") in the worker,
    # time.sleep(nan), an overflowing socket timeout, ...
    with pytest.raises(StudySpecError, match=f"study.toml \\[profile\\]: profile field {named}"):
        get_profile("quick").with_overrides(override, source="study.toml [profile]")


@pytest.mark.parametrize(
    ("data", "named"), [(b'name = "\xff"', "not UTF-8 text"), (b"a = " + b"[" * 100_000, "nested too deeply")]
)
def test_a_study_file_that_is_not_text_or_too_deep_is_a_study_error(tmp_path, data, named):
    # Before: UnicodeDecodeError / RecursionError.
    path = tmp_path / "study.toml"
    path.write_bytes(data)
    with pytest.raises(StudySpecError, match=f"{path}: .*{named}"):
        load_study(path)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SPECULATIVE_CONFIG": '{"method": []}'}, "SPECULATIVE_CONFIG.method=\\[\\] is not supported"),
        ({"HF_OVERRIDES": deep_json(100_000)}, "HF_OVERRIDES is not valid JSON \\(RecursionError"),
        ({"SPECULATIVE_CONFIG": "9" * 5000}, "SPECULATIVE_CONFIG is not valid JSON \\(ValueError"),
    ],
)
def test_the_reference_servers_environment_errors_are_config_errors(env, named):
    # Before: TypeError (an unhashable method), RecursionError, ValueError: a traceback at boot
    # instead of one line and exit status 2. (Request bodies: tests/fuzz/test_reference_server.py.)
    with pytest.raises(ConfigError, match=named):
        parse_config([], env)


def test_a_dry_run_of_a_huge_budget_shows_the_first_trials_and_ends(tmp_path):
    # Before: --dry-run planned every trial of the budget before printing one, so a huge
    # n_trials (or grid) never finished.
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(stub_manifest().to_json_dict()))
    study = write_study(
        tmp_path,
        manifest=manifest,
        profile=stub_profile(tmp_path),
        n_trials=10**12,
        sampler="random",
        space={"centroid_top_k": {"low": 1, "high": 2048}},
    )
    out = subprocess.run(
        [sys.executable, "-m", "sweep.run", "--study", str(study), "--dry-run"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("argv: ") == MAX_SHOWN
    assert f"... and up to {10**12 - MAX_SHOWN} more trial(s)" in out.stdout
