"""The lock (``requirements.lock``, checked by ``.ci/lock.py``, which ``.ci/run`` runs after README
block 1) pins what pyproject.toml asks for, and the checker refuses a lock that disagrees."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent


def _load_checker():
    spec = importlib.util.spec_from_file_location("ci_lock", REPO / ".ci" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock = _load_checker()
PYPROJECT, LOCK = lock.PYPROJECT.read_text(), lock.LOCK.read_text()


def test_the_lock_pins_every_dependency_of_pyproject_within_its_range():
    assert lock.disagreements(PYPROJECT, LOCK) == []
    pins, _ = lock.read_lock(LOCK)
    assert pins["torch"].startswith("2.13.0")  # the CPU build pyproject pins (2.13.0+cpu here)


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        (
            "\noptuna==5.0.0\n",
            "\noptuna==4.9.0\n",
            "pins optuna==4.9.0, which pyproject.toml's optuna==5.0.0 does not allow",
        ),
        (
            "\ntransformers==",
            "\n# transformers==",
            "requires transformers<5.25,>=5.16, which requirements.lock does not pin",
        ),
        ("\nhypothesis==", "\n# hypothesis==", "requires hypothesis>=6.100"),  # the test extra's too
        ("\nrich==", "\nrich>=", "is not name==version"),
        ("\nrich==", "\nrich==13.0.0\nrich==", "rich is pinned twice"),
    ],
)
def test_a_lock_that_disagrees_with_pyproject_is_refused_naming_the_dependency(old, new, says):
    assert old in LOCK
    problems = lock.disagreements(PYPROJECT, LOCK.replace(old, new, 1))
    assert any(says in p for p in problems), problems


def test_an_environment_that_resolved_another_version_than_the_lock_is_refused():
    # pytest and what it needs, as installed here, against locks that say otherwise
    installed = lock.resolved([Requirement("pytest")])["pytest"]
    other = "\n".join(line for line in LOCK.splitlines() if not line.startswith("pytest==")) + "\npytest==0.1\n"
    assert f"pytest is installed at {installed}; requirements.lock pins 0.1" in lock.drift(
        [Requirement("pytest")], other
    )
    missing = "\n".join(line for line in LOCK.splitlines() if not line.startswith("pluggy=="))
    assert any("pluggy" in p and "does not pin it" in p for p in lock.drift([Requirement("pytest")], missing))
