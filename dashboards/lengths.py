"""PPL against context length: one line per front point through its length buckets (``engine.measurement``).

A trial whose profile scored long texts (``length_refs``) stores its PPL in buckets of context length; the chart
draws each front point's buckets in order, x the context length where a bucket ends (tokens, log scale), y its
PPL, each marker labelled with the bucket's range and its tokens in the hover. A window that holds the gate's
short records can still lose the long context: its line rises, or flattens, where the others fall.
``dashboards.export`` writes it as ``lengths.html`` and ``lengths.png`` where a front point has buckets.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go

from dashboards.data import StudyData, TrialRow
from dashboards.figures import THEMES, Theme
from engine.measurement import LengthBucket

__all__ = ["lengths_figure"]

X_TITLE = "Context length: where each bucket ends (tokens, log scale)"
Y_TITLE = "PPL of the tokens with that much context (lower is better)"
# the serving chart's mid-tones, which read on both themes
_COLOURS = ("#3b82f6", "#f97316", "#22c55e", "#a855f7", "#ef4444", "#14b8a6", "#eab308", "#9ca3af")


def _hover(label: str, bucket: LengthBucket) -> str:
    return (
        f"<b>{html.escape(label)}</b><br>context {bucket.label} tokens<br>PPL {bucket.ppl:.4f} over "
        f"{bucket.tokens} tokens"
    )


def lengths_figure(
    data: StudyData, *, labels: Sequence[str], theme: Theme = "light", title: str | None = None
) -> go.Figure | None:
    """The chart of ``data``'s front points that have length buckets (``labels``: a line's name per front point,
    in ``data.front``'s order); None where none has any."""
    drawn = [(t, label) for t, label in zip(data.front, labels) if _buckets(t)]
    if not drawn:
        return None
    fig = go.Figure()
    for i, (t, label) in enumerate(drawn):
        buckets = _buckets(t)
        colour = _COLOURS[i % len(_COLOURS)]
        fig.add_trace(
            go.Scatter(
                x=[b.end for b in buckets],
                y=[b.ppl for b in buckets],
                mode="lines+markers",
                line={"color": colour, "width": 2.5},
                marker={"size": 9, "color": colour},
                name=label,
                hovertext=[_hover(label, b) for b in buckets],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    ends = sorted({b.end for t, _ in drawn for b in _buckets(t)})
    fig.update_layout(
        template=THEMES[theme],
        title={"text": title or f"{data.study_name}: PPL against context length, one line per front point", "x": 0.01},
        xaxis={"title": {"text": X_TITLE}, "type": "log", "tickvals": ends, "ticktext": [str(e) for e in ends]},
        yaxis={"title": {"text": Y_TITLE}},
        legend={"orientation": "h", "y": -0.18, "x": 0},
        margin={"t": 90, "b": 130},
        hoverlabel={"align": "left"},
    )
    return fig


def _buckets(t: TrialRow) -> list[LengthBucket]:
    return t.record.figures.ppl_lengths if t.record is not None and t.record.measurement is not None else []
