from engine.secrets import REDACTED, is_secret_key, redact_argv, redact_env, scrub_text


def test_secret_looking_keys_are_redacted_and_others_kept():
    env = {
        "HF_TOKEN": "hf_abc",
        "WANDB_API_KEY": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "DB_PASSWORD": "p",
        "GOOGLE_APPLICATION_CREDENTIALS": "/c.json",
        "BASIC_AUTH": "u:p",
        "OPENAI_APIKEY": "k2",
        "MAX_NUM_BATCHED_TOKENS": "512",
        "SLIDING_WINDOW": "188",
        "LM_HEAD_KEEPSET_BUCKET": "hf://x",
    }
    redacted = redact_env(env)
    secret = {"HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
              "GOOGLE_APPLICATION_CREDENTIALS", "BASIC_AUTH", "OPENAI_APIKEY"}
    assert {k for k, v in redacted.items() if v == REDACTED} == secret
    assert redacted["MAX_NUM_BATCHED_TOKENS"] == "512"
    assert env["HF_TOKEN"] == "hf_abc"  # the input is not changed


def test_a_secret_a_stack_echoes_is_scrubbed_from_its_log_text():
    env = {"HF_TOKEN": "hf_abcdef", "SLIDING_WINDOW": "188", "API_KEY": "k"}
    text = "boot with hf_abcdef\nwindow 188, key k"
    # the token goes; ordinary values and too-short secrets (which would blank out text) stay
    assert scrub_text(text, env) == "boot with ***\nwindow 188, key k"


def test_the_broader_rule_sees_these_names_as_secret_and_not_these():
    secret = ["GITHUB_PAT", "PASSWD", "DB_PASS", "HF_TOKENS", "SESSION_COOKIE", "SSH_PRIVATE_KEY_FILE", "api-key"]
    plain = ["MAX_NUM_BATCHED_TOKENS", "PWD", "PATH", "PASSES", "SPATIAL_DIM", "MAX_MODEL_LEN", "CENTROID_TOP_K"]
    assert [k for k in secret if not is_secret_key(k)] == []
    assert [k for k in plain if is_secret_key(k)] == []


def test_credentials_inside_a_url_are_removed_whatever_the_name():
    env = {"DATABASE_URL": "postgresql://sweeper:s3cret@db:5432/runs", "MIRROR": "https://user:tok@x.org/simple",
           "HOMEPAGE": "https://example.org/a@b"}  # fmt: skip
    assert redact_env(env) == {"DATABASE_URL": "postgresql://***@db:5432/runs", "MIRROR": "https://***@x.org/simple",
                               "HOMEPAGE": "https://example.org/a@b"}  # fmt: skip
    assert scrub_text("connecting to postgresql://sweeper:s3cret@db:5432/runs", {}) == "connecting to postgresql://***@db:5432/runs"


def test_secret_flags_in_argv_are_redacted_in_both_spellings_and_scrubbed_from_text():
    argv = ["vllm", "serve", "--api-key", "sk-12345", "--hf-token=hf_67890", "--port", "8000", "--max-num-batched-tokens", "512"]
    assert redact_argv(argv) == ["vllm", "serve", "--api-key", REDACTED, f"--hf-token={REDACTED}", "--port", "8000",
                                 "--max-num-batched-tokens", "512"]  # fmt: skip
    assert scrub_text("args: sk-12345 hf_67890 512", {}, argv) == "args: *** *** 512"
