"""``python -m benchmarks.record_grid``: measure the response surfaces the replay benchmarks replay.

Runs the sweep itself, ``python -m sweep.run``, over two studies on the reference stack into one
database, then writes every measured trial of both (see ``benchmarks._surface``) with notes
saying the command, how long the trials took and the machine's load:

- ``--grid joint`` (default): ``benchmarks/studies/joint_grid.toml`` (the joint study's space,
  coarse, as a full grid) and ``joint_grid_repeats.toml`` (a few of its points again, for the
  noise) -> ``benchmarks/results/joint_grid.csv``, for ``benchmarks.sample_efficiency``.
- ``--grid fidelity``: ``fidelity_grid.toml`` and ``fidelity_grid_repeats.toml``, the same space
  with more prompts per trial -> ``benchmarks/results/fidelity_grid.json``, each trial with its
  prompts' timings and its phases, for ``benchmarks.time_to_optimum``.
- ``--grid vllm-h200``: ``vllm_h200_grid.toml`` and its repeats, inside the ``vllm-h200`` space, on
  stock vLLM on an H200 -> ``benchmarks/results/vllm_h200_grid.json``, as the fidelity grid.

An interrupted run resumes where it stopped: the same command again.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url

from benchmarks._report import RESULTS_DIR, command_line
from benchmarks._surface import COLUMNS
from benchmarks._sweeps import REPO, load_note, run_sweep
from benchmarks._timeline import load_timeline
from cli import command
from errors import ConfigError, StudySpecError, SweepRunError
from sweep.store import TrialRecord, open_existing

__all__ = ["main"]

STUDIES = REPO / "benchmarks" / "studies"
RUN_FOLDER = REPO / "runs" / "benchmarks" / "grid"


@dataclass(frozen=True, kw_only=True)
class Grid:
    studies: tuple[str, str]  # the grid, then its repeats
    out: Path
    traces: bool  # write JSON with every trial's prompt timings and phases, not the CSV


GRIDS = {
    "joint": Grid(studies=("joint_grid", "joint_grid_repeats"), out=RESULTS_DIR / "joint_grid.csv", traces=False),
    "fidelity": Grid(
        studies=("fidelity_grid", "fidelity_grid_repeats"), out=RESULTS_DIR / "fidelity_grid.json", traces=True
    ),
    # stock vLLM on an H200 (benchmarks/gpu/run_sweep.sh waste runs the studies there; --csv-only writes the file)
    "vllm-h200": Grid(
        studies=("vllm_h200_grid", "vllm_h200_grid_repeats"), out=RESULTS_DIR / "vllm_h200_grid.json", traces=True
    ),
}


@dataclass(frozen=True, kw_only=True)
class Args:
    grid: Grid
    storage: str
    out: Path
    record: bool  # False: only write the file from what the database holds
    refs: Path | None  # a PPL reference set in place of the profile's


def _study_file(study: str, refs: Path | None) -> Path:
    """The committed study file, or a copy in the run folder whose profile reads ``refs``."""
    path = STUDIES / f"{study}.toml"
    if refs is None:
        return path
    text = path.read_text()
    if "\n[profile]\n" not in text:
        raise StudySpecError(f"{path}: no [profile] table to set refs in")
    copy = RUN_FOLDER / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(text.replace("\n[profile]\n", f"\n[profile]\nrefs = {json.dumps(str(refs.resolve()))}\n"))
    return copy


def _records(storage_url: str, grid: Grid) -> list[TrialRecord]:
    storage = open_existing(storage_url)
    try:
        # a trial closed without a boot (a copy, a PPL-memo hit) measured nothing: its figures are another's
        return [r for study in grid.studies for r in storage.records(study, token_ids=False) if r.booted]
    finally:
        storage.close()


def _rows(records: list[TrialRecord]) -> tuple[list[str], list[dict[str, object]], str]:
    """The CSV's header and rows, and a line naming the profile they were measured with."""
    knobs = sorted({k for r in records for k in r.knobs})
    rows = [
        {
            "study": r.study_name,
            "trial": r.trial_number,
            "is_baseline": r.is_baseline,
            "status": r.status,
            **{k: r.knobs[k] for k in knobs},
            "tps": r.tps,
            "ppl": r.ppl,
        }
        for r in records
    ]
    profiles = {json.dumps(r.profile, sort_keys=True) for r in records}
    fields = ("name", "num_prompts", "output_len", "ppl_records", "warmup_requests", "refs")
    profile = "; ".join(
        ", ".join(f"{k} {p.get(k)}" for k in fields) for p in (json.loads(text) for text in sorted(profiles))
    )
    return [*COLUMNS, *knobs, "tps", "ppl"], rows, f"profile: {profile}"


