"""Resume: the points an earlier run of the same transfer measured whole into its folder's ``transfer.json``.

``transfer.json`` is rewritten after each point, so an interrupted or failed transfer leaves every point it
finished. A rerun into the same folder keeps those (each level read back as stored, its goodput judged again
under this run's SLO from its requests) and boots only the rest: a point that failed, was interrupted or is new.
The earlier file must be of the same study, manifest and workloads, else the points would not compare: it is
refused, naming what differs, before anything boots.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.files import load_json
from engine.measurement import LengthBucket, LoadLevel
from errors import DataError, UsageError
from sweep.judgement import MaxLoad
from sweep.serving._boots import LevelRun, PointRun, Setup
from sweep.serving._output import plan_entries
from sweep.serving._points import Point

__all__ = ["kept_points"]


def _same_plan(stored: dict[str, Any], setup: Setup) -> str | None:
    """The first field in which the earlier file's plan differs from this one's; None where none does."""
    ours: dict[str, Any] = {
        "study": setup.spec.name,
        "manifest": setup.spec.manifest.name,
        "workloads": plan_entries(setup.plan),
    }
    if setup.max_load_repeats is not None:  # a search of other repeats decides differently
        ours["max_load_repeats"] = setup.max_load_repeats
    return next((key for key, value in ours.items() if stored.get(key) != value), None)


def kept_points(path: Path, setup: Setup, points: Sequence[Point]) -> dict[int, PointRun]:
    """The points of ``points`` that ``path`` (an earlier run's ``transfer.json``) holds measured whole, by trial
    number; none where there is no such file. Raises UsageError for a file of another plan or one that does not
    read as a transfer."""
    if not path.is_file():
        return {}
    stored = load_json(path, DataError, what="an earlier transfer")
    if not isinstance(stored, dict) or not isinstance(stored.get("points"), list):
        raise UsageError(f"{path} is not a transfer's figures: give another --out, or remove it to start afresh")
    differs = _same_plan(stored, setup)
    if differs is not None:
        raise UsageError(
            f"{path} holds a transfer whose {differs} differs from this one's: its points would "
            "not compare; give another --out, or remove it to start afresh"
        )
    by_number = {p.number: p for p in points}
    kept = {}
    for entry in stored["points"]:
        trial = entry.get("trial") if isinstance(entry, dict) else None
        point = by_number.get(trial) if isinstance(trial, int) else None
        if point is None or entry.get("knobs") != point.record.knobs or entry.get("error") is not None:
            continue
        try:
            levels = [LevelRun.judged(LoadLevel.from_dict(lv), setup.slo) for lv in entry.get("levels") or []]
        except DataError as exc:
            raise UsageError(f"{path}: {point.label}: {exc}; remove it to start afresh") from None
        run = PointRun(
            point=point, log=Path(entry.get("log", "")), levels=levels, boot_s=entry.get("boot_s"), kept=True
        )
        if setup.max_load_repeats is not None:
            try:
                run.max_load = MaxLoad.from_dict(entry["max_load"])
            except (KeyError, TypeError, ValueError):
                continue  # measured without the search (or not readably): booted again for it
        if setup.spec.profile.length_refs:
            try:
                run.lengths = [LengthBucket.from_dict(b) for b in entry.get("ppl_lengths") or []]
            except (KeyError, TypeError, ValueError):
                continue  # not readably: booted again
            if not run.lengths:
                continue  # measured before the profile scored long texts: booted again for them
        if run.complete(setup.plan):
            kept[point.number] = run
    return kept
