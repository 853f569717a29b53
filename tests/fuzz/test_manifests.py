"""Manifests and knob values, fuzzed: a manifest file either loads into a launch that can start,
or is refused with a ``ConfigError`` that names the file (or the knob)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from engine.config import KNOBS, baseline_knobs, consumed_knobs, load_manifest, parse_assignments, parse_knobs
from engine.launch import LaunchConfig, build_launch
from errors import ConfigError
from tests.fuzz.tally import record
from tests.fuzz.values import (
    DIGIT_STRINGS,
    INJECTIONS,
    damaged,
    deep_json,
    fuzz_settings,
    json_values,
    nasty_text,
    numbers,
)
from tests.stacks import STUB_MANIFEST, stub_manifest

BASE: dict[str, Any] = json.loads(STUB_MANIFEST.read_text())
FIELDS = ["name", "model_id", "served_model_name", "port", "serve", "env", "dependencies", "cwd"]
KNOB_ENV = ["CENTROID_TOP_K", "SLIDING_WINDOW", "HF_OVERRIDES", "SPECULATIVE_CONFIG"]
FUZZ = fuzz_settings(150)

knob_env_values = st.one_of(
    nasty_text,
    st.sampled_from(DIGIT_STRINGS),
    json_values.map(json.dumps),
    st.sampled_from([200, 100_000]).map(deep_json),
    st.builds(lambda v: json.dumps({"text_config": {"sliding_window": v}}), json_values),
    st.builds(lambda v: json.dumps({"text_config": v}), json_values),
    st.builds(lambda v: json.dumps({"method": "draft", "num_speculative_tokens": v}), json_values),
)


@st.composite
def manifest_docs(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["drop", "retype", "env", "knob_env", "serve", "extra", "port"]))
        field = draw(st.sampled_from(FIELDS))
        if how == "drop":
            doc.pop(field, None)
        elif how == "retype":
            doc[field] = draw(json_values)
        elif how == "env":
            doc["env"] = {
                **(doc.get("env") if isinstance(doc.get("env"), dict) else {}),
                draw(nasty_text): draw(st.one_of(nasty_text, json_values)),
            }
        elif how == "knob_env":
            doc["env"] = {
                **(doc.get("env") if isinstance(doc.get("env"), dict) else {}),
                draw(st.sampled_from(KNOB_ENV)): draw(knob_env_values),
            }
        elif how == "serve":
            doc["serve"] = draw(st.lists(st.one_of(st.sampled_from(INJECTIONS), nasty_text), max_size=4))
        elif how == "extra":
            doc[draw(nasty_text)] = draw(json_values)
        else:
            doc["port"] = draw(numbers)
    return doc


def _startable(launch: LaunchConfig) -> None:
    """What ``subprocess.Popen`` needs of argv, env and cwd, or it raises ValueError."""
    texts = [*launch.argv, *launch.env.keys(), *launch.env.values(), str(launch.cwd)]
    for text in texts:
        assert "\x00" not in os.fsencode(text).decode("utf-8", "surrogateescape"), text
    for key in launch.env:
        assert "=" not in key, key
    assert launch.argv and all(isinstance(a, str) for a in launch.argv)


def _through_the_engine(path: Path, knob_values: dict[str, Any]) -> None:
    try:
        manifest = load_manifest(path)
        consumed = consumed_knobs(manifest)
        baseline_knobs(manifest)
        knobs = parse_knobs(manifest, {k: v for k, v in knob_values.items() if k in consumed})
        launch = build_launch(manifest, knobs, workdir=path.parent)
    except ConfigError as exc:
        message = str(exc)
        assert str(path) in message or any(repr(k) in message for k in knob_values), message
        return
    _startable(launch)
    for name, value in launch.knobs.items():
        assert KNOBS[name].parse(value) == value  # every launched value is one its knob accepts


@FUZZ
@given(
    doc=manifest_docs(),
    knob_values=st.dictionaries(st.sampled_from(sorted(KNOBS)), st.one_of(numbers, nasty_text), max_size=2),
)
def test_a_manifest_loads_into_a_startable_launch_or_is_a_config_error(doc, knob_values, tmp_path_factory):
    record("manifest documents", (doc, knob_values))
    path = tmp_path_factory.mktemp("manifest") / "manifest.json"
    path.write_text(json.dumps(doc))  # ensure_ascii: a lone surrogate arrives as a \ud800 escape
    _through_the_engine(path, knob_values)


@FUZZ
@given(data=damaged(STUB_MANIFEST.read_text()))
def test_a_damaged_manifest_file_is_a_manifest_error(data, tmp_path_factory):
    record("manifest files (damaged)", data)
    path = tmp_path_factory.mktemp("manifest") / "manifest.json"
    path.write_bytes(data)
    _through_the_engine(path, {})


@FUZZ
@given(
    items=st.lists(
        st.one_of(
            nasty_text, st.builds("{}={}".format, nasty_text, st.one_of(nasty_text, st.sampled_from(DIGIT_STRINGS)))
        ),
        max_size=3,
    )
)
def test_knob_assignments_from_the_command_line_are_checked_or_refused(items):
    record("--set knob=value", items)
    manifest = stub_manifest()
    try:
        checked = parse_knobs(manifest, parse_assignments(items))
    except ConfigError as exc:
        assert "knob" in str(exc) or "--set" in str(exc), str(exc)
        return
    assert all(KNOBS[k].parse(v) == v for k, v in checked.items())
