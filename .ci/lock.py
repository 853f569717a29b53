"""The lock: ``requirements.lock`` pins every distribution the project's install resolves (its
dependencies and the ``test`` extra's, and theirs), so that README block 1 (``pip install -c
requirements.lock -e '.[test]'``) installs exactly what CI tested.

    python .ci/lock.py check   # the lock against pyproject.toml, and this environment against the lock
    python .ci/lock.py write   # the lock from this environment (see docs/dependencies.md)

``check`` fails (exit 1, one line per problem) when a dependency of ``pyproject.toml`` is not
pinned, is pinned at a version its range does not allow, or when a distribution the install
resolved here is missing from the lock or installed at another version than the lock says.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = REPO / "pyproject.toml"
LOCK = REPO / "requirements.lock"
EXTRAS = ("test",)  # the extras README block 1 installs
HEADER = """\
# The versions CI tested: README block 1 installs with `-c requirements.lock`; `.ci/run` fails when
# this file and pyproject.toml disagree. Regenerate it as docs/dependencies.md says, never by hand.
"""
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def project_requirements(pyproject_text: str) -> list[Requirement]:
    """The dependencies ``pyproject.toml`` declares, the installed extras' included."""
    project = tomllib.loads(pyproject_text)["project"]
    texts = [
        *project.get("dependencies", []),
        *(r for e in EXTRAS for r in project.get("optional-dependencies", {}).get(e, [])),
    ]
    return [Requirement(t) for t in texts]


def read_lock(lock_text: str) -> tuple[dict[str, str], list[str]]:
    """The lock's pins (canonical name -> version) and its malformed or repeated lines."""
    pins: dict[str, str] = {}
    problems = []
    for number, line in enumerate(lock_text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.fullmatch(line)
        if match is None:
            problems.append(f"requirements.lock line {number}: {line!r} is not name==version")
            continue
        name = canonicalize_name(match[1])
        if name in pins:
            problems.append(f"requirements.lock line {number}: {match[1]} is pinned twice")
        pins[name] = match[2]
    return pins, problems


def disagreements(pyproject_text: str, lock_text: str) -> list[str]:
    """Where the lock does not satisfy ``pyproject.toml``: a dependency unpinned, or pinned outside its range."""
    pins, problems = read_lock(lock_text)
    for requirement in project_requirements(pyproject_text):
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None:
            problems.append(f"pyproject.toml requires {requirement}, which requirements.lock does not pin")
        elif not requirement.specifier.contains(pinned, prereleases=True):
            problems.append(
                f"requirements.lock pins {requirement.name}=={pinned}, which pyproject.toml's "
                f"{requirement} does not allow"
            )
    return problems


def resolved(requirements: list[Requirement]) -> dict[str, str | None]:
    """What the install resolved here: canonical name -> installed version (None: not installed),
    for the requirements whose markers hold and, through each installed distribution's metadata, theirs."""
    found: dict[str, str | None] = {}
    wanted = [(r, frozenset()) for r in requirements]
    visited: set[tuple[str, frozenset[str]]] = set()
    while wanted:
        requirement, extras = wanted.pop()
        environments = [{"extra": e} for e in extras] or [{"extra": ""}]
        if requirement.marker and not any(requirement.marker.evaluate(env) for env in environments):
            continue
        name, asked = canonicalize_name(requirement.name), frozenset(requirement.extras)
        if (name, asked) in visited:
            continue
        visited.add((name, asked))
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            found.setdefault(name, None)
            continue
        found[name] = distribution.version
        wanted += [(Requirement(text), asked) for text in distribution.requires or []]
    return found


def drift(requirements: list[Requirement], lock_text: str) -> list[str]:
    """Where this environment differs from the lock, for what the project's install resolves."""
    pins, _ = read_lock(lock_text)
    problems = []
    for name, version in sorted(resolved(requirements).items()):
        if version is None:
            problems.append(f"{name} is required but not installed here")
        elif name not in pins:
            problems.append(f"{name} {version} is installed for this project but requirements.lock does not pin it")
        elif pins[name] != version:
            problems.append(f"{name} is installed at {version}; requirements.lock pins {pins[name]}")
    return problems


def main(argv: list[str]) -> int:
    if argv == ["write"]:
        found = resolved(project_requirements(PYPROJECT.read_text()))
        missing = sorted(n for n, v in found.items() if v is None)
        if missing:
            print(
                f"lock: not installed here: {missing}; install the project first (docs/dependencies.md)",
                file=sys.stderr,
            )
            return 1
        LOCK.write_text(HEADER + "".join(f"{name}=={found[name]}\n" for name in sorted(found)))
        print(f"lock: {LOCK} pins {len(found)} distributions")
        return 0
    if argv == ["check"]:
        lock_text, pyproject_text = LOCK.read_text(), PYPROJECT.read_text()
        problems = disagreements(pyproject_text, lock_text) + drift(project_requirements(pyproject_text), lock_text)
        for problem in problems:
            print(f"lock: {problem}", file=sys.stderr)
        if not problems:
            print("lock: pyproject.toml, requirements.lock and this environment agree")
        return 1 if problems else 0
    print("usage: python .ci/lock.py check | write", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
