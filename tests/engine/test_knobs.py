import json

import pytest

from engine.config import (
    KNOBS,
    Knob,
    Target,
    apply_knobs,
    baseline_knobs,
    consumed_knobs,
    load_manifest,
    load_registry,
    parse_assignments,
    parse_knobs,
    parse_manifest,
)
from engine.stackside import SPEC_RULE
from errors import KnobError, ManifestError

VIDRAFT = "vidraft-w188-ctk49"


def manifest(env=None, serve=("python", "serve.py"), name="demo", stack=None):
    return parse_manifest(
        {
            "name": name,
            "model_id": "m",
            "served_model_name": "s",
            "serve": list(serve),
            "env": env or {},
            **({"stack": stack} if stack else {}),
        }
    )


def test_the_registry_holds_the_challenge_knobs_with_ranges_and_their_lossless_flag():
    challenge = ("sliding_window", "centroid_top_k", "num_speculative_tokens")
    assert {n: (KNOBS[n].minimum, KNOBS[n].maximum, KNOBS[n].lossless) for n in challenge} == {
        "sliding_window": (1, 131072, False),  # changes the model's math
        "centroid_top_k": (1, 2048, True),  # the drafter's: the target verifies every token
        "num_speculative_tokens": (1, 64, True),
    }
    assert list(KNOBS)[:3] == list(challenge)  # registry order is the file's


def test_the_winning_manifest_consumes_all_three_and_its_bridge_and_its_baseline_is_as_published():
    m = load_manifest(VIDRAFT)
    assert consumed_knobs(m) == [
        "sliding_window",
        "centroid_top_k",
        "num_speculative_tokens",
        "warmup_prompts",
        "warmup_max_tokens",
    ]
    assert baseline_knobs(m) == {
        "sliding_window": 188,
        "centroid_top_k": 49,
        "num_speculative_tokens": 7,
        "warmup_prompts": 64,  # its own serve.py's warm-up bridge (WARMUP_BRIDGE=1) ...
        "warmup_max_tokens": 1,  # ... of one token a request
    }


def test_applying_patches_the_json_in_env_and_leaves_everything_else_alone():
    m = load_manifest(VIDRAFT)
    patched = apply_knobs(m, parse_knobs(m, {"sliding_window": 160, "num_speculative_tokens": "5"}))
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
    m = manifest({"SLIDING_WINDOW": "512"})
    patched = apply_knobs(m, parse_knobs(m, {"sliding_window": 64}))
    assert json.loads(patched.env["HF_OVERRIDES"]) == {"text_config": {"sliding_window": 64}}


def test_existing_hf_overrides_without_a_window_are_merged_not_replaced():
    m = manifest({"SLIDING_WINDOW": "512", "HF_OVERRIDES": '{"text_config": {"rope_theta": 1}}'})
    patched = apply_knobs(m, parse_knobs(m, {"sliding_window": 100}))
    assert json.loads(patched.env["HF_OVERRIDES"]) == {"text_config": {"rope_theta": 1, "sliding_window": 100}}


def test_cli_flags_with_json_values_are_patched_in_both_spellings():
    serve = [
        "vllm",
        "serve",
        "model",
        "--hf-overrides",
        '{"sliding_window": 512}',
        '--speculative_config={"method": "ngram", "num_speculative_tokens": 3}',
    ]
    m = manifest(serve=serve)
    assert consumed_knobs(m) == ["sliding_window", "num_speculative_tokens", "ngram_drafter"]
    assert baseline_knobs(m) == {"sliding_window": 512, "num_speculative_tokens": 3, "ngram_drafter": "ngram"}
    patched = apply_knobs(m, parse_knobs(m, {"sliding_window": 64, "num_speculative_tokens": 6}))
    assert json.loads(patched.serve[4]) == {"sliding_window": 64}  # top-level path kept
    flag, _, value = patched.serve[5].partition("=")
    assert flag == "--speculative_config"
    assert json.loads(value) == {"method": "ngram", "num_speculative_tokens": 6}
    assert "HF_OVERRIDES" not in patched.env  # a flag-configured stack gets no env var


def test_a_plain_cli_flag_target_is_one_registry_entry():
    registry = {
        **KNOBS,
        "max_model_len": Knob(
            name="max_model_len",
            type="int",
            minimum=16,
            maximum=131072,
            targets=(Target("flag", "--max-model-len"),),
            doc="context length",
        ),
    }
    m = manifest(serve=["vllm", "serve", "model", "--max-model-len", "4096"])
    assert "max_model_len" in consumed_knobs(m, registry=registry)
    assert baseline_knobs(m, registry=registry) == {"max_model_len": 4096}
    knobs = parse_knobs(m, {"max_model_len": 2048}, registry=registry)
    assert apply_knobs(m, knobs, registry=registry).serve[-1] == "2048"


