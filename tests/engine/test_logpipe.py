"""A stack's log goes to disk through a scrubbing pipe: never a raw secret, never a stalled stack."""

import os
import secrets
import time

from engine.launch import MAX_LINE, EngineProcess, LogPipe, build_launch
from engine.secrets import Scrubber
from tests.stacks import stub_manifest


def test_a_secret_written_in_pieces_never_lands_on_disk_and_every_byte_else_does(tmp_path):
    token = f"hf_{secrets.token_hex(8)}"
    log = tmp_path / "engine.log"
    pipe = LogPipe(log, Scrubber({"HF_TOKEN": token}))
    fd = pipe.open()
    try:
        os.write(fd, f"boot\ntoken {token[:6]}".encode())
        pipe.settle()
        assert log.read_bytes() == b"boot\n"  # the unfinished line waits for its end
        os.write(fd, f"{token[6:]} ok\n\xff raw\rprogress 50%\r".encode("latin-1"))
        pipe.settle()
        assert log.read_bytes() == "boot\ntoken *** ok\n\xff raw\rprogress 50%\r".encode("latin-1")
        os.write(fd, b"last line, no end")
    finally:
        os.close(fd)
    pipe.close()
    assert log.read_bytes().endswith(b"progress 50%\rlast line, no end")


def test_a_line_without_an_end_is_written_once_it_passes_the_limit_cut_where_no_secret_spans(tmp_path):
    log = tmp_path / "engine.log"
    pipe = LogPipe(log, Scrubber({"API_KEY": "sk-abcdef12"}))
    fd = pipe.open()
    try:
        os.write(fd, b"." * MAX_LINE + b" sk-abc")  # a progress line with no end, a key split across writes
        deadline = time.monotonic() + 5
        while log.stat().st_size == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.read_bytes() == b"." * MAX_LINE + b" "  # cut at the space: the key's start waits
        os.write(fd, b"def12 end\n")
        pipe.settle()
        assert log.read_bytes().endswith(b". *** end\n")
    finally:
        os.close(fd)
        pipe.close()


def test_a_stack_that_echoes_its_secrets_has_none_in_its_log_while_it_runs(tmp_path, monkeypatch):
    inherited, own = f"ghp_{secrets.token_hex(12)}", f"wk_{secrets.token_hex(12)}"
    monkeypatch.setenv("GITHUB_PAT", inherited)
    launch = build_launch(stub_manifest(STUB_ECHO_ALL="1", WANDB_API_KEY=own))
    launch.argv.extend(["--header", f"Authorization: Bearer {own}"])  # the stub ignores its arguments
    with EngineProcess(launch, log_path=tmp_path / "engine.log"):
        on_disk = (tmp_path / "engine.log").read_bytes()  # the stack still runs: no scrub-at-stop yet
        assert b"stub: env GITHUB_PAT=***" in on_disk and b"stub: env WANDB_API_KEY=***" in on_disk
        assert b"Authorization: Bearer ***" in on_disk
        assert inherited.encode() not in on_disk and own.encode() not in on_disk


def test_a_stack_that_prints_megabytes_at_boot_is_not_stalled_and_loses_nothing(tmp_path):
    manifest = stub_manifest()
    flood = 8 << 20  # eight times what the pipe holds: only a reader that keeps up lets it boot
    script = (
        f"import os, runpy, sys; os.write(1, b'x' * {flood} + b'\\n'); sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    manifest = manifest.model_copy(update={"serve": [manifest.serve[0], "-c", script, *manifest.serve[1:]]})
    with EngineProcess(build_launch(manifest), log_path=tmp_path / "engine.log", boot_timeout_s=30) as engine:
        assert engine.wait_ready() >= 0
    assert (tmp_path / "engine.log").stat().st_size > flood
