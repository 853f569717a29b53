"""``--dry-run``: the trials a fresh run of the study would start, as argv and env; nothing boots.

The plan comes from the ask/tell core over an in-memory study (the database is not touched),
so it shows the real first draws: the baseline, then what the sampler proposes before any
result is known.
"""

from __future__ import annotations

import shlex

import optuna
from rich.console import Console

from engine.launch import build_launch
from engine.secrets import redact_argv, redact_env
from sweep.search._core import MemoryRecords, PlannedTrial, StudyCore
from sweep.search._spec import StudySpec

__all__ = ["MAX_SHOWN", "plan_trials", "print_dry_run"]

# The first draws are what a dry run is for; planning a budget of millions (or a huge grid) one
# ask at a time would never end.
MAX_SHOWN = 20


def plan_trials(spec: StudySpec) -> list[PlannedTrial]:
    """The first trials of a fresh study, up to its budget or MAX_SHOWN."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    core = StudyCore(spec, MemoryRecords())
    core.ensure_baseline()
    plan: list[PlannedTrial] = []
    while len(plan) < MAX_SHOWN and core.has_next(in_flight=len(plan)):
        plan.append(core.ask())
    return plan


def print_dry_run(spec: StudySpec, *, out: Console) -> None:
    out.print(
        f"dry run of study {spec.name} ({spec.source}): manifest {spec.manifest.label}, "
        f"profile {spec.profile.name}, gate {spec.gate.describe()}, sampler {spec.sampler}, "
        f"budget {spec.n_trials}; nothing is booted",
        markup=False,
    )
    out.print(spec.fidelity.describe(), markup=False)
    plan = plan_trials(spec)
    for planned in plan:
        launch = build_launch(spec.manifest, planned.knobs)
        label = " (baseline)" if planned.is_baseline else ""
        lines = [
            f"\ntrial {planned.number}{label}: {planned.effective.text()}",
            f"  argv: {shlex.join(redact_argv(launch.argv))}",
            f"  cwd:  {launch.cwd}",
            *(f"  env:  {key}={value}" for key, value in redact_env(launch.env).items()),
        ]
        for line in lines:  # values are printed as they are: no rich markup in them
            out.print(line, markup=False, soft_wrap=True)
    if len(plan) == MAX_SHOWN < spec.n_trials:
        out.print(f"\n... and up to {spec.n_trials - MAX_SHOWN} more trial(s), drawn as results come in", markup=False)
