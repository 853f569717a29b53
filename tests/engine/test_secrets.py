from engine.secrets import REDACTED, redact_env, scrub_text


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
