"""The faults the soak injects, what a correct sweep makes of each, and the seeded plan.

A stack fault is chosen per trial *number*: the plan is a list, trial ``n`` runs with
``plan[n % len(plan)]``. The plan is a seeded shuffle of every stack fault, dealt again for
each further round of trial numbers, so any sweep of ``len(STACK_FAULTS)`` trials meets every
kind once. ``faulty_stub.py`` reads the plan file and starts the stub with that fault.

Cluster faults (a Ray worker node removed, the driver SIGKILLed and restarted) are not tied to
a trial: ``tests.soak.chaos`` fires them at seeded moments of the sweep, and the trials they
hit end ``lost`` (re-queued) rather than with their stack fault's outcome.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["FAULTS_BY_NAME", "STACK_FAULTS", "Fault", "fault_for", "plan", "write_plan"]


@dataclass(frozen=True)
class Fault:
    name: str
    stub_fault: str  # the stub's STUB_FAULT value; "" for a healthy stack
    expect: Literal["complete", "failed"]
    reason: str = ""  # regex a failed trial's reason must match
    log: str = ""  # regex the trial's engine log must match (what the harness did about it)

    def matches(self, *, status: str, reason: str | None, log: str) -> bool:
        if status != self.expect:
            return False
        if self.expect == "failed" and not re.search(self.reason, reason or ""):
            return False
        return not self.log or re.search(self.log, log) is not None


STACK_FAULTS: tuple[Fault, ...] = (
    Fault("healthy", "", "complete"),
    Fault("boot_exit", "boot_exit", "failed", r"exited with status 1 during boot"),
    Fault("never_ready", "never_ready", "failed", r"was not ready after .* its process group was stopped"),
    Fault("crash_mid", "crash_mid", "failed", r"TPS prompt .*\(the engine process had exited with status 1\)"),
    Fault("hang_after_ready", "hang_after_ready", "failed", r"warm-up request 1: POST .* timed out after"),
    # The trial completes, but only KILL stops the stack (and the child that ignores TERM too).
    Fault("ignore_term", "ignore_term", "complete", log=r"still running .* after TERM: KILL"),
    Fault("malformed_json", "malformed_json", "failed", r"answered malformed JSON"),
    Fault("http_500", "http_500", "failed", r"answered HTTP 500"),
    Fault("no_usage", "no_usage", "failed", r"no 'usage.completion_tokens' count"),
    Fault("no_metrics", "no_metrics", "complete"),
    Fault("wrong_tokens", "wrong_tokens", "complete"),
)
FAULTS_BY_NAME = {fault.name: fault for fault in STACK_FAULTS}


def plan(seed: int, rounds: int) -> list[str]:
    """Fault names for trial numbers ``0 .. rounds * len(STACK_FAULTS) - 1``."""
    rng = random.Random(seed)
    names: list[str] = []
    for _ in range(rounds):
        deck = [fault.name for fault in STACK_FAULTS]
        rng.shuffle(deck)
        names += deck
    return names


def write_plan(path: Path, names: list[str]) -> Path:
    path.write_text(json.dumps(names))
    return path


def fault_for(names: list[str], trial_number: int) -> Fault:
    return FAULTS_BY_NAME[names[trial_number % len(names)]]
