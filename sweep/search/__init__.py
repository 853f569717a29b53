"""The search: a study's trials proposed, booted and told, one boot of each configuration.

    _spec       studies/<name>.toml -> StudySpec (validated before anything boots)
    _sampling   the study's Optuna sampler and one trial's knob values
    _fidelity   multi-fidelity: what a trial may be stopped early for
    _core       the ask/tell core: open/resume, baseline, ask, close (store, re-queue, tell)
    _worker     the Ray actor running one trial at a time
    _cluster    the Ray session (joined, or a private local one)
    _driver     the core driven over Ray workers; _console: what it prints
    _dryrun     ``--dry-run``: what every trial would start
    _exports    the dashboards' command, run after a sweep

What the search finds is one boot per trial: the claims (``sweep.claims``) re-measure its best.
"""

from sweep.search._cluster import check_capacity, ray_session
from sweep.search._console import SweepConsole
from sweep.search._core import MemoryRecords, PlannedTrial, StudyCore
from sweep.search._driver import run_study
from sweep.search._dryrun import print_dry_run
from sweep.search._exports import export_results
from sweep.search._fidelity import FidelityPlan, FidelitySpec, front_rule_for, full_plan, stage_counts, stages_for
from sweep.search._spec import DEFAULT_SAMPLER, SAMPLERS, KnobSpace, StudySpec, load_study, study_path
from sweep.search._worker import TrialWorker, actor_options, collect

__all__ = [
    "DEFAULT_SAMPLER",
    "SAMPLERS",
    "FidelityPlan",
    "FidelitySpec",
    "KnobSpace",
    "MemoryRecords",
    "PlannedTrial",
    "StudyCore",
    "StudySpec",
    "SweepConsole",
    "TrialWorker",
    "actor_options",
    "check_capacity",
    "collect",
    "export_results",
    "front_rule_for",
    "full_plan",
    "load_study",
    "print_dry_run",
    "ray_session",
    "run_study",
    "stage_counts",
    "stages_for",
    "study_path",
]