def test_an_unknown_knob_lists_the_valid_ones():
    with pytest.raises(
        KnobError,
        match=r"unknown knob 'windw'; valid knobs: \['async_scheduling', 'centroid_top_k', "
        r"'cpu_affinity', 'cudagraph_mode', .*'sliding_window', 'warmup_kind', 'warmup_max_tokens', 'warmup_prompts'\]",
    ):
        parse_knobs(load_manifest(VIDRAFT), {"windw": 3})


def test_a_knob_the_manifest_does_not_consume_names_manifest_and_knob():
    m = manifest({"SLIDING_WINDOW": "512"}, name="window-only")
    with pytest.raises(
        KnobError,
        match=r"manifest 'window-only' does not consume knob 'centroid_top_k'"
        r": it sets none of CENTROID_TOP_K",
    ):
        apply_knobs(m, parse_knobs(m, {"centroid_top_k": 8}))


def test_a_knob_a_file_manifest_does_not_consume_names_the_file(tmp_path):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"name": "p", "model_id": "m", "served_model_name": "s", "serve": ["x"]}))
    with pytest.raises(KnobError, match=rf"{path} does not consume knob 'sliding_window'"):
        parse_knobs(load_manifest(path), {"sliding_window": 8})


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
        parse_knobs(load_manifest(VIDRAFT), {knob: value})


def test_a_manifest_with_a_garbage_knob_value_is_a_manifest_error():
    with pytest.raises(ManifestError, match=r"CENTROID_TOP_K|knob 'centroid_top_k': value 'lots'"):
        baseline_knobs(manifest({"CENTROID_TOP_K": "lots"}))
    with pytest.raises(ManifestError, match=r"HF_OVERRIDES is not valid JSON"):
        consumed_knobs(manifest({"HF_OVERRIDES": "{sliding_window: 3}"}))


def test_parse_assignments():
    assert parse_assignments(["sliding_window=32", " centroid_top_k = 8 "]) == {
        "sliding_window": "32",
        "centroid_top_k": "8",
    }
    with pytest.raises(KnobError, match=r"--set 'sliding_window': expected knob=value"):
        parse_assignments(["sliding_window"])


def test_a_json_target_whose_parent_is_not_an_object_is_a_manifest_error():
    m = manifest({"SLIDING_WINDOW": "512", "HF_OVERRIDES": '{"text_config": 5}'})
    with pytest.raises(ManifestError, match=r"HF_OVERRIDES: 'text_config' must be a JSON object"):
        apply_knobs(m, parse_knobs(m, {"sliding_window": 64}))


# --- the registry is data: knob types, switches, the registry file's own errors ---------------

VLLM_SERVE = [
    "python",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "m",
    "--kv-cache-dtype",
    "auto",
    "--quantization",
    "None",
    "--no-async-scheduling",
    "--compilation-config",
    '{"cudagraph_mode": "FULL_AND_PIECEWISE"}',
    "--speculative-config",
    '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}',
]


def test_serving_flags_of_every_kind_are_knobs_with_their_own_types():
    m = manifest(serve=VLLM_SERVE)
    assert baseline_knobs(m) == {
        "num_speculative_tokens": 5,
        "prompt_lookup_max": 4,
        "kv_cache_dtype": "auto",
        "quantization": "None",
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "async_scheduling": False,
        "ngram_drafter": "ngram",
    }
    knobs = parse_knobs(
        m,
        {"kv_cache_dtype": "fp8", "async_scheduling": "true", "cudagraph_mode": "PIECEWISE", "prompt_lookup_max": "8"},
    )
    serve = apply_knobs(m, knobs).serve
    assert serve[serve.index("--kv-cache-dtype") + 1] == "fp8"
    assert "--async-scheduling" in serve and "--no-async-scheduling" not in serve
    assert json.loads(serve[serve.index("--compilation-config") + 1]) == {"cudagraph_mode": "PIECEWISE"}
    assert json.loads(serve[serve.index("--speculative-config") + 1])["prompt_lookup_max"] == 8
    back = manifest(serve=serve)
    assert baseline_knobs(back) == {**baseline_knobs(m), **knobs}  # what was written reads back


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("kv_cache_dtype", "fp4", r"value 'fp4' is not one of \['auto', 'bfloat16', 'fp8'"),
        ("async_scheduling", "maybe", r"value 'maybe' is not a boolean; valid: true or false"),
        ("cudagraph_mode", 3, r"value 3 is not one of"),
    ],
)
def test_typed_knobs_refuse_values_outside_their_type(knob, value, message):
    with pytest.raises(KnobError, match=message):
        parse_knobs(manifest(serve=VLLM_SERVE), {knob: value})


