"""Drawing: plotly figures of a ``StudyData``. No reading, no computing beyond layout.

The Pareto chart puts PPL on x and TPS on y: the gate is then a vertical line with the
infeasible side (PPL above the gate) shaded, and the front a staircase rising to the right.
Colours are mid-tones chosen to read on both ``plotly_white`` and ``plotly_dark``.
"""

from __future__ import annotations

import html
import textwrap
from typing import Literal

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.data import StudyData, TrialRow
from engine.config import KNOBS

__all__ = ["THEMES", "history_figure", "hover_text", "knob_figure", "pareto_figure"]

Theme = Literal["light", "dark"]
THEMES: dict[str, str] = {"light": "plotly_white", "dark": "plotly_dark"}

TPS_TITLE = "Throughput, TPS (tokens/s, higher is better)"
PPL_TITLE = "Perplexity, PPL (unitless, lower is better)"

_BLUE, _GREY, _ORANGE, _GREEN, _RED, _PURPLE, _GOLD = (
    "#3b82f6",
    "#9ca3af",
    "#f97316",
    "#22c55e",
    "#ef4444",
    "#a855f7",
    "#eab308",
)
_TEAL = "#14b8a6"
_SHADE = "rgba(239, 68, 68, 0.13)"
_FAILED_SHOWN = 9  # failed trials listed beside the chart; the rest are counted


def knob_label(knob: str) -> str:
    """``centroid_top_k (CENTROID_TOP_K)``: the knob and where the manifest sets it."""
    spec = KNOBS.get(knob)
    return f"{knob} ({spec.targets[0].describe()})" if spec else knob


def hover_text(t: TrialRow) -> str:
    lines = [f"<b>trial {t.number}</b>{' (baseline)' if t.is_baseline else ''}"]
    lines += [f"{k} = {v}" for k, v in t.knobs.items()]
    cv = t.metric("tps_cv")
    m = t.record.measurement if t.record else None
    partial = (
        ""
        if m is None or not t.stopped
        else (f" ({'partial' if t.pruned else 'probe'}: {m.prompts_timed} of {m.num_prompts} prompts)")
    )
    lines.append(
        f"TPS = {_num(t.tps, '.2f')} tokens/s"
        + (f" (CV {cv:.1%})" if cv is not None else "")
        + partial
        + (f" (trial {t.record.source}'s)" if t.record is not None and t.reused else "")
    )
    lines.append(f"PPL = {_num(t.ppl, '.4f')}")
    lines.append(f"acceptance = {_num(t.metric('acceptance_rate'), '.1%')}")
    lines.append(f"identity diffs = {'n/a' if t.identity_diff_prompts is None else t.identity_diff_prompts} prompt(s)")
    if t.reused:  # its figures are an earlier trial's
        lines.append(_clip(f"not booted: {t.fail_reason or ''}", 90))
    elif t.pruned:
        lines.append("<b>PRUNED</b>: " + _clip(t.fail_reason or "", 90))
    elif t.stopped:
        lines.append("stopped at the gate: infeasible")
    else:
        lines.append("front" if t.on_front else ("feasible" if t.feasible else "infeasible (over the gate)"))
    if t.tie is not None:
        lines.append(f"tie group {t.tie}: the noise cannot tell it from the others of the group")
    if t.claim is not None:
        c = t.claim
        lines.append(
            f"<b>claim {c.claim:.2f}</b> over {c.boots} boots, P(VERIFIED) {c.odds_text()}; a private re-run "
            f"reads {c.rerun_text()} (90%)"
        )
    if t.verdict is not None:
        gap = "" if t.verdict.tps_gap_pct is None else f", TPS gap {t.verdict.tps_gap_pct:+.1f}%"
        lines.append(f"<b>{t.verdict.verdict}</b>{gap}")
        if t.verdict.reasons:
            lines.append(_clip(t.verdict.reason, 90))
    return "<br>".join(lines)


def pareto_figure(data: StudyData, *, theme: Theme = "light") -> go.Figure:
    """TPS against PPL: every trial by what it is, the front, the verdicts and the claims, the gate shaded."""
    fig = go.Figure()
    # every measured and every pruned trial has its PPL: the filter only tells the type checker so
    ppls = [t.ppl for t in [*data.measured, *data.pruned] if t.ppl is not None]
    x_range = _ppl_range(ppls + ([data.gate] if data.gate is not None else []))
    _gate(fig, data, x_range)
    _trials(fig, data)
    _verdicts(fig, data)
    _claims(fig, data)
    _layout(fig, data, theme=theme, x_range=x_range)
    return fig