def _traced_rows(records: list[TrialRecord]) -> list[dict[str, object]]:
    """The JSON's rows: the CSV's fields, the knobs as a table, and each trial's trace."""
    return [
        {
            "study": r.study_name,
            "trial": r.trial_number,
            "is_baseline": r.is_baseline,
            "status": r.status,
            "knobs": r.knobs,
            "tps": r.tps,
            "ppl": r.ppl,
            "timings_s": r.timings,
            "latencies_s": r.measurement.prompt_latencies_s if r.measurement else [],
            "tokens": r.measurement.prompt_tokens if r.measurement else [],
        }
        for r in records
    ]


def _notes(storage_url: str, grid: Grid, *, profile: str, walls: dict[str, float], loads: list[str]) -> list[str]:
    notes = [f"command: {command_line()}", profile]
    for study in grid.studies:
        timeline = load_timeline(storage_url, study)
        busy = sum(t.wall_s for t in timeline)
        span = (max(t.told for t in timeline) - min(t.asked for t in timeline)).total_seconds()
        boot = sum(t.phases.get("boot", 0.0) for t in timeline)
        line = (
            f"{study}: {len(timeline)} trials, {busy / 60:.1f} min of trials (ask to tell; {boot / 60:.1f} of it "
            f"boot), first ask to last tell {span / 60:.1f} min, from {timeline[0].asked:%Y-%m-%d %H:%M} local time"
        )
        if study in walls:
            line += f"; this command's sweep.run took {walls[study] / 60:.1f} min"
        notes.append(line)
    notes += [f"load: {load}" for load in loads]
    notes.append(f"written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    return notes


def write_csv(path: Path, *, header: list[str], rows: list[dict[str, object]], notes: list[str]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"# {n}\n" for n in notes) + buffer.getvalue())


def _absolute(url: str) -> str:
    """The URL with a relative SQLite path made absolute: sweep.run runs in the run folder, and
    the path must name the same file there as in the caller's folder."""
    parsed = make_url(url)
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:" or Path(path).is_absolute():
        return url
    return parsed.set(database=str(Path(path).resolve())).render_as_string(hide_password=False)


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.record_grid", description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=sorted(GRIDS), default="joint", help="which grid (default joint)")
    parser.add_argument("--storage", help=f"database of the two studies (default {RUN_FOLDER}/<grid>.db)")
    parser.add_argument(
        "--out", type=Path, help="the file to write (default benchmarks/results/joint_grid.csv, fidelity_grid.json)"
    )
    parser.add_argument("--csv-only", action="store_true", help="measure nothing: write the file from the database")
    parser.add_argument(
        "--refs",
        type=Path,
        help="PPL reference set (JSONL) in place of the profile's, e.g. the first "
        "complete batch of a set datagen.refset is still writing",
    )
    ns = parser.parse_args(argv)
    if ns.refs is not None and not ns.refs.is_file():
        parser.error(f"--refs {ns.refs}: no such file")
    grid = GRIDS[ns.grid]
    # the joint grid's database keeps the name it was first recorded under
    storage = ns.storage or f"sqlite:///{RUN_FOLDER / ('grid.db' if ns.grid == 'joint' else f'{ns.grid}.db')}"
    return Args(grid=grid, storage=_absolute(storage), out=ns.out or grid.out, record=not ns.csv_only, refs=ns.refs)


@command(parse_args, usage=(SweepRunError,))
def main(args: Args) -> int:
    walls: dict[str, float] = {}
    loads = [f"before {load_note()}"]
    if args.record:
        for study in args.grid.studies:
            run = run_sweep(
                "--study",
                str(_study_file(study, args.refs)),
                "--storage",
                args.storage,
                folder=RUN_FOLDER,
                log_name=f"{study}.log",
            )
            walls[study] = run.wall_s
            loads.append(f"after {study}: {load_note()}")
    records = _records(args.storage, args.grid)
    header, rows, profile = _rows(records)
    notes = _notes(args.storage, args.grid, profile=profile, walls=walls, loads=loads)
    if args.grid.traces:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        profiles = {json.dumps(r.profile, sort_keys=True) for r in records}
        if len(profiles) != 1:
            raise ConfigError(
                f"the grid's trials were measured with {len(profiles)} different profiles: {sorted(profiles)}"
            )
        grid = {"notes": notes, "profile": json.loads(profiles.pop()), "rows": _traced_rows(records)}
        args.out.write_text(json.dumps(grid, indent=1) + "\n")
    else:
        write_csv(args.out, header=header, rows=rows, notes=notes)
    print(f"written: {args.out} ({len(rows)} trials)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
