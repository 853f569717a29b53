"""The long texts PPL is scored on by context length (``studies/data/ppl_refs_long.jsonl``).

    python -m datagen.longtexts            # write the set from this system's license texts
    python -m datagen.longtexts --check    # tokenise them again and compare with the committed set

Where they come from: four license texts every Debian and Ubuntu system ships in
``/usr/share/common-licenses`` (package ``base-files``), each several thousand tokens of one
self-contained document: ``GPL-3`` (35,149 bytes), ``GFDL-1.3`` (22,955), ``LGPL-2.1`` (26,530)
and ``GPL-2`` (18,092). Their licence is their own first lines: "Everyone is permitted to copy and
distribute verbatim copies of this license document, but changing it is not allowed" (Free Software
Foundation); the set holds each text whole and unchanged, as token ids. Each file's sha256 is pinned
below (``SOURCES``): a system with other copies is refused rather than silently scored on other text.
They were chosen for being on every machine this project runs on, offline, long enough for the 2k
bucket (the shortest, GPL-2, is 3,950 tokens), and of a register (legal prose that names its defined terms
again and again) where context a few hundred tokens back pays: what a sliding window forgets.

A record is the reference format (``engine.config.PplRecord``): ``context_token_ids`` is ``<bos>`` alone,
``target_token_ids`` the text as the reference model's tokenizer (Gemma 3's, from the prepared model:
``engine.reference.prepare``) splits it, without special tokens. So the token at index p of the prompt
was predicted from p tokens of context: what ``engine.measurement`` buckets by. A profile's
``length_buckets`` cut each text where its last bucket ends (``BenchProfile.load_lengths``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from cli import command
from errors import DataError, GemmaSweepError
from studies import STUDIES_DIR

__all__ = ["OUT", "SOURCES", "main", "records"]

LICENSES = Path("/usr/share/common-licenses")
OUT = STUDIES_DIR / "data" / "ppl_refs_long.jsonl"
# file name -> sha256 of the copy the committed set was tokenised from (Debian 12's base-files)
SOURCES = {
    "GPL-3": "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986",
    "GFDL-1.3": "110535522396708cea37c72a802c5e7e81391139f5f7985631c93ef242b206a4",
    "LGPL-2.1": "dc626520dcd53a22f727af3ee42c770e56c97a64fe3adb063799d8ab032fe551",
    "GPL-2": "8177f97513213526df2cf6184d8ff986c675afb514d4e68a404010521b880643",
}


def _text(name: str) -> str:
    path = LICENSES / name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read it ({exc.strerror}); the set is built from this system's copy") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != SOURCES[name]:
        raise DataError(f"{path}: sha256 {digest}, not the {SOURCES[name]} the committed set was built from")
    return data.decode("utf-8")


def records(tokenizer: Any) -> list[dict[str, Any]]:
    """One record a text, in ``SOURCES``' order."""
    return [
        {
            "id": name,
            "context_token_ids": [tokenizer.bos_token_id],
            "target_token_ids": [int(t) for t in tokenizer(_text(name), add_special_tokens=False).input_ids],
        }
        for name in SOURCES
    ]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m datagen.longtexts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help=f"compare with {OUT} instead of writing it")
    return parser.parse_args(argv)


@command(_parse, usage=(GemmaSweepError,))  # every error here is the data's: the texts, the model's files
def main(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    from engine.reference.prepare import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model().checkpoint_dir)
    lines = [json.dumps(r) for r in records(tokenizer)]
    if args.check:
        same = OUT.read_text().splitlines() == lines
        print(f"{OUT}: {'the same' if same else 'DIFFERS FROM'} this system's texts, tokenised again")
        return 0 if same else 1
    OUT.write_text("\n".join(lines) + "\n")
    for line in lines:
        record = json.loads(line)
        print(f"{record['id']}: {len(record['target_token_ids'])} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
