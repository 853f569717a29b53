"""Keep secrets out of everything the project stores or prints.

A manifest's env may carry tokens (``HF_TOKEN``, ``WANDB_API_KEY``); the engine needs them, but
a stored trial record, a dry run or a log line must not repeat them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["REDACTED", "SECRET_MARKERS", "is_secret_key", "redact_env", "scrub_text"]

REDACTED = "***"
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
# Serving knobs count tokens (vLLM's MAX_NUM_BATCHED_TOKENS): that plural is a size, not a
# credential, and a stored trial needs its value to be reproducible.
_COUNT_WORDS = {"TOKENS"}


def is_secret_key(key: str) -> bool:
    words = [w for w in re.split(r"[^A-Z0-9]+", key.upper()) if w and w not in _COUNT_WORDS]
    return any(marker in word for word in words for marker in SECRET_MARKERS)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` whose secret-looking values are replaced by ``***``."""
    return {key: REDACTED if is_secret_key(key) else value for key, value in env.items()}


def scrub_text(text: str, env: Mapping[str, str]) -> str:
    """``text`` (a stack's log tail) with the values of ``env``'s secret-looking keys replaced by
    ``***``: the record keeps what a stack printed, not a token it echoed."""
    for key, value in env.items():
        if is_secret_key(key) and len(value) >= 4:  # shorter values would blank out ordinary text
            text = text.replace(value, REDACTED)
    return text
