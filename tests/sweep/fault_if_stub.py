"""Test kit: the stub stack with a fault switched on only for one env value.

``STUB_FAULT_IF="CENTROID_TOP_K=16:wrong_tokens"`` runs the stub with ``STUB_FAULT=wrong_tokens``
when ``CENTROID_TOP_K`` is 16 and without it otherwise: a lossless knob value whose greedy
output differs from the baseline's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

STUB = Path(__file__).resolve().parent.parent / "stacks" / "stub_server.py"

if __name__ == "__main__":
    env = dict(os.environ)
    condition, _, fault = env.get("STUB_FAULT_IF", "").partition(":")
    key, _, value = condition.partition("=")
    if key and env.get(key) == value:
        env["STUB_FAULT"] = ",".join(filter(None, [env.get("STUB_FAULT", ""), fault]))
    os.execve(sys.executable, [sys.executable, str(STUB)], env)
