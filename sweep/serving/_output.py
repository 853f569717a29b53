"""What a transfer writes and prints: ``transfer.json`` (whole, rewritten after each point), the table of every
point, one line a point as it ends."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from engine.bench import Workload, node_info
from engine.measurement import bucket_bounds, bucket_label
from sweep.serving._boots import PointRun, Setup
from sweep.serving._rank import Ranks, rank

__all__ = ["plan_entries", "print_table", "report", "write_json"]


def _basis(setup: Setup, runs: Sequence[PointRun]) -> str:
    profile, plan = setup.spec.profile, setup.plan
    sizes = f"{plan[0].num_prompts} requests x {plan[0].output_len} tokens"
    return (
        f"{len(runs)} boot(s), one a configuration, fresh, warmed once; {len(plan)} run(s) on each, one a level, in order "
        f"({sizes}, all sent at once, at most the level's concurrency in flight): every figure is one boot's one run, "
        f"one draw, no verdict. Ranks by output tok/s among the configurations measured at every level; challenge TPS: "
        f"the study's search boot, one stream ({profile.num_prompts} prompts x {profile.output_len} tokens)."
    )


def plan_entries(plan: Sequence[Workload]) -> list[dict[str, Any]]:
    """The workloads as ``transfer.json`` lists them (and a resumed run compares them)."""
    return [
        {
            "name": w.name,
            "concurrency": w.concurrency,
            "num_prompts": w.num_prompts,
            "output_len": w.output_len,
            "prompts": w.prompts,
        }
        for w in plan
    ]


def _document(setup: Setup, runs: Sequence[PointRun], ranks: Ranks, storage: str) -> dict[str, Any]:
    spec = setup.spec
    return {
        "study": spec.name,
        "manifest": spec.manifest.name,
        "storage": storage,
        "profile": spec.profile.name,
        "title": f"{spec.name}: p99 TTFT against output throughput under load (one boot a configuration, one run a "
        f"level: one draw)",
        "basis": _basis(setup, runs),
        "machine": node_info() | {"cpus": os.cpu_count()},
        "workloads": plan_entries(setup.plan),
        "max_load_repeats": setup.max_load_repeats,
        "slo": None if setup.slo is None else {"ttft_ms": setup.slo.ttft_ms, "text": setup.slo.text()},
        "points": [
            {
                "trial": r.point.number,
                "label": r.point.label,
                "knobs": r.point.record.knobs,
                "baseline": r.point.record.is_baseline,
                "on_front": r.point.on_front,
                "challenge_tps": r.point.challenge_tps,
                "challenge_rank": ranks.challenge.get(r.point.number),
                "ranks": {name: ranked.get(r.point.number) for name, ranked in ranks.levels.items()},
                "rank_held": ranks.held(r.point.number),
                "boots": 1,
                "boot_s": r.boot_s,
                "error": r.error,
                "log": str(r.log),
                "levels": [lv.to_dict() for lv in r.levels],
                "max_load": None if r.max_load is None else r.max_load.to_dict(),
                "ppl_lengths": [b.to_dict() for b in r.lengths],
            }
            for r in runs
        ],
    }


def write_json(path: Path, setup: Setup, runs: Sequence[PointRun], storage: str) -> None:
    """``transfer.json``, whole, through a temporary file: a reader never sees half of it."""
    text = json.dumps(_document(setup, runs, rank(runs, setup.plan), storage), indent=2)
    partial = path.with_suffix(".json.partial")
    partial.write_text(text + "\n", encoding="utf-8")
    partial.replace(path)


def _columns(table: Table, setup: Setup) -> None:
    table.add_column("point")
    table.add_column("challenge\nTPS (rank)", justify="right")
    for w in setup.plan:
        for head in ("tok/s", "p99 TTFT\nms", "p99 ITL\nms", *(["goodput\nreq/s"] if setup.slo else []), "rank"):
            table.add_column(f"{w.name}\n{head}", justify="right")
    table.add_column("rank held\nat every level")
    if setup.max_load_repeats is not None:
        table.add_column("holds up to\n(in flight)", justify="right")
    for label in _length_labels(setup):
        table.add_column(f"PPL\n{label}", justify="right")


def _length_labels(setup: Setup) -> list[str]:
    """The profile's length buckets, where it scores long texts (``engine.measurement``)."""
    profile = setup.spec.profile
    return [bucket_label(*b) for b in bucket_bounds(profile.length_buckets)] if profile.length_refs else []


def _row(run: PointRun, setup: Setup, ranks: Ranks) -> list[str]:
    number = run.point.number
    rank_text = f" ({ranks.challenge[number]})" if number in ranks.challenge else ""
    cells = [escape(run.point.label), f"{run.point.challenge_tps:.2f}{rank_text}"]
    for w in setup.plan:
        lv = run.level(w.name)
        if lv is None:
            cells += ["-"] * (5 if setup.slo else 4)
            continue
        f = lv.level
        cells += [f"{f.output_tps:.2f}", f"{f.ttft_ms.p99:.0f}", f"{f.itl_ms.p99:.1f}"]
        cells += [f"{lv.goodput:.3f}"] if lv.goodput is not None else []
        level_rank = ranks.levels[w.name].get(number)
        cells.append("-" if level_rank is None else str(level_rank))
    held = ranks.held(number)
    cells.append("not compared" if held is None else "yes" if held else "no")
    if setup.max_load_repeats is not None:
        found = run.max_load
        cells.append("-" if found is None else "none" if found.concurrency is None else str(found.concurrency))
    by_label = {b.label: b for b in run.lengths}
    cells += [f"{by_label[label].ppl:.4f}" if label in by_label else "-" for label in _length_labels(setup)]
    return cells


def print_table(out: Console, setup: Setup, runs: Sequence[PointRun]) -> None:
    ranks = rank(runs, setup.plan)
    slo = f"; goodput: requests a second meeting {setup.slo.text()}" if setup.slo else ""
    table = Table(
        title=escape(f"{setup.spec.name}: the front under serving load, {setup.spec.manifest.name}{slo}"),
        title_justify="left",
    )
    _columns(table, setup)
    for run in runs:
        table.add_row(*_row(run, setup, ranks))
    out.print(table)
    out.print(escape(_basis(setup, runs)), soft_wrap=True)
    for run in runs:
        if run.error is not None:
            out.print(
                f"[red]{escape(run.point.label)} failed:[/red] {escape(run.error)} (log: {escape(str(run.log))})",
                soft_wrap=True,
            )


def report(run: PointRun, out: Console) -> None:
    """One line a point as it ends: a log of a long command shows how far it got."""
    if run.error is not None:
        out.print(f"{escape(run.point.label)}: failed: {escape(run.error)}")
        return
    figures = ", ".join(f"{lv.level.workload} {lv.level.output_tps:.2f} tok/s" for lv in run.levels)
    how = (
        "kept from the earlier run in this folder, not booted again"
        if run.kept
        else f"booted in {run.boot_s or 0.0:.1f} s"
    )
    found = "" if run.max_load is None else f"; holds the SLO up to {run.max_load.concurrency or 'no level'}"
    lengths = "".join(f"; PPL {b.label} {b.ppl:.4f}" for b in run.lengths)
    out.print(f"{escape(run.point.label)}: {how}; {figures}{found}{lengths}")