def test_knob_values_are_immutable_and_tied_to_their_manifest():
    m, other = manifest(serve=VLLM_SERVE), manifest(serve=VLLM_SERVE, name="other")
    knobs = parse_knobs(m, {"kv_cache_dtype": "fp8"})
    with pytest.raises(TypeError):
        knobs["kv_cache_dtype"] = "auto"  # type: ignore[index]
    assert (baseline_knobs(m) | knobs)["kv_cache_dtype"] == "fp8"
    with pytest.raises(ValueError, match="checked against manifest 'demo', applied to manifest 'other'"):
        apply_knobs(other, knobs)


def test_a_new_knob_is_a_registry_entry(tmp_path):
    path = tmp_path / "knobs.toml"
    path.write_text("""
[max_num_seqs]
doc = "sequences in one batch"
type = "int"
min = 1
max = 1024
lossless = true
targets = [{ flag = "--max-num-seqs" }]
""")
    registry = load_registry(path)
    m = manifest(serve=["vllm", "--max-num-seqs", "1"])
    assert registry["max_num_seqs"].lossless and baseline_knobs(m, registry=registry) == {"max_num_seqs": 1}
    assert apply_knobs(m, parse_knobs(m, {"max_num_seqs": 4}, registry=registry), registry=registry).serve[-1] == "4"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            '[k]\ndoc = "d"\ntype = "int"\nmin = 1\ntargets = [{ flag = "--k" }]',
            "an int knob needs integer 'min' and 'max'",
        ),
        ('[k]\ndoc = "d"\ntype = "float"\ntargets = [{ flag = "--k" }]', "'type' must be 'int', 'choice' or 'bool'"),
        (
            '[k]\ndoc = "d"\ntype = "int"\nmin = 1\nmax = 2\ntargets = [{ switch = "--k" }]',
            "a switch target needs a knob of type 'bool'",
        ),
        ('[k]\ndoc = "d"\ntype = "bool"\ntargets = [{ env = "K", flag = "--k" }]', "a target needs exactly one of"),
        (
            '[k]\ndoc = "d"\ntype = "bool"\ntargets = [{ env_json = "K" }]',
            "'paths' .* belong to env_json and flag_json",
        ),
    ],
)
def test_a_malformed_registry_entry_names_the_file_and_the_knob(tmp_path, entry, message):
    path = tmp_path / "knobs.toml"
    path.write_text(entry)
    with pytest.raises(KnobError, match=rf"{path} \[k\]: {message}"):
        load_registry(path)


_INT_KNOB = '[k]\ndoc = "d"\ntype = "int"\nmin = 1\nmax = 64\ntargets = [{ env = "K" }]\n'


def test_a_stacks_limit_narrows_the_range_for_the_manifests_that_name_it(tmp_path):
    path = tmp_path / "knobs.toml"
    path.write_text(_INT_KNOB + '[k.stacks.small]\ndoc = "its kernel stops at 32"\nmax = 32\n')
    registry = load_registry(path)
    small, other = (manifest(env={"K": "3"}, stack=stack) for stack in ("small", "other"))
    assert parse_knobs(other, {"k": 64}, registry=registry) == {"k": 64}  # another stack: the whole range
    assert parse_knobs(small, {"k": 32}, registry=registry) == {"k": 32}
    with pytest.raises(
        KnobError,
        match=rf"value 33 is out of range 1\.\.32, the limit of stack 'small' "
        rf"\({path} \[k\.stacks\.small\]\) \(its kernel stops at 32\)",
    ):
        parse_knobs(small, {"k": 33}, registry=registry)
    with pytest.raises(ManifestError, match="out of range 1..32"):  # the manifest's own value too
        baseline_knobs(manifest(env={"K": "40"}, stack="small"), registry=registry)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[k.stacks.small]\nmax = 32\n", "'doc' must say why the stack accepts less"),
        ('[k.stacks.small]\ndoc = "d"\n', "needs 'doc' and 'min' and/or 'max'"),
        ('[k.stacks.small]\ndoc = "d"\nmax = 128\n', r"1 <= min <= max <= 64 \(a stack's limit narrows"),
        ('[k.stacks.small]\ndoc = "d"\nmin = 8\nmax = 4\n', r"1 <= min <= max <= 64"),
        ('[k.stacks.small]\ndoc = "d"\nmax = 32\nstep = 2\n', r"fields: \['doc', 'max', 'min'\]"),
    ],
)
def test_a_malformed_stack_limit_names_its_table(tmp_path, table, message):
    path = tmp_path / "knobs.toml"
    path.write_text(_INT_KNOB + table)
    with pytest.raises(KnobError, match=rf"{path} \[k\.stacks\.small\]: .*{message}"):
        load_registry(path)


