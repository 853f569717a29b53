"""``--dry-run``: the trials a fresh run of the study would start, as argv and env; nothing boots.

The plan comes from the study's own sampler over an in-memory study (the database is not
touched), so it shows the real first draws: the baseline, then what the sampler proposes
before any result is known.
"""

from __future__ import annotations

import shlex

import optuna
from rich.console import Console

from engine.launch import build_launch
from engine.secrets import redact_env
from sweep.sampling import make_sampler, sampler_exhausted, suggest_knobs
from sweep.spec import StudySpec

__all__ = ["MAX_SHOWN", "plan_trials", "print_dry_run"]

# The first draws are what a dry run is for; planning a budget of millions (or a huge grid) one
# ask at a time would never end.
MAX_SHOWN = 20


def plan_trials(spec: StudySpec) -> list[tuple[dict[str, int], bool]]:
    """(knobs, is_baseline) of the first trials of a fresh study, up to its budget or MAX_SHOWN."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = make_sampler(spec)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    study.enqueue_trial(
        {k: v for k, v in spec.baseline().items() if k in spec.space}, user_attrs={"is_baseline": True}
    )
    plan = []
    for _ in range(min(spec.n_trials, MAX_SHOWN)):
        if plan and sampler_exhausted(sampler, study):
            break
        trial = study.ask()
        baseline = bool(trial.user_attrs.get("is_baseline"))
        plan.append((suggest_knobs(trial, spec, baseline=baseline), baseline))
    return plan


def print_dry_run(spec: StudySpec, *, out: Console) -> None:
    out.print(
        f"dry run of study {spec.name} ({spec.source}): manifest {spec.manifest.label}, "
        f"profile {spec.profile.name}, sampler {spec.sampler}, budget {spec.n_trials}; nothing is booted",
        markup=False,
    )
    plan = plan_trials(spec)
    for number, (knobs, baseline) in enumerate(plan):
        launch = build_launch(spec.manifest, knobs)
        label = " (baseline)" if baseline else ""
        shown = spec.effective(knobs)
        lines = [
            f"\ntrial {number}{label}: " + " ".join(f"{k}={v}" for k, v in shown.items()),
            f"  argv: {shlex.join(launch.argv)}",
            f"  cwd:  {launch.cwd}",
            *(f"  env:  {key}={value}" for key, value in redact_env(launch.env).items()),
        ]
        for line in lines:  # values are printed as they are: no rich markup in them
            out.print(line, markup=False, soft_wrap=True)
    if len(plan) == MAX_SHOWN < spec.n_trials:
        out.print(f"\n... and up to {spec.n_trials - MAX_SHOWN} more trial(s), drawn as results come in", markup=False)
