"""The write-time rule for absolute paths: a submission folder names nothing the organisers' machine lacks.

Every text file the folder will hold (its manifest, launch data, README, claim and every file copied into it:
serve.py, the stack's own files) is read before anything is written. Each absolute path in it must be

- a system path every machine has (``SYSTEM``: the kernel's views, /tmp, the system's programs, libraries
  and configuration),
- a route of the OpenAI-compatible API the stack serves (``ROUTES``: "/v1/models" in a request is no file),
- or made by the stack itself at boot, as its manifest declares (``creates``).

Anything else (``/root/models/gemma``, ``/opt/vendor/lib``, the folder's own path on this machine: the folder
names its files relative to itself) stops the write, with the file, the line and the path. Binary files (a
carried wheel) and ``check-data/`` (the check's prompts, text that no stack opens) are not read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from errors import ConfigError

__all__ = ["ROUTES", "SYSTEM", "foreign_paths", "readable_text", "refuse_foreign_paths"]

SYSTEM = ("/dev", "/proc", "/sys", "/tmp", "/var/tmp", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc")
ROUTES = ("/v1", "/health", "/metrics", "/version", "/tokenize", "/detokenize", "/ping", "/docs", "/openapi.json")
# An absolute path: a slash at the start of a word (after a space, a quote, "=", "(", ":" of a PATH-like
# list) and at least one name after it; "https://host/x" and "{base}/v1" are not one
_PATH = re.compile(r"(?:^|(?<=[\s\"'`=(,:;]))/[\w.@+-]+(?:/[\w.@+-]*)*", re.MULTILINE)
_SHOWN = 8  # the findings an error lists


def _allowed(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def foreign_paths(text: str, *, made: Sequence[str] = ()) -> list[tuple[int, str]]:
    """Each absolute path in ``text`` that is no system path, no API route and not among ``made``: (line, path)."""
    found = []
    for match in _PATH.finditer(text):
        path = match.group(0).rstrip(".")
        if not _allowed(path, [*SYSTEM, *ROUTES, *made]):
            found.append((text.count("\n", 0, match.start()) + 1, path))
    return found


def refuse_foreign_paths(texts: Mapping[str, str], *, made: Sequence[str] = ()) -> None:
    """Raise ConfigError naming each file, line and path of ``texts`` ({the folder's file: its text}) that breaks
    the rule (see the module's docstring)."""
    found = [(rel, line, path) for rel, text in texts.items() for line, path in foreign_paths(text, made=made)]
    if not found:
        return
    shown = "\n".join(f"  {rel}, line {line}: {path}" for rel, line, path in found[:_SHOWN])
    more = f"\n  and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""
    raise ConfigError(
        f"the submission would name {len(found)} path(s) of this machine outside the folder, which the organisers' "
        f"machine does not have:\n{shown}{more}\nName the weights by model_id, a file of the stack relative to its "
        "folder, or a path the stack makes at boot (the manifest's `creates`); nothing was written"
    )


def readable_text(data: bytes) -> str | None:
    """``data`` as text, None for a binary file (a NUL byte, or not UTF-8)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