# --- the stability knobs (issue 36) ---

STABILITY = ("warmup_prompts", "cpu_affinity", "disable_compile_cache", "ngram_drafter")


def test_the_stability_knobs_are_lossless_registry_entries_on_the_env_and_flags_they_set():
    entries = {n: (KNOBS[n].type, KNOBS[n].lossless, [t.describe() for t in KNOBS[n].targets]) for n in STABILITY}
    assert entries == {
        "warmup_prompts": ("int", True, ["WARMUP_NUM_PROMPTS"]),
        "cpu_affinity": ("choice", True, ["CPU_AFFINITY"]),
        "disable_compile_cache": ("bool", True, ["VLLM_DISABLE_COMPILE_CACHE"]),
        "ngram_drafter": ("choice", True, ["--speculative-config.method"]),
    }
    assert (KNOBS["warmup_prompts"].minimum, KNOBS["warmup_prompts"].maximum) == (0, 4096)  # 0: no bridge
    assert KNOBS["cpu_affinity"].pattern == SPEC_RULE  # the wrapper's own rule for a CPU list


@pytest.mark.parametrize(
    ("name", "stability"),
    [
        ("reference", {"warmup_prompts": 0, "cpu_affinity": "none"}),
        ("vllm-cpu", {"warmup_prompts": 0, "cpu_affinity": "none", "ngram_drafter": "ngram"}),
        (
            "vllm-gpu",
            {"warmup_prompts": 0, "cpu_affinity": "none", "disable_compile_cache": False, "ngram_drafter": "ngram"},
        ),
        ("vllm-gpu-plain", {"warmup_prompts": 0, "cpu_affinity": "none", "disable_compile_cache": False}),
    ],
)
def test_the_project_manifests_carry_the_stability_knobs_at_their_off_values(name, stability):
    baseline = baseline_knobs(load_manifest(name))
    assert {k: v for k, v in baseline.items() if k in STABILITY} == stability


@pytest.mark.parametrize("value", ["none", "numa", "1", "2-7,10", " 0-3 "])
def test_cpu_affinity_takes_none_numa_or_a_cpu_list(value):
    m = manifest(env={"CPU_AFFINITY": "none"})
    assert parse_knobs(m, {"cpu_affinity": value}) == {"cpu_affinity": value.strip()}


@pytest.mark.parametrize("value", ["all", "1-", "2,x", "0-3;rm", ""])
def test_cpu_affinity_refuses_anything_else_naming_what_it_takes(value):
    with pytest.raises(KnobError, match=r"is not one of \['none', 'numa'\] or text matching"):
        parse_knobs(manifest(env={"CPU_AFFINITY": "none"}), {"cpu_affinity": value})


def test_the_gpu_only_knobs_write_the_launch_vllm_reads():
    # vLLM on a GPU cannot run here: this checks only the argv and env these knobs give the vLLM manifest
    m = load_manifest("vllm-gpu")
    knobs = parse_knobs(m, {"ngram_drafter": "ngram_gpu", "async_scheduling": True, "disable_compile_cache": True})
    patched = apply_knobs(m, baseline_knobs(m) | knobs)
    spec = json.loads(patched.serve[patched.serve.index("--speculative-config") + 1])
    assert spec == {"method": "ngram_gpu", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert "--async-scheduling" in patched.serve and "--no-async-scheduling" not in patched.serve
    assert patched.env["VLLM_DISABLE_COMPILE_CACHE"] == "1"  # vLLM's bool(int(...)): compile afresh
    assert baseline_knobs(patched) == baseline_knobs(m) | knobs  # what was written reads back


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('type = "int"\nmin = 0\nmax = 2\npattern = "x"', "'pattern' .* belongs to choice knobs only"),
        ('type = "choice"\nchoices = ["a"]\npattern = "("', "'pattern' .* belongs to choice knobs only"),
    ],
)
def test_a_pattern_is_a_regular_expression_of_a_choice_knob(tmp_path, entry, message):
    path = tmp_path / "knobs.toml"
    path.write_text(f'[k]\ndoc = "d"\n{entry}\ntargets = [{{ env = "K" }}]\n')
    with pytest.raises(KnobError, match=message):
        load_registry(path)
