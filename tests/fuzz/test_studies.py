"""Study files, fuzzed: a ``studies/*.toml`` either validates into a ``StudySpec`` that stays
inside the rules, or is refused with a ``ConfigError`` that names the file."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.config import KNOBS, BenchProfile
from errors import ConfigError
from sweep.search import SAMPLERS, load_study
from tests.fuzz.tally import record
from tests.fuzz.values import damaged, fuzz_settings, json_values, nasty_text, numbers, toml_text
from tests.stacks import stub_manifest, write_ppl_refs, write_prompt_set

FUZZ = fuzz_settings(150)
TABLES = ["gate", "profile", "space", "fixed", "resources", "objectives"]
SCALARS = ["name", "manifest", "n_trials", "sampler", "seed", "workers", "identity_required"]
PROFILE_FIELDS = [f.name for f in dataclasses.fields(BenchProfile)]


@pytest.fixture(scope="module")
def base_study(tmp_path_factory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("study_inputs")
    manifest = folder / "manifest.json"
    manifest.write_text(json.dumps(stub_manifest().to_json_dict()))
    return {
        "name": "fuzz",
        "manifest": str(manifest),
        "n_trials": 4,
        "sampler": "tpe",
        "seed": 1,
        "workers": 1,
        "identity_required": False,
        "objectives": {"tps": "maximize", "ppl": "minimize"},
        "gate": {"ppl_max_ratio": 1.05},
        "profile": {
            "name": "quick",
            "prompts": str(write_prompt_set(folder / "prompts.json", 4)),
            "refs": str(write_ppl_refs(folder / "refs.jsonl", 4)),
            "num_prompts": 4,
            "ppl_records": 4,
        },
        "space": {"centroid_top_k": {"choices": [16, 32]}, "sliding_window": {"low": 256, "high": 512, "step": 64}},
        "fixed": {"num_speculative_tokens": 3},
        "resources": {"num_cpus": 1},
    }


knob_names = st.one_of(st.sampled_from(sorted(KNOBS)), nasty_text)
space_tables = st.one_of(
    st.fixed_dictionaries({"choices": st.lists(st.one_of(numbers, json_values), max_size=4)}),
    st.fixed_dictionaries({"low": numbers, "high": numbers}, optional={"step": numbers}),
    st.dictionaries(st.sampled_from(["low", "high", "step", "choices", "values"]), json_values, max_size=3),
    json_values,
)


@st.composite
def mutations(draw: st.DrawFn) -> list[tuple[str, ...]]:
    """A list of edits, each (kind, where, ...) with hypothesis values; applied by ``_apply``."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop", "scalar", "table", "space", "fixed", "profile", "gate", "unknown"]))
        if kind == "drop":
            edits.append(("drop", draw(st.sampled_from(SCALARS + TABLES))))
        elif kind == "scalar":
            edits.append(
                (
                    "set",
                    draw(st.sampled_from(SCALARS)),
                    draw(st.one_of(json_values, numbers, st.sampled_from(SAMPLERS))),
                )
            )
        elif kind == "table":
            edits.append(("set", draw(st.sampled_from(TABLES)), draw(json_values)))
        elif kind == "space":
            edits.append(("in", "space", draw(knob_names), draw(space_tables)))
        elif kind == "fixed":
            edits.append(("in", "fixed", draw(knob_names), draw(st.one_of(numbers, json_values))))
        elif kind == "profile":
            edits.append(
                (
                    "in",
                    "profile",
                    draw(st.one_of(st.sampled_from(PROFILE_FIELDS), nasty_text)),
                    draw(st.one_of(numbers, json_values)),
                )
            )
        elif kind == "gate":
            edits.append(
                (
                    "set",
                    "gate",
                    draw(st.dictionaries(st.sampled_from(["ppl_max", "ppl_max_ratio", "ppl"]), numbers, max_size=2)),
                )
            )
        else:
            edits.append(("set", draw(nasty_text), draw(json_values)))
    return edits


def _apply(doc: dict[str, Any], edits: list[tuple[Any, ...]]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for edit in edits:
        if edit[0] == "drop":
            doc.pop(edit[1], None)
        elif edit[0] == "set":
            doc[edit[1]] = edit[2]
        else:
            _, table, key, value = edit
            doc[table] = {**(doc.get(table) if isinstance(doc.get(table), dict) else {}), key: value}
    return doc


def _check(path: Path) -> None:
    try:
        spec = load_study(path)
    except ConfigError as exc:
        assert str(path) in str(exc), str(exc)
        return
    # What validated must be what the driver can run.
    assert spec.n_trials >= 1 and spec.workers >= 1 and spec.sampler in SAMPLERS
    for knob, space in spec.space.items():
        assert all(
            KNOBS[knob].minimum <= v <= KNOBS[knob].maximum
            for v in (space.values()[:3] if space.choices is None else space.choices)
        )
    assert all(KNOBS[k].minimum <= v <= KNOBS[k].maximum for k, v in spec.fixed.items())
    _runnable(spec.profile)


def _runnable(profile: BenchProfile) -> None:
    """Every field of a validated profile has the type and range the benchmark client uses."""
    assert all(isinstance(p, str) and p.strip() and "\x00" not in p for p in (profile.prompts, profile.refs))
    for name, low in (
        ("num_prompts", 1),
        ("output_len", 1),
        ("ppl_records", 1),
        ("warmup_requests", 0),
        ("warmup_output_len", 1),
        ("tps_repeats", 1),
    ):
        value = getattr(profile, name)
        assert type(value) is int and value >= low, (name, value)
    assert type(profile.stream_pass) is bool
    for name in ("warmup_pause_s", "boot_timeout_s", "request_timeout_s"):
        value = getattr(profile, name)
        assert type(value) in (int, float) and math.isfinite(value) and value >= 0, (name, value)


@FUZZ
@given(edits=mutations())
def test_a_study_file_validates_or_is_a_config_error(edits, base_study, tmp_path_factory):
    doc = _apply(base_study, edits)
    record("study files", doc)
    path = tmp_path_factory.mktemp("study") / "study.toml"
    path.write_text(toml_text(doc), errors="surrogatepass")
    _check(path)


@FUZZ
@given(data=st.data())
def test_a_damaged_study_file_is_a_config_error(data, base_study, tmp_path_factory):
    raw = data.draw(damaged(toml_text(base_study)))
    record("study files (damaged)", raw)
    path = tmp_path_factory.mktemp("study") / "study.toml"
    path.write_bytes(raw)
    _check(path)
