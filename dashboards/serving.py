"""Serving curves: p99 TTFT against output throughput, one line per configuration across its load levels.

``serving_figure(lines)`` draws a list of ``ServingLine`` (a label and its ``engine.measurement.LoadLevel`` levels): x
the output tok/s, y the p99 TTFT in ms (a log scale: a stack that serves one request at a time waits seconds at 16 in
flight where it answered in tens of milliseconds alone), one line per configuration through its concurrency levels in
order, each point labelled with its concurrency, as vLLM's and AIPerf's concurrency sweeps are drawn. A level on
long-context prompts (its ``prompts`` is ``"long"``) is no step of the concurrency sweep: it is its own
marker, in its line's colour, not joined to the line.

``python -m dashboards.serving PATH`` draws a ``transfer.json`` (written by ``python -m sweep.transfer``, which runs
this command as a user would, so that the sweep imports nothing above it): ``transfer.html`` (self-contained: plotly.js
inlined, opens with no network) and ``transfer.png`` (the system Chromium, ``dashboards.images``) beside it, or in
``--out``.

Exit codes: 0 written; 1 Chromium failed to render (the HTML is written); 2 bad input (a file that does not load
or holds no measured level, no Chromium). One line on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import html
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go

from cli import command
from dashboards.figures import THEMES, Theme
from dashboards.images import write_images
from engine.files import load_json
from engine.measurement import LoadLevel
from errors import DataError

__all__ = ["ServingLine", "main", "serving_figure", "write_chart", "write_serving"]

X_TITLE = "Output throughput (tokens/s, higher is better)"
Y_TITLE = "p99 time to first token (ms, log scale, lower is better)"
# Mid-tones that read on both plotly_white and plotly_dark (the Pareto chart's), one a configuration
_COLOURS = ("#3b82f6", "#f97316", "#22c55e", "#a855f7", "#ef4444", "#14b8a6", "#eab308", "#9ca3af")


@dataclass(frozen=True, kw_only=True)
class ServingLine:
    """One configuration through its load levels, in the order they ran."""

    label: str
    levels: Sequence[LoadLevel]


@dataclass(frozen=True)
class _Step:
    """One measured level of one configuration, as drawn."""

    tps: float
    ttft_p99_ms: float
    concurrency: int
    long: bool


def _steps(levels: Sequence[LoadLevel]) -> list[_Step]:
    return [
        _Step(tps=lv.output_tps, ttft_p99_ms=lv.ttft_ms.p99, concurrency=lv.concurrency, long=lv.prompts == "long")
        for lv in levels
    ]


def _hover(label: str, step: _Step) -> str:
    kind = "long-context prompts, " if step.long else ""
    return (
        f"<b>{html.escape(label)}</b><br>{kind}concurrency {step.concurrency}<br>"
        f"{step.tps:.2f} output tok/s<br>p99 TTFT {step.ttft_p99_ms:.1f} ms"
    )


def _line(fig: go.Figure, label: str, steps: list[_Step], colour: str) -> None:
    """The concurrency sweep of one configuration as one line, its long-context level as a marker of its own."""
    sweep = [s for s in steps if not s.long]
    if sweep:
        fig.add_trace(
            go.Scatter(
                x=[s.tps for s in sweep],
                y=[s.ttft_p99_ms for s in sweep],
                mode="lines+markers+text",
                line={"color": colour, "width": 2.5},
                marker={"size": 10, "color": colour},
                text=[f"c={s.concurrency}" for s in sweep],
                textposition="top center",
                name=label,
                legendgroup=label,
                hovertext=[_hover(label, s) for s in sweep],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    long = [s for s in steps if s.long]
    if long:
        fig.add_trace(
            go.Scatter(
                x=[s.tps for s in long],
                y=[s.ttft_p99_ms for s in long],
                mode="markers+text",
                marker={"size": 13, "color": colour, "symbol": "diamond-open", "line": {"width": 2.5}},
                text=[f"long, c={s.concurrency}" for s in long],
                textposition="bottom center",
                name=f"{label}: long-context prompts",
                legendgroup=label,
                hovertext=[_hover(label, s) for s in long],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )


def serving_figure(
    lines: Sequence[ServingLine], *, title: str = "Latency against throughput under load", theme: Theme = "light"
) -> go.Figure:
    """p99 TTFT against output tok/s, one line a configuration (see the module's docstring); a line without levels
    is left out."""
    fig = go.Figure()
    for i, line in enumerate(lines):
        if line.levels:
            _line(fig, line.label, _steps(line.levels), _COLOURS[i % len(_COLOURS)])
    fig.update_layout(
        template=THEMES[theme],
        title={"text": title, "x": 0.01},
        xaxis={"title": {"text": X_TITLE}, "rangemode": "tozero"},
        yaxis={"title": {"text": Y_TITLE}, "type": "log"},
        legend={"orientation": "h", "y": -0.16, "x": 0},
        margin={"t": 90, "b": 130},
        hoverlabel={"align": "left"},
    )
    return fig


def _read(path: Path) -> tuple[str, list[ServingLine]]:
    """The chart's title and lines from a ``transfer.json``; raises DataError for one with nothing measured or a
    level that is not one (named)."""
    data = load_json(path, DataError, what="serving figures")
    points = data.get("points") if isinstance(data, dict) else None
    if not isinstance(points, list):
        raise DataError(f"{path}: no 'points' list (written by python -m sweep.transfer)")
    lines = []
    for p in points:
        if isinstance(p, dict) and p.get("levels"):
            label = str(p.get("label", ""))
            try:
                levels = [LoadLevel.from_dict(level) for level in p["levels"]]
            except DataError as exc:
                raise DataError(f"{path}: {label!r}: {exc}") from None
            lines.append(ServingLine(label=label, levels=levels))
    if not lines:
        raise DataError(f"{path}: no configuration has a measured level to draw")
    title = str(data.get("title") or f"{path.stem}: p99 TTFT against output throughput under load")
    return title, lines


def write_chart(fig: go.Figure, folder: Path, stem: str) -> list[Path]:
    """``<stem>.html`` (self-contained) and ``<stem>.png`` of ``fig`` in ``folder``; the HTML first, so that a
    browser that fails to render leaves it written. Returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / f"{stem}.html"
    page.write_text(fig.to_html(full_html=True, include_plotlyjs=True, config={"displaylogo": False}), encoding="utf-8")
    return [page, *write_images(fig, [folder / f"{stem}.png"])]


def write_serving(source: Path, out_dir: Path | None = None, *, theme: Theme = "light") -> list[Path]:
    """The chart of ``source`` (a ``transfer.json``) beside it or in ``out_dir`` (``write_chart``)."""
    title, lines = _read(source)
    fig = serving_figure(lines, title=title, theme=theme)
    return write_chart(fig, out_dir if out_dir is not None else source.parent, source.stem)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dashboards.serving", description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a transfer.json written by python -m sweep.transfer")
    parser.add_argument("--out", type=Path, help="output folder (default: the file's own)")
    parser.add_argument("--theme", choices=sorted(THEMES), default="light")
    return parser.parse_args(argv)


@command(_parse)
def main(ns: argparse.Namespace) -> int:
    for path in write_serving(ns.source, ns.out, theme=ns.theme):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
