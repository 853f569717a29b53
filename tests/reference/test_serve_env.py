"""A bad environment makes the real server process exit at start with a one-line reason."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.config import REPO_ROOT


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"SPECULATIVE_CONFIG": '{"method": "draft", "num_speculative_tokens": '}, "SPECULATIVE_CONFIG"),
        ({"HF_OVERRIDES": '{"text_config": {"sliding_window": 0}}'}, "sliding_window"),
        ({"SLIDING_WINDOW": "0"}, "SLIDING_WINDOW"),
        ({"CENTROID_TOP_K": "many"}, "CENTROID_TOP_K"),
    ],
)
def test_bad_env_exits_at_start_with_one_line(env, says):
    result = subprocess.run(
        [sys.executable, "-m", "engine.reference.serve", "--port", "1"],
        env={**os.environ, **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("engine.reference.serve: ")
