"""``python -m dashboards.export --study NAME``: the study's charts and table as files.

Writes ``pareto.html`` (self-contained: plotly.js inlined, opens with no network; the Pareto
chart, one knob-versus-metric chart per swept knob, the optimisation history, the knobs'
importances for TPS and for PPL and Optuna's slice plots), ``pareto.png`` and ``pareto.svg``
(kaleido through the system Chromium), ``trials.csv``, ``importances.csv`` and ``best/`` (the
point to submit and its claim, or that there is none yet: ``dashboards.best``); for a study whose
trials ran a serving load, ``serving.html`` and ``serving.png`` (p99 TTFT against output tok/s, one
line per configuration through its load levels: ``dashboards.serving``) and ``serving.csv`` (every
level's figures; under a serving study's SLO its goodput, whether the SLO held, and whether the trial is on
the goodput-vs-PPL front under the gate and the SLO: ``sweep.judgement.serving_front``, the console's own);
for a study whose front points scored long texts, ``lengths.html`` and ``lengths.png`` (PPL against context
length, one line per front point: ``dashboards.lengths``) and ``lengths.csv`` (every measured trial's buckets),
by default into ``runs/exports/<study>/``. ``sweep.run`` runs this command when a sweep ends.

Exit codes: 0 written; 1 Chromium failed to render (the HTML and CSV are written); 2 bad input
(no such database or study, nothing completed, no Chromium). One line on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import html
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import plotly.graph_objects as go

from cli import command
from dashboards.best import write_best
from dashboards.data import StudyData, TrialRow, load_study_data, require_measured
from dashboards.figures import THEMES, Theme, history_figure, knob_figure, pareto_figure
from dashboards.images import write_images
from dashboards.importance import importance_figure, knob_importances, slice_figures
from dashboards.lengths import lengths_figure
from dashboards.serving import ServingLine, serving_figure, write_chart
from dashboards.table import trials_frame
from engine.measurement import LoadLevel
from sweep.judgement import Served, Slo, level_goodput, serving_front
from sweep.store import DEFAULT_STORAGE_URL, open_existing

__all__ = ["EXPORTS_DIR", "export_study", "main"]

EXPORTS_DIR = Path("runs/exports")


def export_study(
    study_name: str, storage_url: str = DEFAULT_STORAGE_URL, out_dir: Path | None = None, *, theme: Theme = "light"
) -> list[Path]:
    """Write the files; returns their paths. Raises ``ConfigError`` subclasses on bad input."""
    storage = open_existing(storage_url)
    try:
        data = require_measured(load_study_data(storage, study_name))
        study = optuna.load_study(study_name=study_name, storage=storage.optuna)
        importances = knob_importances(study)
        analyses = slice_figures(study, template=THEMES[theme])
    finally:
        storage.close()
    if importances:
        title = f"{study_name}: which knob moved TPS, which moved PPL (fANOVA over {len(data.measured)} trials)"
        analyses.insert(0, importance_figure(importances, title=title, template=THEMES[theme]))
    out = Path(out_dir) if out_dir is not None else EXPORTS_DIR / study_name
    out.mkdir(parents=True, exist_ok=True)
    html_path, csv_path, shares_path = out / "pareto.html", out / "trials.csv", out / "importances.csv"
    html_path.write_text(report_html(data, theme=theme, analyses=analyses), encoding="utf-8")
    trials_frame(data).to_csv(csv_path, index=False)
    rows = [
        "objective,knob,importance",
        *(f"{name},{knob},{share:.6f}" for name, shares in importances.items() for knob, share in shares.items()),
    ]
    shares_path.write_text("\n".join(rows) + "\n")
    best = write_best(data, out, storage=storage_url)
    serving = _serving_files(data, out, theme=theme)
    images = write_images(pareto_figure(data, theme=theme), [out / "pareto.png", out / "pareto.svg"])
    lengths = _length_files(
        data, out, theme=theme
    )  # after the Pareto chart's images: a browser that fails, fails there
    return [html_path, *images, csv_path, shares_path, *best, *serving, *lengths]


def _length_files(data: StudyData, out: Path, *, theme: Theme) -> list[Path]:
    """The PPL-by-context-length chart of the front points and the table of every measured trial's buckets, where
    any trial scored long texts (see the module's docstring)."""
    rows = [
        {
            "number": t.number,
            **{f"knob.{k}": v for k, v in t.knobs.items()},
            "bucket": b.label,
            "start": b.start,
            "end": b.end,
            "tokens": b.tokens,
            "ppl": b.ppl,
            "feasible": t.feasible,
            "on_front": t.on_front,
            "length_gate": t.record.length_gate,
        }
        for t in data.measured
        if t.record is not None and t.record.measurement is not None
        for b in t.record.measurement.ppl_lengths
    ]
    if not rows:
        return []
    table = out / "lengths.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    fig = lengths_figure(data, labels=[_label(t, data) for t in data.front], theme=theme)
    return [table, *(write_chart(fig, out, "lengths") if fig is not None else [])]


def _label(row: TrialRow, data: StudyData) -> str:
    knobs = " ".join(f"{k}={row.knobs[k]}" for k in data.knob_names if k in row.knobs)
    return f"trial {row.number}" + (f": {knobs}" if knobs else "")


def _serving_row(
    t: TrialRow, level: LoadLevel, slo: Slo | None, served: Served | None, front: set[int]
) -> dict[str, Any]:
    assert t.record is not None
    latencies = {"ttft": level.ttft_ms, "tpot": level.tpot_ms, "itl": level.itl_ms, "e2e": level.e2e_ms}
    return {
        "number": t.number,
        **{f"knob.{k}": v for k, v in t.knobs.items()},
        "workload": level.workload,
        "concurrency": level.concurrency,
        "requests": len(level.requests),
        "output_tps": level.output_tps,
        "requests_per_s": level.requests_per_s,
        **{f"{f}_p{p}_ms": figure.at(p) for f, figure in latencies.items() for p in (50, 99)},
        "ppl": t.record.ppl,
        "feasible": t.feasible,
        "slo": slo.text() if slo else None,
        "goodput": level_goodput(level, slo) if slo else None,
        "slo_held": slo.holds(level) if slo else None,
        "best_level": served.level == level.workload if served else None,
        "on_serving_front": t.number in front if slo else None,
    }


def _serving_files(data: StudyData, out: Path, *, theme: Theme) -> list[Path]:
    """The serving chart and table where the measured trials ran a load (see the module's docstring)."""
    loaded = [t for t in data.measured if t.record is not None and t.record.measurement and t.record.measurement.load]
    if not loaded:
        return []
    slo = data.stored.serving_slo
    served = {
        t.number: judged
        for t in loaded
        if slo is not None and t.record is not None and (judged := t.record.served(slo)) is not None
    }
    # the console's front, by the one function: a reused trial (a copy, a PPL-memo hit) is never on it
    on_front = serving_front([t.record for t in loaded if t.record is not None], slo) if slo else []
    front = {r.trial_number for r, _ in on_front}
    rows, lines = [], []
    for t in loaded:
        assert t.record is not None and t.record.measurement is not None  # loaded, above
        rows += [_serving_row(t, level, slo, served.get(t.number), front) for level in t.record.measurement.load]
        lines.append(ServingLine(label=_label(t, data), levels=t.record.measurement.load))
    table = out / "serving.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    title = f"{data.study_name}: p99 TTFT against output throughput, each configuration through its load levels (one boot each)"
    return [table, *write_chart(serving_figure(lines, title=title, theme=theme), out, "serving")]


def report_html(data: StudyData, *, theme: Theme = "light", analyses: Sequence[go.Figure] = ()) -> str:
    """One page, plotly.js inlined once (the first figure) and shared by the others."""
    figures = [pareto_figure(data, theme=theme)]
    figures += [knob_figure(data, knob, theme=theme) for knob in data.knob_names]
    figures.append(history_figure(data, theme=theme))
    figures += analyses
    parts = [
        fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=f"figure-{i}", config={"displaylogo": False})
        for i, fig in enumerate(figures)
    ]
    dark = theme == "dark"
    style = "background:#111;color:#eee" if dark else "background:#fff;color:#111"
    title = html.escape(f"{data.study_name}: TPS vs PPL")
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body style='font-family:sans-serif;{style}'>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


@dataclass(frozen=True, kw_only=True)
class ExportArgs:
    study: str
    storage: str
    out: Path | None
    theme: Theme


def parse_args(argv: list[str] | None = None) -> ExportArgs:
    parser = argparse.ArgumentParser(prog="python -m dashboards.export", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="the Optuna study name (e.g. ctk)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--out", type=Path, help="output folder (default runs/exports/<study>/)")
    parser.add_argument("--theme", choices=sorted(THEMES), default="light")
    ns = parser.parse_args(argv)
    return ExportArgs(study=ns.study, storage=ns.storage, out=ns.out, theme=ns.theme)


@command(parse_args)
def main(args: ExportArgs) -> int:
    for path in export_study(args.study, args.storage, args.out, theme=args.theme):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
