"""Keep secrets out of everything the project stores or prints.

A manifest's env and argv may carry tokens (``HF_TOKEN``, ``--api-key``, a ``DATABASE_URL`` with a
password); the engine needs them, but a stored trial record, a dry run, a log the sweep keeps or a
console line must not repeat them. Three rules, applied everywhere the project writes or prints:

- a **name** looks secret when one of its words (split at anything but letters and digits) holds
  a marker: TOKEN(S), KEY, SECRET, PASSWORD, PASSWD, PASS, PWD, PAT, CREDENTIAL(S), AUTH, COOKIE,
  SESSION, PRIVATE. ``TOKENS`` beside a count word (``MAX_NUM_BATCHED_TOKENS``) is a size, not a
  credential, and ``PWD`` alone is the shell's working folder;
- a **value** of such a name becomes ``***`` (env vars, and ``--flag value`` / ``--flag=value`` in
  argv);
- **credentials inside a URL** (``scheme://user:password@host``) become ``scheme://***@host``
  whatever the name.

``scrub_text`` applies the same to free text (a stack's log, an error message): every secret value
the env or argv held is replaced, and so is every URL credential.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["REDACTED", "SECRET_MARKERS", "is_secret_key", "redact_argv", "redact_env", "redact_value", "scrub_text",
           "secret_values"]  # fmt: skip

REDACTED = "***"
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD", "PAT", "CREDENTIAL", "AUTH",
                  "COOKIE", "SESSION", "PRIVATE")  # fmt: skip
# Words that make TOKENS a count (vLLM's MAX_NUM_BATCHED_TOKENS): a stored trial needs that value.
_COUNT_WORDS = {"MAX", "MIN", "NUM", "BATCHED", "BATCH", "COUNT", "LIMIT", "LEN"}
# Markers that only count as a whole word: "PASSES", "PATH" and "SPATIAL" hold no password.
_WHOLE_WORD = {"PASS", "PWD", "PAT"}
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@:]*:[^/\s@]*|[^/\s@:]{8,})@")
_MIN_SCRUB = 4  # shorter values would blank out ordinary text


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
        for marker in SECRET_MARKERS:
            if (word == marker) if marker in _WHOLE_WORD else (marker in word):
                return True
    return False


def redact_value(key: str, value: str) -> str:
    """``***`` for a secret name's value; otherwise the value with URL credentials removed."""
    if is_secret_key(key):
        return REDACTED
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` that keeps no secret."""
    return {key: redact_value(key, value) for key, value in env.items()}


def _flag(item: str) -> str | None:
    return item.lstrip("-") if item.startswith("-") and len(item) > 1 else None


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A copy of ``argv`` whose secret flags' values (``--api-key X``, ``--hf-token=X``) are ``***``
    and whose URL credentials are gone."""
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
        out.append(redact_value("", item))
    return out


def secret_values(env: Mapping[str, str], argv: Iterable[str] = ()) -> set[str]:
    """Every secret value the env and argv hold (what ``scrub_text`` removes from free text)."""
    values = {v for k, v in env.items() if is_secret_key(k)}
    argv = list(argv)
    for i, item in enumerate(argv):
        name, eq, value = item.partition("=")
        flag = _flag(name)
        if flag is not None and is_secret_key(flag):
            values.add(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return {v for v in values if len(v) >= _MIN_SCRUB}


def scrub_text(text: str, env: Mapping[str, str], argv: Iterable[str] = ()) -> str:
    """``text`` (a stack's log, an error) with every secret of ``env`` and ``argv`` replaced by
    ``***``, and every URL credential removed: the record keeps what a stack printed, not a token
    it echoed."""
    for value in sorted(secret_values(env, argv), key=len, reverse=True):  # a longer secret may hold a shorter
        text = text.replace(value, REDACTED)
    return redact_value("", text)
