"""Parsing the reference server's environment: valid knobs, and one-line reasons for bad ones."""

from __future__ import annotations

import json

import pytest

from engine.config import KNOBS, load_manifest
from engine.reference._config import parse_config
from engine.reference.runtime import SpecConfig
from errors import ConfigError


def parse(**env):
    return parse_config([], {k: v for k, v in env.items()})


def test_defaults():
    cfg = parse()
    assert (cfg.host, cfg.port, cfg.served_model_name) == ("127.0.0.1", 8000, "gemma-3-270m")
    assert cfg.spec is None and cfg.sliding_window is None and cfg.centroid_top_k == 32
    assert cfg.max_model_len == 32768 and cfg.warmup_num_prompts == 0


def test_port_and_host_from_flags_or_env():
    assert parse_config(["--port", "9001", "--host", "0.0.0.0"], {"PORT": "8100"}).port == 9001
    cfg = parse(PORT="8100", HOST="::1")
    assert (cfg.port, cfg.host) == (8100, "::1")


@pytest.mark.parametrize(
    ("env", "window"),
    [
        ({"HF_OVERRIDES": '{"text_config": {"sliding_window": 188}}'}, 188),
        ({"HF_OVERRIDES": '{"sliding_window": 64}'}, 64),
        ({"HF_OVERRIDES": '{"text_config": {"sliding_window": 100}}', "SLIDING_WINDOW": "300"}, 100),
        ({"HF_OVERRIDES": "{}", "SLIDING_WINDOW": "300"}, 300),
        ({"SLIDING_WINDOW": "32"}, 32),
    ],
)
def test_window_comes_from_hf_overrides_first(env, window):
    assert parse(**env).sliding_window == window


def test_speculative_configs():
    assert parse(SPECULATIVE_CONFIG='{"method": "draft", "num_speculative_tokens": 7}').spec == SpecConfig(
        method="draft", num_speculative_tokens=7
    )
    spec = parse(SPECULATIVE_CONFIG='{"method": "draft", "num_speculative_tokens": 3, "draft_layers": 6}').spec
    assert spec.draft_layers == 6
    ngram = parse(SPECULATIVE_CONFIG='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}').spec
    assert (ngram.prompt_lookup_min, ngram.prompt_lookup_max) == (3, 3)
    default = parse(SPECULATIVE_CONFIG='{"method": "ngram", "num_speculative_tokens": 4}').spec
    assert (default.prompt_lookup_min, default.prompt_lookup_max) == (5, 5)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"SPECULATIVE_CONFIG": "{method: draft"}, "SPECULATIVE_CONFIG is not valid JSON"),
        ({"SPECULATIVE_CONFIG": "[1]"}, "must be a JSON object"),
        ({"SPECULATIVE_CONFIG": '{"method": "mtp", "num_speculative_tokens": 3}'}, "'draft' or 'ngram'"),
        ({"SPECULATIVE_CONFIG": '{"method": "draft"}'}, "num_speculative_tokens is required"),
        ({"SPECULATIVE_CONFIG": '{"method": "draft", "num_speculative_tokens": 0}'}, "out of range"),
        (
            {"SPECULATIVE_CONFIG": '{"method": "draft", "num_speculative_tokens": 3, "draft_layers": 19}'},
            "draft_layers",
        ),
        (
            {"SPECULATIVE_CONFIG": '{"method": "draft", "num_speculative_tokens": 3, "prompt_lookup_max": 2}'},
            "unknown keys",
        ),
        (
            {
                "SPECULATIVE_CONFIG": '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 4, "prompt_lookup_max": 2}'
            },
            "<=",
        ),
        ({"HF_OVERRIDES": '{"text_config": {"sliding_window": 0}}'}, "sliding_window=0"),
        ({"HF_OVERRIDES": '{"num_hidden_layers": 4}'}, "only honours sliding_window"),
        ({"HF_OVERRIDES": "not json"}, "HF_OVERRIDES is not valid JSON"),
        ({"SLIDING_WINDOW": "-5"}, "SLIDING_WINDOW=-5"),
        ({"SLIDING_WINDOW": "wide"}, "not an integer"),
        ({"CENTROID_TOP_K": "0"}, "CENTROID_TOP_K=0"),
        ({"CENTROID_TOP_K": "4096"}, "between 1 and 2048"),
        ({"MAX_MODEL_LEN": "100000"}, "MAX_MODEL_LEN"),
        ({"WARMUP_NUM_PROMPTS": "-1"}, "WARMUP_NUM_PROMPTS"),
        ({"PORT": "70000"}, "PORT"),
    ],
)
def test_bad_environment_is_refused_with_a_one_line_reason(env, says):
    with pytest.raises(ConfigError) as info:
        parse(**env)
    message = str(info.value)
    assert says in message and "\n" not in message


def test_empty_values_mean_unset():
    cfg = parse(SPECULATIVE_CONFIG="", CENTROID_TOP_K="", HF_OVERRIDES=" ", SLIDING_WINDOW="")
    assert cfg.spec is None and cfg.centroid_top_k == 32 and cfg.sliding_window is None


def test_json_values_round_trip_from_a_manifest():
    env = {"SPECULATIVE_CONFIG": json.dumps({"method": "draft", "num_speculative_tokens": 3}), "CENTROID_TOP_K": "49"}
    cfg = parse(**env)
    assert cfg.spec.num_speculative_tokens == 3 and cfg.centroid_top_k == 49


@pytest.mark.parametrize(
    ("knob", "env"),
    [
        (
            "num_speculative_tokens",
            lambda k: {"SPECULATIVE_CONFIG": json.dumps({"method": "draft", "num_speculative_tokens": k})},
        ),
        ("centroid_top_k", lambda k: {"CENTROID_TOP_K": str(k)}),
    ],
)
def test_the_server_accepts_what_the_registry_allows_its_stack_and_nothing_more(knob, env):
    # One source: the registry's limit for the stack the reference manifests name is the server's.
    low, high = KNOBS[knob].for_stack(load_manifest("reference").stack).bounds
    assert high <= KNOBS[knob].maximum
    for value in (low, high):
        parse(**env(value))
    for value in (low - 1, high + 1):
        with pytest.raises(ConfigError, match=f"between {low} and {high}"):
            parse(**env(value))
