"""Shared fixtures. Keep this small: helpers live next to what they help (e.g. tests/stacks)."""

from __future__ import annotations

import pytest

from engine.profiles import BenchProfile
from tests.stacks import stub_profile as _stub_profile


@pytest.fixture
def stub_profile(tmp_path) -> BenchProfile:
    """A tiny benchmark profile over throw-away data sets, sized for the stub stack."""
    return _stub_profile(tmp_path)