def _gate(fig: go.Figure, data: StudyData, x_range: list[float]) -> None:
    if data.gate is not None:
        fig.add_vrect(x0=data.gate, x1=x_range[1], fillcolor=_SHADE, line_width=0, layer="below")
        fig.add_vline(
            x=data.gate,
            line={"color": _RED, "dash": "dash", "width": 2},
            annotation_text=f"gate: PPL {data.gate:.4f}",
            annotation_position="top left",
        )


def _trials(fig: go.Figure, data: StudyData) -> None:
    """Every trial by what it is: feasible or not, stopped early, not booted, the baseline, the front."""
    measured = data.measured
    rest = [t for t in measured if not t.on_front and not t.stopped]
    _points(fig, [t for t in rest if t.feasible is not False], name="feasible", color=_BLUE, size=9, spread=True)
    _points(fig, [t for t in rest if t.feasible is False], name="over the gate", color=_GREY, size=9, spread=True)
    # Multi-fidelity's early stops, drawn apart: their TPS covers only the first prompts.
    _points(
        fig,
        data.gate_stopped,
        name="stopped at the gate (TPS probe)",
        color=_GREY,
        size=10,
        symbol="triangle-up-open",
        width=2,
    )
    _points(fig, data.pruned, name="pruned (partial TPS)", color=_BLUE, size=10, symbol="x-thin-open", width=2)
    # Closed without a boot: drawn at the figures they were told, which are an earlier trial's.
    _points(
        fig,
        data.reused,
        name="not booted: copy / PPL memo (an earlier trial's figures)",
        color=_GREY,
        size=7,
        symbol="circle-open-dot",
        width=1.5,
    )
    base = data.baseline
    if base is not None:  # under the front's markers: a baseline on the front shows as both
        _points(fig, [base], name="baseline", color=_GOLD, size=18, symbol="star", line_color="#111827")
    front = data.front
    if front:
        fig.add_trace(
            go.Scatter(
                x=[t.ppl for t in front],
                y=[t.tps for t in front],
                mode="lines+markers",
                line={"shape": "hv", "color": _ORANGE, "width": 2.5},
                marker={"size": 11, "color": _ORANGE},
                name=f"front ({len(front)})",
                text=[hover_text(t) for t in front],
                hovertemplate="%{text}<extra></extra>",
                error_y=_spread_bars(front),
            )
        )


def _verdicts(fig: go.Figure, data: StudyData) -> None:
    """The trials whose greedy output differs, and every verification's verdict."""
    measured = data.measured
    _points(
        fig,
        [t for t in measured if t.identity_diff_prompts],
        name="greedy output differs",
        color=_PURPLE,
        size=17,
        symbol="diamond-open",
        width=2.5,
    )
    verdicts = {
        name: [t for t in measured if t.verdict is not None and t.verdict.verdict == name]
        for name in ("VERIFIED", "INVALID", "UNDECIDED")
    }
    _points(fig, verdicts["VERIFIED"], name="VERIFIED", color=_GREEN, size=22, symbol="circle-open", width=3)
    _points(fig, verdicts["INVALID"], name="INVALID", color=_RED, size=20, symbol="x-thin-open", width=3)
    _points(fig, verdicts["UNDECIDED"], name="UNDECIDED", color=_GOLD, size=20, symbol="square-open", width=3)


def _layout(fig: go.Figure, data: StudyData, *, theme: Theme, x_range: list[float]) -> None:
    fig.update_layout(
        template=THEMES[theme],
        title={"text": _pareto_title(data), "x": 0.01},
        xaxis={"title": {"text": PPL_TITLE}, "range": x_range},
        yaxis={"title": {"text": TPS_TITLE}},
        legend={"orientation": "h", "y": -0.14, "x": 0},
        margin={"r": 330, "t": 80, "b": 120},
        hoverlabel={"align": "left"},
    )
    fig.add_annotation(
        text=_failed_text(data),
        xref="paper",
        yref="paper",
        x=1.02,
        y=1.0,
        xanchor="left",
        yanchor="top",
        align="left",
        showarrow=False,
        font={"size": 11},
    )


