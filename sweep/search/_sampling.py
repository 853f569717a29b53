"""From a study's sampler name and space to Optuna: the sampler, and one trial's knob values.

The gate reaches every sampler the same way: the driver sets it on each trial with
``Trial.set_constraint`` (Optuna 5's constraint API, which TPE, NSGA-II and GP read), so no
sampler needs a ``constraints_func``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from engine.config import KnobValues, parse_knobs
from sweep.search._spec import KnobSpace, StudySpec
from sweep.store import trial_marks

__all__ = ["make_sampler", "sampler_exhausted", "suggest_knobs"]

# Random trials before TPE or GP model the results (Optuna's default is 10): studies here run
# 10-40 trials of minutes each, and with 5 multivariate TPE reached 99% of the best feasible TPS
# in 14 median trials (benchmarks/results/sample_efficiency.txt) where Optuna's 10 took 20.5
# (the same benchmark with the setting swapped).
_STARTUP_TRIALS = 5
# NSGA-II's generation: small enough that a 40-trial study evolves through several.
_NSGA2_POPULATION = 10


class _AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler for a study that resumes, in ask/tell.

    - A point is visited when a trial that holds its values has finished, whatever grid id it was
      given. Optuna's sampler tracks ids, which index a grid shuffled by the seed; a resumed study's
      sampler has a moved-on seed (``make_sampler``), so its ids name other points: it measured some
      twice and others never. The next trial takes the first point not yet visited nor running, and
      the grid is exhausted once every point is visited or running: a second worker never measures
      the point the first one is measuring.
    - The baseline (enqueued, the manifest as it is) visits no point, as in Optuna: a grid study is
      the baseline, then every point once.
    - The end of the grid does not call ``study.stop()``, which only works inside ``optimize`` (in
      ask/tell it raises from ``tell``): the driver asks ``is_exhausted`` before each new trial.
    """

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if "grid_id" in trial.system_attrs or "fixed_params" in trial.system_attrs:
            return  # enqueued (the baseline, a re-queued trial): its values are set
        unvisited = self._get_unvisited_grid_ids(study)
        grid_id = unvisited[0] if unvisited else int(self._rng.rng.choice(len(self._all_grids)))
        study._storage.set_trial_system_attr(trial._trial_id, "search_space", self._search_space)
        study._storage.set_trial_system_attr(trial._trial_id, "grid_id", grid_id)

    def _get_unvisited_grid_ids(self, study: optuna.Study) -> list[int]:
        index = {point: i for i, point in enumerate(self._all_grids)}
        finished, running = set(), set()
        for t in study._storage.get_all_trials(study._study_id, deepcopy=False):
            if trial_marks(t).is_baseline:
                continue
            i = index.get(tuple(t.params.get(name) for name in self._param_names))
            if i is None and t.state == TrialState.RUNNING:
                i = t.system_attrs.get("grid_id")  # asked by this sampler, its values not drawn yet
            if i is not None and t.state.is_finished():
                finished.add(i)
            elif i is not None and t.state == TrialState.RUNNING:
                running.add(i)
        return sorted(set(range(len(self._all_grids))) - finished - running)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        return None


def make_sampler(spec: StudySpec, *, resumed_trials: int = 0) -> optuna.samplers.BaseSampler:
    """The study's sampler. A resumed study's seed is moved on by the trials it already holds:
    the same seed again would replay the first run's random draws, i.e. measure them twice."""
    seed = None if spec.seed is None else spec.seed + resumed_trials
    if spec.sampler == "grid":
        grid = {knob: space.values() for knob, space in spec.space.items()}
        return _AskTellGridSampler(grid, seed=seed)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "nsga2":
        # Optuna's generation of 50 is random sampling for the whole of a 10-40 trial study.
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=_NSGA2_POPULATION)
    if spec.sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=_STARTUP_TRIALS)
    # Multivariate: the best point is a combination (a window inside the gate with the fastest
    # drafter settings), which independent per-knob TPE, Optuna's multi-objective default,
    # cannot model. Swapped in on the recorded joint grid: per-knob reached 99% of the best TPS
    # in 19.5 median trials with 10 start-up trials and 22.5 with 5 (random 34.5), multivariate
    # with 5 in 14.
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=_STARTUP_TRIALS)


def sampler_exhausted(sampler: optuna.samplers.BaseSampler, study: optuna.Study) -> bool:
    """Only a grid ends: when every point has been measured."""
    return isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(study)


def _suggest(trial: optuna.Trial, space: KnobSpace) -> Any:
    if space.choices is not None:
        return trial.suggest_categorical(space.knob, list(space.choices))
    return trial.suggest_int(space.knob, space.low, space.high, step=space.step)  # type: ignore[arg-type]


def suggest_knobs(trial: optuna.Trial, spec: StudySpec, *, baseline: bool) -> KnobValues:
    """The knob values a trial sets: none for the baseline (the manifest as it is), else the
    study's fixed values and the sampled ones. Optuna records the baseline's values too."""
    sampled = {knob: _suggest(trial, space) for knob, space in spec.space.items()}
    return parse_knobs(spec.manifest, {}) if baseline else spec.trial_knobs(sampled)
