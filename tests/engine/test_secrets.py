from engine.secrets import (
    REDACTED,
    Scrubber,
    is_secret_key,
    redact_argv,
    redact_env,
    redact_manifest,
    redact_text,
    scrub_text,
)


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
    secret = {
        "HF_TOKEN",
        "WANDB_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "BASIC_AUTH",
        "OPENAI_APIKEY",
    }
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
    env = {
        "DATABASE_URL": "postgresql://sweeper:s3cret@db:5432/runs",
        "MIRROR": "https://user:tok@x.org/simple",
        "HOMEPAGE": "https://example.org/a@b",
        "CLONE": "https://ghp_0123456789@github.com/o/r",
    }
    # The user stays (a command that repeats the URL is still readable); a lone token goes whole.
    assert redact_env(env) == {
        "DATABASE_URL": "postgresql://sweeper:***@db:5432/runs",
        "MIRROR": "https://user:***@x.org/simple",
        "HOMEPAGE": "https://example.org/a@b",
        "CLONE": "https://***@github.com/o/r",
    }
    assert (
        scrub_text("connecting to postgresql://sweeper:s3cret@db:5432/runs", {})
        == "connecting to postgresql://sweeper:***@db:5432/runs"
    )


def test_secret_flags_in_argv_are_redacted_in_both_spellings_and_scrubbed_from_text():
    argv = [
        "vllm",
        "serve",
        "--api-key",
        "sk-12345",
        "--hf-token=hf_67890",
        "--port",
        "8000",
        "--max-num-batched-tokens",
        "512",
    ]
    assert redact_argv(argv) == [
        "vllm",
        "serve",
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--port",
        "8000",
        "--max-num-batched-tokens",
        "512",
    ]
    assert scrub_text("args: sk-12345 hf_67890 512", {}, argv) == "args: *** *** 512"


def test_passphrases_are_secret_and_tokenizer_folders_and_settings_are_not():
    assert is_secret_key("SSH_KEY_PASSPHRASE") and is_secret_key("GPG_PASSPHRASE") and is_secret_key("HF_TOKEN")
    plain = {"GEMMA_SWEEP_TOKENIZER": "/models/tok", "TOKENIZERS_PARALLELISM": "false", "HF_TOKENIZER_DIR": "/t"}
    assert redact_env(plain) == plain
    assert is_secret_key("TOKENIZER_TOKEN")  # a token is still a token beside the word


def test_a_bearer_token_in_argv_is_redacted_in_each_spelling_and_scrubbed_from_an_echo():
    token = "tok_5f3a9c0d"
    argv = [
        "curl",
        "--header",
        f"Authorization: Bearer {token}",
        "-H",
        f"Authorization:Bearer {token}",
        f"--header=Authorization: Bearer {token}",
        "-H",
        f"proxy-authorization: Basic {token}",
        "--max-time",
        "5",
    ]
    assert redact_argv(argv) == [
        "curl",
        "--header",
        "Authorization: Bearer ***",
        "-H",
        "Authorization:Bearer ***",
        "--header=Authorization: Bearer ***",
        "-H",
        "proxy-authorization: Basic ***",
        "--max-time",
        "5",
    ]
    # A stack that prints the token alone, out of its header, is scrubbed too.
    assert scrub_text(f"auth ok for {token}; Bearer {token}", {}, argv) == "auth ok for ***; Bearer ***"


def test_a_password_inside_a_connection_string_or_url_query_is_redacted():
    env = {
        "DB_CONN": "Server=db;User Id=sweeper;Password=p4ss-w0rd;",
        "ODBC": "Driver={x};Uid=u;Pwd=hunter22",
        "PG_DSN": "host=db user=u password=pg-s3cret dbname=runs",
        "RESULTS": "https://h/x?user=u&password=q-s3cret",
        "OPTS": "a=1;b=2",
    }
    assert redact_env(env) == {
        "DB_CONN": "Server=db;User Id=sweeper;Password=***;",
        "ODBC": "Driver={x};Uid=u;Pwd=***",
        "PG_DSN": "host=db user=u password=*** dbname=runs",
        "RESULTS": "https://h/x?user=u&password=***",
        "OPTS": "a=1;b=2",
    }
    echoed = "stub: env DB_CONN=... p4ss-w0rd hunter22 pg-s3cret q-s3cret\nstub: env PWD=/work"
    assert scrub_text(echoed, env) == "stub: env DB_CONN=... *** *** *** ***\nstub: env PWD=/work"


def test_inline_rules_keep_ordinary_text_and_stay_linear_on_long_words():
    text = "max_num_seqs=256 a=b; Bearer; bearer of news, https://example.org/a@b sqlite:///runs/sweeps.db"
    assert redact_text(text) == text
    long_word = "a" * 200_000  # a quadratic pattern would take minutes here
    assert redact_text(long_word + "://u:p@h") == long_word + "://u:***@h"


def test_a_scrubber_scrubs_a_file_in_place_byte_for_byte_elsewhere(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(b"\xff\xfe raw bytes\ntoken hf_abcdefgh\n")
    scrub = Scrubber({"HF_TOKEN": "hf_abcdefgh"})
    assert scrub.file(log) and log.read_bytes() == b"\xff\xfe raw bytes\ntoken ***\n"
    assert not scrub.file(log) and not scrub.file(tmp_path / "missing.log")


def test_every_string_field_of_a_manifest_is_redacted_by_the_one_rule():
    token = "ghp_0123456789abcdef"
    manifest = {
        "name": "n",
        "port": 8000,
        "serve": ["python", "serve.py", "--api-key", "k-7a8b9c"],
        "env": {"HF_TOKEN": "hf_x1y2z3", "SLIDING_WINDOW": "188"},
        "dependencies": [
            f"vllm @ https://{token}@github.com/o/r/w.whl",
            f"x @ https://u:{token}@h/x.whl",
            "torch==2.13.0",
        ],
        "cwd": f"https://builder:{token}@host/src",
        "weights": {"bucket": f"s3://k:{token}@b/w", "auth_token": "plain-value", "layers": [1, 2]},
        "prefix_caching": False,
    }
    redacted = redact_manifest(manifest)
    assert token not in str(redacted) and "hf_x1y2z3" not in str(redacted) and "k-7a8b9c" not in str(redacted)
    assert redacted["serve"] == ["python", "serve.py", "--api-key", REDACTED]
    assert redacted["env"] == {"HF_TOKEN": REDACTED, "SLIDING_WINDOW": "188"}
    assert redacted["dependencies"] == [
        f"vllm @ https://{REDACTED}@github.com/o/r/w.whl",
        f"x @ https://u:{REDACTED}@h/x.whl",
        "torch==2.13.0",
    ]
    assert redacted["weights"] == {"bucket": f"s3://k:{REDACTED}@b/w", "auth_token": REDACTED, "layers": [1, 2]}
    assert (redacted["name"], redacted["port"], redacted["prefix_caching"]) == ("n", 8000, False)
    assert manifest["env"]["HF_TOKEN"] == "hf_x1y2z3"  # the input is not changed