def _claims(fig: go.Figure, data: StudyData) -> None:
    """Promoted candidates at their claim, with the 90% interval of one private re-run as error bars."""
    promoted = data.promoted
    if not promoted:
        return
    recommended = data.claims.recommended if data.claims else None
    claims = [t.claim for t in promoted if t.claim is not None]  # all of them: promoted means claimed
    # a claim whose noise is not measured has no interval: a bar of 0 would read as certainty, so it has none
    bars = [c.rerun_low is not None for c in claims]
    fig.add_trace(
        go.Scatter(
            x=[t.ppl for t in promoted],
            y=[c.claim for c in claims],
            mode="markers",
            name=f"claim over {claims[0].boots} boots, private re-run 90% ({len(promoted)})",
            marker={
                "size": [18 if c is recommended else 12 for c in claims],
                "color": _TEAL,
                "symbol": "diamond",
                "line": {"width": 1.5, "color": "#111827"},
            },
            error_y={
                "type": "data",
                "symmetric": False,
                "thickness": 2,
                "width": 8,
                "color": _TEAL,
                "array": [c.rerun_high - c.claim if bar and c.rerun_high else None for c, bar in zip(claims, bars)],
                "arrayminus": [c.claim - c.rerun_low if bar and c.rerun_low else None for c, bar in zip(claims, bars)],
            },
            text=[hover_text(t) for t in promoted],
            hovertemplate="%{text}<extra></extra>",
        )
    )


def knob_figure(data: StudyData, knob: str, *, theme: Theme = "light") -> go.Figure:
    """TPS, acceptance rate and PPL against one knob's values (measured trials)."""
    measured = sorted((t for t in data.measured if knob in t.knobs), key=lambda t: t.knobs[knob])
    rows = [("tps", "TPS (tokens/s)"), ("ppl", "PPL")]
    if any(t.metric("acceptance_rate") is not None for t in measured):
        rows.insert(1, ("acceptance_rate", "acceptance rate"))
    fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    for i, (attr, title) in enumerate(rows, start=1):
        fig.add_trace(
            go.Scatter(
                x=[t.knobs[knob] for t in measured],
                y=[t.metric(attr) for t in measured],
                mode="markers",
                name=title,
                showlegend=False,
                marker={
                    "size": 10,
                    "color": [_marker_color(t) for t in measured],
                    "symbol": ["star" if t.is_baseline else "circle" for t in measured],
                },
                text=[hover_text(t) for t in measured],
                hovertemplate="%{text}<extra></extra>",
            ),
            row=i,
            col=1,
        )
        fig.update_yaxes(title_text=title, row=i, col=1)
        if attr == "acceptance_rate":
            fig.update_yaxes(tickformat=".0%", row=i, col=1)
        if attr == "ppl" and data.gate is not None:
            fig.add_hline(
                y=data.gate, line={"color": _RED, "dash": "dash"}, row=i, col=1, annotation_text=f"gate {data.gate:.4f}"
            )
    fig.update_xaxes(title_text=knob_label(knob), row=len(rows), col=1)
    fig.update_layout(
        template=THEMES[theme],
        height=260 * len(rows) + 120,
        title={"text": f"{data.study_name}: metrics against {knob_label(knob)} (star = baseline, orange = front)"},
    )
    return fig


