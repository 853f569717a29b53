"""Reading the files a user writes (studies, profiles, the knob registry, manifests, data sets):
one ladder of what can go wrong, one message for each rung, raised as the caller's own
``ConfigError`` subclass so that each CLI still exits 2 with one line naming the file.

    read_text(path, error, what="the prompt set")  cannot read / not UTF-8
    load_json(path, error, what=...)                 ... / not valid JSON / nested too deeply
    load_toml(path, error, what=...)                 ... / not valid TOML / nested too deeply
    parse_json(text, error, where="file line 3")     one JSON document given as text (a JSONL line)

``ValueError`` is caught as well as the decoders' own errors: ``int()`` refuses a number of 4,300
digits or more with a plain ``ValueError``, and a deep enough nesting is a ``RecursionError``.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from errors import ConfigError

__all__ = ["load_json", "load_toml", "parse_json", "read_text"]


def read_text(path: Path | str, error: type[ConfigError], *, what: str = "") -> str:
    """The file's text; ``what`` names it in the message (``cannot read the prompt set``)."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise error(f"{path}: cannot read{' ' + what if what else ''}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def parse_json(text: str, error: type[ConfigError], *, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:  # JSONDecodeError, or a number too long for int()
        raise error(f"{where}: not valid JSON ({exc})") from None
    except RecursionError:
        raise error(f"{where}: not valid JSON (nested too deeply)") from None


def load_json(path: Path | str, error: type[ConfigError], *, what: str = "") -> Any:
    return parse_json(read_text(path, error, what=what), error, where=str(path))


def load_toml(path: Path | str, error: type[ConfigError], *, what: str = "") -> dict[str, Any]:
    text = read_text(path, error, what=what)
    try:
        return tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or a number too long for int()
        raise error(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise error(f"{path}: not valid TOML (nested too deeply)") from None
