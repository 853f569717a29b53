"""The reference server's environment and command line, fuzzed without booting it: every value
either configures the server within its limits or is a ``ConfigError`` naming the variable (which
``serve`` prints as one line before exiting with status 2)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from engine.config import KNOBS
from engine.reference._config import MAX_POSITIONS, NUM_LAYERS, STACK, parse_config
from errors import ConfigError
from tests.fuzz.tally import record
from tests.fuzz.values import DIGIT_STRINGS, deep_json, fuzz_settings, json_values, nasty_text, numbers

INT_VARS = ["CENTROID_TOP_K", "MAX_MODEL_LEN", "WARMUP_NUM_PROMPTS", "WARMUP_MAX_TOKENS", "SLIDING_WINDOW", "PORT"]
JSON_VARS = ["HF_OVERRIDES", "SPECULATIVE_CONFIG"]
# The server's limits are the knob registry's for its stack: what a study may ask of it.
TOP_K, SPEC_TOKENS = (KNOBS[name].for_stack(STACK) for name in ("centroid_top_k", "num_speculative_tokens"))

spec_objects = st.fixed_dictionaries(
    {"method": st.one_of(st.sampled_from(["draft", "ngram", "mtp"]), json_values)},
    optional={
        "num_speculative_tokens": st.one_of(numbers, json_values),
        "draft_layers": st.one_of(numbers, json_values),
        "prompt_lookup_min": numbers,
        "prompt_lookup_max": numbers,
        "extra": json_values,
    },
)
override_objects = st.one_of(
    st.fixed_dictionaries(
        {
            "text_config": st.one_of(
                st.fixed_dictionaries({"sliding_window": st.one_of(numbers, json_values)}), json_values
            )
        }
    ),
    st.fixed_dictionaries({"sliding_window": st.one_of(numbers, json_values)}),
    st.dictionaries(nasty_text, json_values, max_size=2),
)
json_text = st.one_of(
    spec_objects.map(json.dumps),
    override_objects.map(json.dumps),
    json_values.map(json.dumps),
    nasty_text,
    st.sampled_from(DIGIT_STRINGS),
    st.sampled_from([300, 100_000]).map(deep_json),
)
env_values = st.fixed_dictionaries(
    {},
    optional={
        **{name: st.one_of(nasty_text, st.sampled_from(DIGIT_STRINGS), numbers.map(str)) for name in INT_VARS},
        **{name: json_text for name in JSON_VARS},
        "SERVED_MODEL_NAME": nasty_text,
        "HOST": nasty_text,
        "REFERENCE_DEVICE": nasty_text,
    },
)


@fuzz_settings(300)
@given(env=env_values)
def test_the_reference_servers_environment_configures_it_or_is_a_config_error(env):
    record("reference server env", env)
    try:
        cfg = parse_config([], env)
    except ConfigError as exc:
        assert any(name in str(exc) for name in env), str(exc)
        return
    assert 1 <= cfg.port <= 65535 and TOP_K.minimum <= cfg.centroid_top_k <= TOP_K.maximum
    assert 2 <= cfg.max_model_len <= MAX_POSITIONS and cfg.warmup_num_prompts >= 0 and cfg.warmup_max_tokens >= 1
    assert cfg.sliding_window is None or (type(cfg.sliding_window) is int and cfg.sliding_window >= 1)
    if cfg.spec is not None:
        assert SPEC_TOKENS.minimum <= cfg.spec.num_speculative_tokens <= SPEC_TOKENS.maximum
        assert cfg.spec.draft_layers is None or 1 <= cfg.spec.draft_layers <= NUM_LAYERS
        assert 1 <= cfg.spec.prompt_lookup_min <= cfg.spec.prompt_lookup_max


@fuzz_settings(60)
@given(
    argv=st.lists(st.one_of(st.sampled_from(["--port", "--host", "--device", "--port=", "-h"]), nasty_text), max_size=4)
)
def test_the_reference_servers_command_line_configures_it_or_exits_with_usage(argv):
    record("reference server argv", argv)
    try:
        parse_config(argv, {})
    except ConfigError as exc:
        assert "PORT" in str(exc), str(exc)
    except SystemExit as exc:  # argparse: a usage line naming the bad option, status 2 (0 for -h)
        assert exc.code in (0, 2)
