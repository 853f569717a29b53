"""The write-time rule for absolute paths: a submission folder names nothing the organisers' machine lacks.

Every text file the folder will hold (its manifest, launch data, README, claim and every file copied into it:
serve.py, the stack's own files) is read before anything is written. Each absolute path in it must be

- a path of the system every machine has (``INSTALLED``: its programs, libraries and configuration;
  ``KERNEL``: the kernel's views),
- a path a stack may create at run time in a scratch folder (``SCRATCH``: /tmp, /var/tmp): one whose entry
  directly in that folder this machine does not have (see below),
- a route of the OpenAI-compatible API the stack serves (``ROUTES``: "/v1/models" in a request is no file),
- or made by the stack itself at boot, as its manifest declares (``creates``).

A scratch folder is empty when a machine boots (the fresh check's isolated view mounts an empty one), so a path
in it can only be there on the organisers' machine if the stack makes it while it runs. A name this machine does
not have at write time (``/tmp/<a new name>/...``) is the stack's own; a name it has (a checkout, the model
cache or an environment under /tmp, a download, a file put there by hand: ``/tmp/<a checkout>/weights`` names
the checkout whether or not ``weights`` is there yet) is this machine's, which the organisers' /tmp lacks. The
rule reads the entry directly in the scratch folder, not the whole path, since a stack that makes
``/tmp/<x>/`` makes what is inside it. It cannot tell a folder that an earlier run of the stack made on this
machine from one put there by other means: the manifest says so by declaring it in ``creates``.

Anything else (``/root/models/gemma``, ``/opt/vendor/lib``, the folder's own path on this machine: the folder
names its files relative to itself) stops the write, with the file, the line and the path. Binary files (a
carried wheel) and ``check-data/`` (the check's prompts, text that no stack opens) are not read.

The lists of system paths here are the ones the isolated view shows (``_sandbox``): one rule of what every
machine has, for the write and for the boot.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from errors import ConfigError

__all__ = [
    "INSTALLED",
    "KERNEL",
    "ROUTES",
    "SCRATCH",
    "foreign_paths",
    "readable_text",
    "refuse_foreign_paths",
]

# The system's programs and libraries (on a merged-/usr Debian /bin and /lib are links into /usr) and its
# configuration (certificates, name service): every machine has them, the isolated view shows them read-only
INSTALLED = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc")
KERNEL = ("/dev", "/proc", "/sys")  # the kernel's views
SCRATCH = ("/tmp", "/var/tmp")  # empty at boot: what is in them at run time, the stack made
ROUTES = ("/v1", "/health", "/metrics", "/version", "/tokenize", "/detokenize", "/ping", "/docs", "/openapi.json")
# An absolute path: a slash at the start of a word (after a space, a quote, "=", "(", ":" of a PATH-like
# list) and at least one name after it; "https://host/x" and "{base}/v1" are not one
_PATH = re.compile(r"(?:^|(?<=[\s\"'`=(,:;]))/[\w.@+-]+(?:/[\w.@+-]*)*", re.MULTILINE)
_SHOWN = 8  # the findings an error lists


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _scratch(path: str) -> bool:
    """A path in a scratch folder whose entry there this machine does not have: the stack's own (the module's
    docstring)."""
    for folder in SCRATCH:
        if _under(path, [folder]):
            parts = PurePosixPath(path).relative_to(folder).parts
            return not parts or not os.path.lexists(Path(folder, parts[0]))
    return False


def foreign_paths(text: str, *, made: Sequence[str] = ()) -> list[tuple[int, str]]:
    """Each absolute path in ``text`` that is no system path, no API route, not among ``made`` and no scratch
    path of the stack's own: (line, path)."""
    found = []
    for match in _PATH.finditer(text):
        path = match.group(0).rstrip(".")
        if not (_under(path, [*INSTALLED, *KERNEL, *ROUTES, *made]) or _scratch(path)):
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
