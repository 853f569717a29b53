"""The sample-efficiency chart: hypervolume share against trials, one line per sampler.

``curve_data`` computes what is drawn (median and quartiles over seeds per trial count) and is
tested; ``curve_figure`` only draws it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import plotly.graph_objects as go

__all__ = ["Curve", "curve_data", "curve_figure"]

# NSGA-II samples its first generation at random, so its line can hide under random's: dashed.
_DASHES = {"nsga2": "dash"}
_COLOURS = {"tpe": "#3b82f6", "nsga2": "#a855f7", "gp": "#22c55e", "random": "#9ca3af", "grid": "#f97316"}


@dataclass(frozen=True, kw_only=True)
class Curve:
    sampler: str
    trials: list[int]  # 1, 2, ...
    median: list[float]
    q1: list[float]
    q3: list[float]


def curve_data(runs: dict[str, list[list[float]]]) -> list[Curve]:
    """Per sampler, per-seed curves -> median and quartiles per trial count.

    A run that ended before the others (a grid that ran out of points) keeps its last value.
    """
    curves = []
    for sampler, per_seed in runs.items():
        length = max(len(c) for c in per_seed)
        columns = [[c[min(i, len(c) - 1)] for c in per_seed] for i in range(length)]
        quartiles = [
            statistics.quantiles(col, n=4, method="inclusive") if len(col) > 1 else [col[0]] * 3 for col in columns
        ]
        curves.append(
            Curve(
                sampler=sampler,
                trials=list(range(1, length + 1)),
                median=[q[1] for q in quartiles],
                q1=[q[0] for q in quartiles],
                q3=[q[2] for q in quartiles],
            )
        )
    return curves


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"


def curve_figure(curves: list[Curve], *, title: str) -> go.Figure:
    fig = go.Figure()
    for c in curves:
        colour = _COLOURS.get(c.sampler, "#111111")
        fig.add_trace(
            go.Scatter(
                x=c.trials + c.trials[::-1],
                y=c.q3 + c.q1[::-1],
                fill="toself",
                fillcolor=_rgba(colour, 0.12),
                line={"width": 0},
                hoverinfo="skip",
                showlegend=False,
                legendgroup=c.sampler,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=c.trials,
                y=c.median,
                mode="lines",
                name=c.sampler,
                legendgroup=c.sampler,
                line={"color": colour, "width": 2.5, "dash": _DASHES.get(c.sampler, "solid")},
            )
        )
    fig.update_layout(
        title=title,
        template="plotly_white",
        xaxis_title="trials (the baseline is trial 1)",
        yaxis_title="hypervolume of the feasible front / the whole grid's (median, quartiles shaded)",
        yaxis_range=[0, 1.02],
        legend_title="sampler",
    )
    return fig
