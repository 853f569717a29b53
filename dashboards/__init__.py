"""Pareto charts (plotly: HTML, PNG, SVG), the trials table, optuna-dashboard with the chart attached.

Entry points: ``python -m dashboards.export --study NAME`` (``export_study``) and
``python -m dashboards.serve``; those two modules are not re-exported here, since a package that
imports its own ``-m`` modules makes ``runpy`` warn.
"""

from dashboards.attach import attach_all, attach_to_study
from dashboards.data import StudyData, TrialRow, load_study_data, study_data
from dashboards.figures import history_figure, knob_figure, pareto_figure
from dashboards.table import trials_frame

__all__ = [
    "StudyData",
    "TrialRow",
    "attach_all",
    "attach_to_study",
    "history_figure",
    "knob_figure",
    "load_study_data",
    "pareto_figure",
    "study_data",
    "trials_frame",
]