def history_figure(data: StudyData, *, theme: Theme = "light") -> go.Figure:
    """TPS and PPL by trial number, with the best feasible TPS so far."""
    measured = data.measured
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    hover = [hover_text(t) for t in measured]
    numbers = [t.number for t in measured]
    fig.add_trace(
        go.Scatter(
            x=numbers,
            y=[t.tps for t in measured],
            mode="markers",
            name="TPS",
            marker={"size": 9, "color": [_marker_color(t) for t in measured]},
            text=hover,
            hovertemplate="%{text}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    best, best_x, best_y = None, [], []
    for t in measured:
        if t.feasible is not False:
            assert t.tps is not None  # a measured trial has its TPS
            best = t.tps if best is None else max(best, t.tps)
        if best is not None:
            best_x.append(t.number)
            best_y.append(best)
    fig.add_trace(
        go.Scatter(
            x=best_x,
            y=best_y,
            mode="lines",
            line={"shape": "hv", "color": _ORANGE},
            name="best feasible TPS so far",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=numbers,
            y=[t.ppl for t in measured],
            mode="markers",
            name="PPL",
            marker={"size": 9, "color": [_marker_color(t) for t in measured]},
            text=hover,
            hovertemplate="%{text}<extra></extra>",
            showlegend=False,
        ),
        row=2,
        col=1,
    )
    if data.gate is not None:
        fig.add_hline(
            y=data.gate, line={"color": _RED, "dash": "dash"}, row=2, col=1, annotation_text=f"gate {data.gate:.4f}"
        )
    for t in data.failed:  # failures are events in the history, not zeros
        fig.add_vline(x=t.number, line={"color": _RED, "width": 1, "dash": "dot"})
    fig.update_yaxes(title_text="TPS (tokens/s)", row=1, col=1)
    fig.update_yaxes(title_text="PPL", row=2, col=1)
    fig.update_xaxes(title_text="trial number", row=2, col=1)
    fig.update_layout(
        template=THEMES[theme],
        height=700,
        title={"text": f"{data.study_name}: optimisation history (dotted red: failed trials)"},
    )
    return fig


def _points(
    fig: go.Figure,
    trials: list[TrialRow],
    *,
    name: str,
    color: str,
    size: int,
    symbol: str = "circle",
    width: float = 1,
    line_color: str | None = None,
    spread: bool = False,
) -> None:
    if not trials:
        return
    fig.add_trace(
        go.Scatter(
            x=[t.ppl for t in trials],
            y=[t.tps for t in trials],
            mode="markers",
            name=f"{name} ({len(trials)})",
            text=[hover_text(t) for t in trials],
            hovertemplate="%{text}<extra></extra>",
            error_y=_spread_bars(trials) if spread else None,
            marker={
                "size": size,
                "color": color,
                "symbol": symbol,
                "line": {"width": width, "color": line_color or color},
            },
        )
    )


def _spread_bars(trials: list[TrialRow]) -> dict | None:
    """TPS error bars of +- one standard deviation (TPS x CV) for trials whose profile repeated
    the timed run; None (no bars) when none did."""
    cvs = [t.metric("tps_cv") for t in trials]
    if all(cv is None for cv in cvs):
        return None
    return {
        "type": "data",
        "visible": True,
        "thickness": 1.2,
        "width": 4,
        "array": [0.0 if cv is None else t.tps * cv for t, cv in zip(trials, cvs)],
    }


def _marker_color(t: TrialRow) -> str:
    if t.on_front:
        return _ORANGE
    return _GREY if t.feasible is False else _BLUE


def _pareto_title(data: StudyData) -> str:
    gate = "no gate yet" if data.gate is None else f"gate PPL ≤ {data.gate:.4f}"
    stopped = f" ({len(data.gate_stopped)} stopped at the gate)" if data.gate_stopped else ""
    pruned = f", {len(data.pruned)} pruned" if data.pruned else ""
    unbooted = f", {len(data.reused)} not booted" if data.reused else ""
    return (
        f"<b>{data.study_name}</b>: TPS vs PPL — {len(data.measured)} measured{stopped}{pruned}{unbooted}, "
        f"{len(data.failed)} failed, {len(data.front)} on the feasible front ({gate})"
    )


def _failed_text(data: StudyData) -> str:
    failed = data.failed
    if not failed:
        return "<b>Failed trials</b><br>none"
    lines = [f"<b>Failed trials ({len(failed)})</b>"]
    for t in failed[:_FAILED_SHOWN]:
        knobs = ", ".join(f"{k}={t.knobs[k]}" for k in data.knob_names if k in t.knobs)
        kind = t.record.fail_kind if t.record else None  # lost / interrupted attempts are re-run by the driver
        lines.append(f"#{t.number} {_clip(knobs, 44)}" + (f" [{kind}]" if kind and kind != "engine" else ""))
        # two lines of reason at most; wrapping breaks at spaces, so no escape is split
        lines += [f"   {line}" for line in textwrap.wrap(_clip(t.fail_reason or "no reason recorded", 92), 48)]
    if len(failed) > _FAILED_SHOWN:
        lines.append(f"... and {len(failed) - _FAILED_SHOWN} more (see trials.csv)")
    return "<br>".join(lines)


def _ppl_range(values: list[float]) -> list[float]:
    if not values:
        return [0.0, 1.0]
    low, high = min(values), max(values)
    pad = max((high - low) * 0.08, abs(high) * 0.005, 1e-3)
    return [low - pad, high + pad]


def _clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters, escaped: plotly reads text as HTML."""
    text = " ".join(text.split())
    return html.escape(text if len(text) <= width else text[: width - 1] + "…")


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
