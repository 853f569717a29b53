"""A recorded response surface: measured TPS and PPL per knob configuration, with its noise.

The CSV (``benchmarks/results/joint_grid.csv``, written by ``benchmarks.record_grid``) has one
row per measured trial; ``#`` lines at the top say how it was made. Columns: ``study``,
``trial``, ``is_baseline``, ``status``, one column per knob, ``tps``, ``ppl``. A configuration
measured more than once (the baseline, the repeat study's points) gives the noise: the pooled
relative standard deviation of its rows around their mean.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.knobs import KNOBS
from errors import DataError

__all__ = ["COLUMNS", "Surface", "SurfacePoint", "load_surface"]

COLUMNS = ("study", "trial", "is_baseline", "status")  # then the knobs, then tps and ppl


@dataclass(frozen=True, kw_only=True)
class SurfacePoint:
    tps: float | None  # mean over the configuration's complete rows; None: it never ran
    ppl: float | None
    rows: int


@dataclass(frozen=True, kw_only=True)
class Surface:
    knobs: tuple[str, ...]
    points: dict[tuple[int, ...], SurfacePoint]
    baseline: tuple[int, ...]  # the configuration of the rows marked is_baseline
    tps_rel_sd: float  # pooled over configurations measured more than once
    ppl_rel_sd: float
    repeated: int  # configurations measured more than once
    notes: tuple[str, ...]  # the file's ``#`` lines: command, duration, load

    def values(self, knob: str) -> list[int]:
        i = self.knobs.index(knob)
        return sorted({key[i] for key in self.points})

    def key(self, knobs: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(int(knobs[k]) for k in self.knobs)

    def point(self, knobs: Mapping[str, int]) -> SurfacePoint:
        key = self.key(knobs)
        if key not in self.points:
            raise DataError(f"configuration {dict(zip(self.knobs, key))} is not in the recorded grid")
        return self.points[key]


def _pooled_rel_sd(groups: list[list[float]]) -> float:
    squares, dof = 0.0, 0
    for values in groups:
        if len(values) < 2:
            continue
        mean = sum(values) / len(values)
        squares += sum((v / mean - 1) ** 2 for v in values)
        dof += len(values) - 1
    return math.sqrt(squares / dof) if dof else 0.0


def load_surface(path: Path) -> Surface:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise DataError(f"{path}: cannot read the recorded grid: {exc.strerror}") from None
    notes = tuple(line.lstrip("# ").rstrip() for line in lines if line.startswith("#"))
    reader = csv.DictReader(line for line in lines if line and not line.startswith("#"))
    header = reader.fieldnames or []
    knobs = tuple(c for c in header if c in KNOBS)
    missing = [c for c in (*COLUMNS, "tps", "ppl") if c not in header]
    if missing or not knobs:
        raise DataError(f"{path}: not a recorded grid: missing column(s) {missing or 'for the knobs'}")
    tps: dict[tuple[int, ...], list[float]] = {}
    ppl: dict[tuple[int, ...], list[float]] = {}
    baselines = set()
    for row in reader:
        key = tuple(int(row[k]) for k in knobs)
        tps.setdefault(key, [])
        ppl.setdefault(key, [])
        if row["is_baseline"] == "True":
            baselines.add(key)
        if row["status"] == "complete":
            tps[key].append(float(row["tps"]))
            ppl[key].append(float(row["ppl"]))
    if len(baselines) != 1:
        raise DataError(f"{path}: expected rows of one baseline configuration, found {sorted(baselines)}")
    points = {
        key: SurfacePoint(
            tps=sum(tps[key]) / len(tps[key]) if tps[key] else None,
            ppl=sum(ppl[key]) / len(ppl[key]) if ppl[key] else None,
            rows=len(tps[key]),
        )
        for key in tps
    }
    return Surface(
        knobs=knobs,
        points=points,
        baseline=baselines.pop(),
        tps_rel_sd=_pooled_rel_sd(list(tps.values())),
        ppl_rel_sd=_pooled_rel_sd(list(ppl.values())),
        repeated=sum(1 for v in tps.values() if len(v) > 1),
        notes=notes,
    )
