"""A recorded response surface: measured TPS and PPL per knob configuration, with its noise.

Two formats, both written by ``benchmarks.record_grid``. The CSV (``joint_grid.csv``) has one row
per measured trial; ``#`` lines at the top say how it was made. Columns: ``study``, ``trial``,
``is_baseline``, ``status``, one column per knob, ``tps``, ``ppl``. The JSON (``fidelity_grid.json``)
holds the same rows plus each trial's trace: every timed prompt's seconds and tokens, and the
seconds of each phase (boot, warm-up, TPS, PPL, stop): what a replay needs to stop a trial early
and to count what it cost. A configuration measured more than once (the baseline, the repeat
study's points) gives the noise: the pooled relative standard deviation of its rows around their
mean, and, on a grid with traces, how much a stage of a run moves apart from the rest of it
(``Surface.run_noise``). A configuration's trace is its first recorded row's.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.config import KNOBS, KnobValue
from errors import DataError
from sweep.judgement import pooled_log_sd

__all__ = ["COLUMNS", "RunNoise", "Surface", "SurfacePoint", "Trace", "load_surface"]

COLUMNS = ("study", "trial", "is_baseline", "status")  # then the knobs, then tps and ppl


@dataclass(frozen=True, kw_only=True)
class SurfacePoint:
    tps: float | None  # mean over the configuration's complete rows; None: it never ran
    ppl: float | None
    rows: int


@dataclass(frozen=True, kw_only=True)
class Trace:
    """One full-fidelity trial as recorded: its first run prompt by prompt, and its phases."""

    tps: float
    latencies_s: tuple[float, ...]
    tokens: tuple[int, ...]
    timings_s: dict[str, float]  # boot, warmup, tps, ppl, stop (engine.bench's names)

    def rate(self, start: int, end: int) -> float:
        """Tokens per second of request time over prompts ``start`` to ``end`` (exclusive)."""
        return sum(self.tokens[start:end]) / sum(self.latencies_s[start:end])


@dataclass(frozen=True, kw_only=True)
class RunNoise:
    """How a replayed run's prompts move from boot to boot, measured on the configurations recorded
    more than once. A run is cut at ``cuts`` (prompt counts: the stage boundaries) into segments; all
    its prompts share one factor (``boot_sd``) and each segment has its own (``segment_sds``), all
    log-normal. A segment's sd is the pooled within-configuration sd of log(its rate / the rest of the
    run's rate) over sqrt 2 (the segment and the rest move alike and independently); the shared sd is
    what remains of the whole run's TPS sd once the segments' share of it is taken out."""

    cuts: tuple[int, ...]
    boot_sd: float
    segment_sds: tuple[float, ...]  # one per segment: len(cuts) + 1
    df: int  # degrees of freedom behind each segment's sd

    def describe(self) -> str:
        segments = "; ".join(f"from prompt {a + 1}: {sd:.2%}" for a, sd in zip((0, *self.cuts), self.segment_sds))
        return (
            f"TPS x exp(N(0, {self.boot_sd:.4f})) per trial, and each segment's prompts x exp(N(0, sd)) of their "
            f"own ({segments}; {self.df} degrees of freedom, from the repeated configurations' prompt timings)"
        )


@dataclass(frozen=True, kw_only=True)
class Surface:
    knobs: tuple[str, ...]
    points: dict[tuple[int, ...], SurfacePoint]
    baseline: tuple[int, ...]  # the configuration of the rows marked is_baseline
    tps_rel_sd: float  # pooled over configurations measured more than once
    ppl_rel_sd: float
    repeated: int  # configurations measured more than once
    notes: tuple[str, ...]  # the file's ``#`` lines: command, duration, load
    traces: dict[tuple[int, ...], Trace] = field(default_factory=dict)  # JSON grids only
    profile: dict[str, Any] | None = None  # JSON grids: the BenchProfile its trials were measured with
    # JSON grids: every traced row of each configuration measured more than once (fresh boots)
    reruns: dict[tuple[int, ...], tuple[Trace, ...]] = field(default_factory=dict)
    held: dict[str, KnobValue] = field(default_factory=dict)  # JSON grids: knobs every row holds at one value

    def values(self, knob: str) -> list[int]:
        i = self.knobs.index(knob)
        return sorted({key[i] for key in self.points})

    def key(self, knobs: Mapping[str, KnobValue]) -> tuple[int, ...]:
        return tuple(int(knobs[k]) for k in self.knobs)

    def point(self, knobs: Mapping[str, KnobValue]) -> SurfacePoint:
        key = self.key(knobs)
        if key not in self.points:
            raise DataError(f"configuration {dict(zip(self.knobs, key))} is not in the recorded grid")
        return self.points[key]

    def run_noise(self, cuts: tuple[int, ...]) -> RunNoise:
        """The noise of a run cut at ``cuts``, measured on the reruns (``RunNoise``)."""
        runs = list(self.reruns.values())
        n = min(len(t.latencies_s) for group in runs for t in group) if runs else 0
        bounds = (0, *(c for c in cuts if 0 < c < n), n)
        sds, df = [], 0
        for a, b in zip(bounds, bounds[1:]):
            if a == 0 and b == n:  # one segment: the whole run, nothing moves apart from it
                sds.append(0.0)
                continue
            apart = [[t.rate(a, b) / _rest_rate(t, a, b, n) for t in group] for group in runs]
            sd, df = pooled_log_sd(apart)
            sds.append(sd / math.sqrt(2))
        whole, _ = pooled_log_sd([[t.tps for t in group] for group in runs])
        shares = [(b - a) / n for a, b in zip(bounds, bounds[1:])] if n else [1.0]
        left = whole**2 - sum((w * sd) ** 2 for w, sd in zip(shares, sds))
        return RunNoise(cuts=bounds[1:-1], boot_sd=math.sqrt(max(left, 0.0)), segment_sds=tuple(sds), df=df)


def _rest_rate(trace: Trace, start: int, end: int, n: int) -> float:
    """The rate over a run's first ``n`` prompts outside ``start`` to ``end``."""
    latencies = trace.latencies_s[:start] + trace.latencies_s[end:n]
    return (sum(trace.tokens[:start]) + sum(trace.tokens[end:n])) / sum(latencies)


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
    """A recorded grid: ``.json`` with traces, else the CSV."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise DataError(f"{path}: cannot read the recorded grid: {exc.strerror}") from None
    if path.suffix == ".json":
        return _from_json(text, path)
    lines = text.splitlines()
    notes = tuple(line.lstrip("# ").rstrip() for line in lines if line.startswith("#"))
    reader = csv.DictReader(line for line in lines if line and not line.startswith("#"))
    header = reader.fieldnames or []
    knobs = tuple(c for c in header if c in KNOBS)
    missing = [c for c in (*COLUMNS, "tps", "ppl") if c not in header]
    if missing or not knobs:
        raise DataError(f"{path}: not a recorded grid: missing column(s) {missing or 'for the knobs'}")
    rows = [
        {
            **row,
            "is_baseline": row["is_baseline"] == "True",
            "knobs": {k: row[k] for k in knobs},
            "tps": float(row["tps"]) if row["status"] == "complete" else None,
            "ppl": float(row["ppl"]) if row["status"] == "complete" else None,
        }
        for row in reader
    ]
    return _surface(rows, knobs=knobs, notes=notes, path=path)


def _from_json(text: str, path: Path) -> Surface:
    try:
        data = json.loads(text)
        rows, notes, profile = data["rows"], tuple(data.get("notes", ())), dict(data["profile"])
        # every consumed knob is in a row; the grid's are those it varies
        knobs = tuple(
            sorted(
                k
                for k in {k for row in rows for k in row["knobs"]}
                if len({repr(row["knobs"].get(k)) for row in rows}) > 1
            )
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: not a recorded grid: {exc}") from None
    if not knobs or any(k not in KNOBS for k in knobs):
        raise DataError(f"{path}: not a recorded grid: knobs {list(knobs)}")
    held = {k: rows[0]["knobs"][k] for k in {k for row in rows for k in row["knobs"]} - set(knobs)}
    return replace(_surface(rows, knobs=knobs, notes=notes, path=path), profile=profile, held=held)


def _surface(rows: Iterable[dict[str, Any]], *, knobs: tuple[str, ...], notes: tuple[str, ...], path: Path) -> Surface:
    tps: dict[tuple[int, ...], list[float]] = {}
    ppl: dict[tuple[int, ...], list[float]] = {}
    traces: dict[tuple[int, ...], list[Trace]] = {}
    baselines = set()
    for row in rows:
        key = tuple(int(row["knobs"][k]) for k in knobs)
        tps.setdefault(key, [])
        ppl.setdefault(key, [])
        if row["is_baseline"]:
            baselines.add(key)
        if row["status"] == "complete":
            tps[key].append(float(row["tps"]))
            ppl[key].append(float(row["ppl"]))
            if row.get("latencies_s"):
                traces.setdefault(key, []).append(
                    Trace(
                        tps=float(row["tps"]),
                        latencies_s=tuple(row["latencies_s"]),
                        tokens=tuple(row["tokens"]),
                        timings_s=dict(row["timings_s"]),
                    )
                )
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
        traces={key: runs[0] for key, runs in traces.items()},
        reruns={key: tuple(runs) for key, runs in traces.items() if len(runs) > 1},
    )
