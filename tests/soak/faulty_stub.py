"""The soak's stack: the stub server with the fault the plan gives this trial.

Started by the soak's manifest with ``SOAK_PLAN`` (the plan file of ``tests.soak.faults``) and
``SOAK_WORKDIR={workdir}`` (the trial's folder, ``.../trial-0007``: the trial number). It logs
its pid, process group and fault, then becomes the stub (exec: same pid, same group).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.soak.faults import fault_for  # noqa: E402 - needs the repo on the path first

STUB = REPO / "tests" / "stacks" / "stub_server.py"

if __name__ == "__main__":
    env = dict(os.environ)
    number = int(Path(env["SOAK_WORKDIR"]).name.removeprefix("trial-"))
    fault = fault_for(json.loads(Path(env["SOAK_PLAN"]).read_text()), number)
    env["STUB_FAULT"] = fault.stub_fault
    if fault.name == "ignore_term":
        env["STUB_CHILD"] = "1"  # a child ignoring TERM too: the stop must take the whole group
    print(
        f"soak: trial {number} pid {os.getpid()} pgid {os.getpgid(0)} fault {fault.name}", file=sys.stderr, flush=True
    )
    os.execve(sys.executable, [sys.executable, str(STUB)], env)
