"""Shared fixtures. Keep this small: helpers live next to what they help (e.g. tests/stacks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.profiles import CHALLENGE_DATA_ENV, BenchProfile
from tests.stacks import stub_profile as _stub_profile

# The organisers' files are not the project's: the README's test command names their folder. An
# absolute path, so that tests that change folder (and the processes they start) still find it.
if os.environ.get(CHALLENGE_DATA_ENV):
    os.environ[CHALLENGE_DATA_ENV] = str(Path(os.environ[CHALLENGE_DATA_ENV]).expanduser().resolve())


@pytest.fixture
def stub_profile(tmp_path) -> BenchProfile:
    """A tiny benchmark profile over throw-away data sets, sized for the stub stack."""
    return _stub_profile(tmp_path)


@pytest.fixture
def challenge_data() -> Path:
    """The folder holding the organisers' files, as the README's test command names it."""
    folder = os.environ.get(CHALLENGE_DATA_ENV)
    if not folder:
        pytest.skip(f"{CHALLENGE_DATA_ENV} is not set (the README's test command sets it)")
    path = Path(folder)
    assert (path / "eval_prompts_sharegpt.json").is_file(), f"{CHALLENGE_DATA_ENV}={folder}: no organisers' files there"
    return path
