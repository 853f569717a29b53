"""Which knob moved TPS and which moved PPL: Optuna's own analyses of the study's measured trials.

``knob_importances`` is fANOVA (Optuna's default evaluator, seeded) for each objective; the slice
plots (``optuna.visualization.plot_slice``) show each knob's values against it. Both need at least
two measured trials over knobs that vary; with fewer there is nothing to say, and nothing is drawn.
"""

from __future__ import annotations

from collections.abc import Callable

import optuna
import plotly.graph_objects as go
from optuna.importance import FanovaImportanceEvaluator, get_param_importances
from optuna.trial import TrialState

__all__ = ["OBJECTIVES", "importance_figure", "knob_importances", "slice_figures"]

OBJECTIVES = {"TPS": 0, "PPL": 1}  # the study's values, in order


def _objective(index: int) -> Callable[[optuna.trial.FrozenTrial], float]:
    """The target that reads a trial's ``index``-th value (``OBJECTIVES``)."""
    return lambda t: t.values[index]


def _measured(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def knob_importances(study: optuna.Study) -> dict[str, dict[str, float]]:
    """``{"TPS": {knob: share}, "PPL": {...}}``; empty when the trials cannot tell."""
    trials = _measured(study)
    varying = {k for t in trials for k in t.params if len({repr(u.params.get(k)) for u in trials}) > 1}
    if len(trials) < 2 or not varying:
        return {}
    out = {}
    for name, index in OBJECTIVES.items():
        if len({t.values[index] for t in trials}) == 1:  # e.g. PPL under lossless knobs: no knob moved it
            out[name] = {knob: 0.0 for knob in sorted(varying)}
            continue
        importances = get_param_importances(
            study,
            evaluator=FanovaImportanceEvaluator(seed=0),
            params=sorted(varying),
            target=_objective(index),
        )
        out[name] = dict(importances)
    return out


def importance_figure(importances: dict[str, dict[str, float]], *, title: str, template: str) -> go.Figure:
    fig = go.Figure()
    for name, shares in importances.items():
        knobs = sorted(shares)
        fig.add_trace(go.Bar(x=knobs, y=[shares[k] for k in knobs], name=f"{name} (fANOVA)"))
    fig.update_layout(
        template=template,
        barmode="group",
        title={"text": title},
        yaxis={"title": {"text": "share of the objective's variance"}, "tickformat": ".0%"},
    )
    return fig


def slice_figures(study: optuna.Study, *, template: str) -> list[go.Figure]:
    """One slice plot per objective: every knob's values against it."""
    if len(_measured(study)) < 2:
        return []
    figures = []
    for name, index in OBJECTIVES.items():
        fig = optuna.visualization.plot_slice(study, target=_objective(index), target_name=name)
        fig.update_layout(template=template, title={"text": f"{study.study_name}: {name} against each knob (slice)"})
        figures.append(fig)
    return figures
