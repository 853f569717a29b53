"""The folder's ``dependencies``: exactly what the trials ran, in a form the organisers' ``pip install`` resolves.

    a release            ``name==version`` as the trials' environment had it installed, its local label kept
    a build of a release ``torch==2.13.0+cpu``, ``torch==2.11.0+cu130``: the build the trials ran, which PyTorch's
                         index serves (``BUILD_INDEX``); the folder's README names the index to add, since a
                         requirement cannot; a bare ``torch==2.11.0`` would let the organisers' index pick a
                         build the stack was not built for
    a direct reference   ``name @ url`` as the manifest or the installation gives it
    a local wheel        a dependency installed from a wheel file: carried in the folder's ``wheels/`` and named
                         by its relative path (``./wheels/<file>``), which pip installs from the folder

Refused, with the dependency named (``ConfigError``): a dependency the trials' environment did not have (it
cannot be pinned to what ran), one installed from a local folder or a file that is no wheel (or is gone), and a
local label no index serves (a build of a commit, ``+g3e8afdf78``).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from engine.host import pins
from engine.reference.prepare import DEPENDENCIES as PREPARE_DEPENDENCIES
from errors import ConfigError

__all__ = ["BUILD_INDEX", "WHEELS", "Pinned", "pinned_dependencies", "requirement_name"]

WHEELS = "wheels"  # the folder's copies of the wheels the trials installed from files
BUILD_INDEX = "https://download.pytorch.org/whl/{label}"
# A local label that names a build of one release for one accelerator, served by BUILD_INDEX
_BUILD_LABEL = re.compile(r"\+(cpu|cu\d+|rocm[\d.]+|xpu)$")
_DIRECT = re.compile(r"^\s*[A-Za-z0-9][\w.-]*(\[[^\]]*\])?\s*@\s*\S")  # PEP 508's name [extras] @ url


def requirement_name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[=<>!~;@(]", requirement.strip(), maxsplit=1)[0]).lower()


@dataclass(frozen=True)
class Pinned:
    dependencies: list[str]  # the folder's manifest's
    wheels: dict[str, Path]  # the folder's wheels/<file> <- this machine's file
    builds: dict[str, str]  # a build's requirement -> the index that serves it, which the folder's README names
    source: str  # a sentence saying where the pins came from


def _found(names: list[str], provenance: dict[str, Any], *, prepare: bool) -> tuple[dict[str, str], str, list[str]]:
    found: dict[str, str] = dict(provenance.get("packages") or {})
    source = "as the stack's environment had them when the trials ran (their provenance)"
    if not found:
        found, _ = pins(names, python=sys.executable)
        source = "as the environment that wrote this folder has them: the trials' provenance did not record theirs"
    missing = [n for n in names if not _DIRECT.match(n) and requirement_name(n) not in found]
    if prepare:
        needed = [n for n in PREPARE_DEPENDENCIES if requirement_name(n) not in found]
        here, _ = pins(needed, python=sys.executable)
        missing += [n for n in needed if requirement_name(n) not in here]
        found = here | found
    return found, source, missing


def _carried(requirement: str) -> tuple[str, dict[str, Path], dict[str, str]]:
    """One pin as the folder names it, the wheel it carries, the build index it needs; ConfigError if none."""
    name, _, rest = requirement.partition(" @ ")
    if rest.startswith("file:"):
        path = Path(unquote(urlparse(rest).path))
        if path.suffix != ".whl" or not path.is_file():
            what = "a local folder" if path.is_dir() else "a file that is no wheel" if path.exists() else "a gone file"
            raise ConfigError(
                f"dependency {name} was installed in the trials' environment from {what} ({path.name}), which no "
                "index serves and the folder cannot carry: install it there from a wheel (pip wheel) or a release, "
                "and run the trials again; nothing was written"
            )
        rel = f"{WHEELS}/{path.name}"
        return f"./{rel}", {rel: path}, {}
    version = requirement.partition("==")[2]
    if "+" in version and not rest:
        label = _BUILD_LABEL.search(version)
        if label is None:
            raise ConfigError(
                f"dependency {requirement} is a local build (its version's label +{version.split('+', 1)[1]}) that no "
                "index serves: install a release, or install it from its wheel file so that the folder carries it, "
                "and run the trials again; nothing was written"
            )
        return requirement, {}, {requirement: BUILD_INDEX.format(label=label.group(1))}
    return requirement, {}, {}


def pinned_dependencies(names: list[str], provenance: dict[str, Any], *, prepare: bool) -> Pinned:
    """Each of the manifest's dependencies ``names`` and everything it requires, pinned as the module's docstring
    says from the trials' ``provenance`` (its ``packages``; where it holds none, a study of an older version of
    this tool, as this environment has them). ``prepare``: the folder prepares the reference model at first boot,
    so what that needs too, as the environment that prepared it for the trials (this one) has it."""
    names = [n for n in names if n.strip()]
    found, source, missing = _found(names, provenance, prepare=prepare)
    if missing:
        raise ConfigError(
            f"cannot pin {', '.join(missing)}: not installed where the trials ran ({source.removeprefix('as ')}), so "
            "no version of it ran there; install it in the stack's environment or drop it from the manifest's "
            "dependencies; nothing was written"
        )
    keys = [requirement_name(n) for n in names]
    own = [n if _DIRECT.match(n) else found[key] for key, n in zip(keys, names)]
    dependencies: list[str] = []
    wheels: dict[str, Path] = {}
    builds: dict[str, str] = {}
    for requirement in own + [found[key] for key in sorted(found) if key not in keys]:
        named, wheel, build = _carried(requirement)
        dependencies.append(named)
        wheels |= wheel
        builds |= build
    return Pinned(dependencies, wheels, builds, source)
