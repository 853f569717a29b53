"""Keep secrets out of everything the project stores or prints.

A manifest's env and argv may carry tokens (``HF_TOKEN``, ``--api-key``, a ``DATABASE_URL`` with a
password); the engine needs them, but a stored trial record, a dry run, a log the sweep keeps or a
console line must not repeat them. Three rules, applied everywhere the project writes or prints:

- a **name** looks secret when one of its words (split at anything but letters and digits) holds
  a marker: TOKEN(S), KEY, SECRET, PASSWORD, PASSWD, PASSPHRASE, PASS, PWD, PAT, CREDENTIAL(S),
  AUTH, COOKIE, SESSION, PRIVATE. ``TOKENS`` beside a count word (``MAX_NUM_BATCHED_TOKENS``) is a
  size, a word of the *tokenize* family (``TOKENIZER``, ``TOKENIZERS_PARALLELISM``) is about text,
  and ``PWD`` alone is the shell's working folder: none of them is a credential;
- a **value** of such a name becomes ``***`` (env vars, and ``--flag value`` / ``--flag=value`` in
  argv);
- **inline secrets** become ``***`` in any value or text, whatever its name (``redact_text``):
  the password of a URL (``scheme://user:***@host``; a user part alone, long enough to be a token,
  goes whole), the credentials of an HTTP ``Authorization:`` header or a ``Bearer`` token
  (``--header "Authorization: Bearer ***"``), and a secret-named ``name=value`` pair of a connection
  string or URL query (``Server=db;User Id=u;Password=***;``, where ``Pwd`` is a password too).

``redact_manifest`` applies them to a whole manifest (the parsed ``manifest.json``, as a study stores it):
``serve`` as argv, ``env`` by name, and every other string anywhere in it (``dependencies``, whose
direct references may carry a token in their URL, ``cwd``, and any field a participant added, nested
or not) by the name it stands under, and its inline secrets.

``Scrubber`` applies the same to free text (a stack's log, an error message): every secret value
the env or argv held (inline ones included) is replaced, then every inline secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "REDACTED",
    "SECRET_MARKERS",
    "Scrubber",
    "is_secret_key",
    "redact_argv",
    "redact_env",
    "redact_manifest",
    "redact_text",
    "redact_value",
    "scrub_text",
    "secret_values",
]

REDACTED = "***"
SECRET_MARKERS = (
    "TOKEN",
    "KEY",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "PASS",
    "PWD",
    "PAT",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
)
# Words that make TOKENS a count (vLLM's MAX_NUM_BATCHED_TOKENS): a stored trial needs that value.
_COUNT_WORDS = {"MAX", "MIN", "NUM", "BATCHED", "BATCH", "COUNT", "LIMIT", "LEN"}
# Markers that only count as a whole word: "PASSES", "PATH" and "SPATIAL" hold no password.
_WHOLE_WORD = {"PASS", "PWD", "PAT"}
# TOKENIZE, TOKENIZER(S), TOKENISED...: a tokenizer's folder or setting, not a token.
_TOKENIZE = re.compile(r"TOKENI[SZ]")
_MIN_SCRUB = 4  # shorter values would blank out ordinary text

# Each inline secret is the group ``secret`` of one of these.
_SCHEME = r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://"  # from a word's start: linear time
_URL_PASSWORD = re.compile(_SCHEME + r"[^/\s@:]*:(?P<secret>[^/\s@]*)@")
_URL_TOKEN = re.compile(_SCHEME + r"(?P<secret>[^/\s@:]{8,})@")  # https://ghp_xxxx@github.com
_HTTP_CREDENTIALS = re.compile(
    r"(?:(?i:\b(?:proxy-)?authorization\s*:\s*(?:(?:bearer|basic|token|digest|negotiate)\s+)?)|\bBearer\s+)"
    r"(?P<secret>[^\s'\",;]+)"
)
# A name (at most two words: "User Id") = value pair. Its value runs to a separator, or to the next
# pair of a space-separated string (libpq's "host=db password=x"); a secret only as ``_secret_pair`` says.
_NAME = r"[A-Za-z][A-Za-z0-9_.-]*(?: [A-Za-z0-9_.-]+)?"
_PAIR = re.compile(
    rf"(?<![A-Za-z0-9_.-])(?P<name>{_NAME})\s*=\s*"
    rf"(?P<secret>[^;&'\"\r\n]*?)(?=[;&'\"\r\n]|\s+{_NAME}\s*=|\s*$)"
)
_PAIR_OPENERS, _PAIR_CLOSERS = (";", "&", "?"), (";", "&")
_PASSWORD_WORDS = ("PASSWORD", "PASSWD", "PASSPHRASE")  # a pair so named is a password wherever it stands
_NEAR = 64  # how far a separator may stand from its pair (spaces between)


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w]


def is_secret_key(key: str) -> bool:
    words = _words(key)
    if words == ["PWD"]:
        return False  # the working folder
    counted = bool(_COUNT_WORDS & set(words))
    for word in words:
        if word == "TOKENS" and counted:
            continue
        word = _TOKENIZE.sub("", word)
        for marker in SECRET_MARKERS:
            if (word == marker) if marker in _WHOLE_WORD else (marker in word):
                return True
    return False


def _secret_pair(match: re.Match[str]) -> bool:
    """A ``name=value`` pair whose name says password, or, beside a separator (a connection string's
    ``;``, a URL query's ``?`` / ``&``), whose name looks secret: there ``Pwd`` is ODBC's password,
    not a working folder."""
    text, name, words = match.string, match["name"], _words(match["name"])
    if any(marker in word for word in words for marker in _PASSWORD_WORDS):
        return True
    start, end = match.span()
    beside = text[max(0, start - _NEAR) : start].rstrip().endswith(_PAIR_OPENERS) or text[
        end : end + _NEAR
    ].lstrip().startswith(_PAIR_CLOSERS)
    return beside and (is_secret_key(name) or words == ["PWD"])


# (pattern, which matches are secrets (None: all), text one holds): a log without the text skips the pattern.
_INLINE = (
    (_URL_PASSWORD, None, ("://",)),
    (_URL_TOKEN, None, ("://",)),
    (_HTTP_CREDENTIALS, None, ("uthorization", "UTHORIZATION", "Bearer")),
    (_PAIR, _secret_pair, ("=",)),
)


def _inline_secrets(text: str) -> Iterator[re.Match[str]]:
    for pattern, accept, hints in _INLINE:
        if any(hint in text for hint in hints):
            yield from (m for m in pattern.finditer(text) if accept is None or accept(m))


def _redacted(match: re.Match[str]) -> str:
    start, end = (i - match.start() for i in match.span("secret"))
    return match[0][:start] + REDACTED + match[0][end:]


def _replacement(accept: Callable[[re.Match[str]], bool] | None) -> Callable[[re.Match[str]], str]:
    """What a match is replaced with: redacted where it is a secret (``accept``; None: every match)."""
    return lambda m: _redacted(m) if accept is None or accept(m) else m[0]


def redact_text(text: str) -> str:
    """``text`` with every inline secret (URL password, HTTP credentials, connection-string password)
    replaced by ``***``, whatever name it was found under."""
    for pattern, accept, hints in _INLINE:
        if any(hint in text for hint in hints):
            text = pattern.sub(_replacement(accept), text)
    return text


def redact_value(key: str, value: str) -> str:
    """``***`` for a secret name's value; otherwise the value with its inline secrets removed."""
    if is_secret_key(key):
        return REDACTED
    return redact_text(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` that keeps no secret."""
    return {key: redact_value(key, value) for key, value in env.items()}


def _flag(item: str) -> str | None:
    return item.lstrip("-") if item.startswith("-") and len(item) > 1 else None


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A copy of ``argv`` whose secret flags' values (``--api-key X``, ``--hf-token=X``) are ``***``
    and whose inline secrets (``--header "Authorization: Bearer X"``) are gone."""
    out: list[str] = []
    secret_next = False
    for item in argv:
        if secret_next:
            out.append(REDACTED)
            secret_next = False
            continue
        name, eq, value = item.partition("=")
        flag = _flag(name)
        if flag is not None and is_secret_key(flag):
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(item)
                secret_next = True
            continue
        out.append(redact_text(item))
    return out


def _redact_json(value: Any, name: str | None) -> Any:
    """A JSON value with no secret: a string by the name it stands under (a list's items under the list's),
    an object's entries by their own names."""
    if isinstance(value, str):
        return redact_text(value) if name is None else redact_value(name, value)
    if isinstance(value, list):
        return [_redact_json(item, name) for item in value]
    if isinstance(value, dict):
        return {key: _redact_json(item, str(key)) for key, item in value.items()}
    return value


def redact_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a manifest (the parsed ``manifest.json``) that keeps no secret in any string field: ``serve``
    as argv (``redact_argv``), every other field by its name and its inline secrets."""
    return {
        key: redact_argv(value) if key == "serve" and isinstance(value, list) else _redact_json(value, key)
        for key, value in manifest.items()
    }


def secret_values(env: Mapping[str, str], argv: Iterable[str] = ()) -> set[str]:
    """Every secret value the env and argv hold, inline ones included (what ``Scrubber`` removes
    from free text, wherever a stack printed it)."""
    values = {v for k, v in env.items() if is_secret_key(k)}
    argv = list(argv)
    for i, item in enumerate(argv):
        name, eq, value = item.partition("=")
        flag = _flag(name)
        if flag is not None and is_secret_key(flag):
            values.add(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    for text in [*env.values(), *argv]:
        values.update(match["secret"] for match in _inline_secrets(text))
    return {v for v in values if len(v) >= _MIN_SCRUB and v != REDACTED}


class Scrubber:
    """Removes one process's secrets from free text: the secret values of its env and argv, then
    every inline secret. Built once per stack, so a log is scrubbed line by line cheaply."""

    def __init__(self, env: Mapping[str, str], argv: Iterable[str] = ()) -> None:
        # A longer secret may hold a shorter one: replace it first.
        self._values = sorted(secret_values(env, argv), key=len, reverse=True)

    @classmethod
    def for_stack(cls, env: Mapping[str, str], argv: Iterable[str] = ()) -> Scrubber:
        """For what a stack started from this process sees: ``env`` laid over this process's own
        environment (an inherited token is as secret as the manifest's)."""
        return cls({**os.environ, **env}, argv)

    def __call__(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, REDACTED)
        return redact_text(text)

    def file(self, path: Path) -> bool:
        """Scrub a file in place; whether it held anything to scrub (False for a missing file)."""
        try:
            raw = Path(path).read_bytes()
        except OSError:
            return False
        text = raw.decode("utf-8", errors="surrogateescape")  # any bytes, written back as they were
        scrubbed = self(text)
        if scrubbed == text:
            return False
        Path(path).write_bytes(scrubbed.encode("utf-8", errors="surrogateescape"))
        return True


def scrub_text(text: str, env: Mapping[str, str], argv: Iterable[str] = ()) -> str:
    """``text`` (a stack's log, an error) with every secret of ``env`` and ``argv`` replaced by
    ``***``, and every inline secret removed: the record keeps what a stack printed, not a token
    it echoed."""
    return Scrubber(env, argv)(text)
