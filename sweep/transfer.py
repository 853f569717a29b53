"""``python -m sweep.transfer --study NAME``: does a study's front keep its order under serving load?

The challenge times one stream at a time; a deployed stack serves many at once. This command takes a finished
study's front as the project defines it (``sweep.judgement.front_records`` over the study's evidence and its noise,
as ``sweep.run`` prints it: the feasible trials measured to the end that no other beats beyond the noise, under the
PPL gate), its ``--top`` fastest points by their challenge TPS (the search boot's one-stream TPS), and the baseline
trial beside them as the control, whether or not it is on the front: what a point gains under load is read against
the stock stack. Each is booted fresh once with its trial's knobs (``engine.launch``), booted in order (the baseline
first, then the front by challenge TPS), warmed once as the organisers' harness warms (``engine.bench``'s
``warm_up`` on the first prompt: the profile's requests, tokens and pause), timed under each workload in order on
that one boot (``engine.bench``'s ``measure_load``: streamed requests, at most ``concurrency`` in flight, all sent at
once), then stopped. One boot a point, its levels in order: the levels are not interleaved across points.

The workloads: one a ``--levels`` concurrency on the profile's public prompts, each level its own slice of them (no
prompt timed twice in a boot, so that a prefix cache serves no level what an earlier one left), and, unless
``--no-long``, one at concurrency 1 on long-context prompts built from the public ones (``engine.bench``'s
``long_prompts``; never the held-out set). ``--num-prompts`` requests a level (at least the largest concurrency), of
``--output-len`` tokens each (the profile's ``output_len`` by default: at concurrency 1 the challenge's own shape).

Printed: a table of every point: its trial, its swept knobs, its challenge TPS and rank; per level its output tok/s,
p99 TTFT, p99 inter-token latency, with ``--slo-ttft-ms`` its goodput (requests a second whose TTFT met the bound,
``sweep.judgement.goodput``), and its rank by output tok/s at that level; whether its rank held at every level.
Ranks are among the points measured at every level. Every figure rests on one boot and one run a level: one draw, no
verdict (how much a boot moves is what ``sweep.claims`` measures; nothing here does). A stack that serves one request
at a time (the reference stack) gets no special case: its curves say so, its throughput flat while its TTFT grows.

Written to ``--out`` (default ``runs/exports/<study>/transfer/``): ``transfer.json`` (every figure and every
request's timings, rewritten after each point, so that an interrupted or failed run keeps what it measured), each
point's stack log (``trial-<N>/engine.log``), and the chart ``transfer.html`` / ``transfer.png`` (p99 TTFT against
output tok/s, one line a configuration across its concurrency levels), drawn by the dashboards' own command
(``python -m dashboards.serving``), run as a user would, so that the sweep imports nothing above it.

Exit status: 0 every point measured and the chart drawn; 1 a point's stack failed to boot or answered badly (named,
its log kept; the other points measured and written) or the chart failed to render; 2 bad input (an unknown study,
a study with no front, bad levels: one line on stderr, nothing booted); 130 interrupted (what was measured is
written).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status
from rich.table import Table

from engine.bench import StreamTiming, Workload, long_prompts, measure_load, open_client, warm_up
from engine.data import Prompt, load_prompts
from engine.knobs import KnobValues, parse_knobs
from engine.launch import build_launch, check_machine
from engine.process import EngineProcess
from engine.profiles import BenchProfile
from engine.trial import node_info
from errors import ConfigError, EngineError, NoCompletedTrialsError, UsageError
from sweep.judgement import Slo, front_records, goodput
from sweep.runs import RUN_DIR

if TYPE_CHECKING:  # imported where used: Ray and Optuna take seconds to import, and bad input should fail fast
    from sweep.search import StudySpec
    from sweep.store import TrialRecord

__all__ = ["TransferArgs", "main", "parse_args"]

DEFAULT_LEVELS = (1, 4, 16)
DEFAULT_TOP = 4
DEFAULT_NUM_PROMPTS = 16
CHART_MODULE = "dashboards.serving"  # the optional package's command that draws the chart
CHART_TIMEOUT_S = 300.0  # Chromium renders the PNG; a hung browser must not hang the command


# --- input ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TransferArgs:
    study: str
    storage: str
    manifest: str | None
    levels: tuple[int, ...]
    long: bool
    num_prompts: int
    output_len: int | None  # None: the profile's
    slo_ttft_ms: float | None
    top: int
    out: Path | None  # None: runs/exports/<study>/transfer/


def _levels(text: str) -> tuple[int, ...]:
    """``1,4,16`` -> (1, 4, 16), ascending; raises UsageError naming what is wrong."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--levels must be comma-separated concurrencies such as 1,4,16, got {text!r}") from None
    if any(v < 1 for v in values):
        raise UsageError(f"--levels: a concurrency is at least 1 request in flight, got {text!r}")
    if len(set(values)) != len(values):
        raise UsageError(f"--levels: each concurrency once, got {text!r}")
    return tuple(sorted(values))


def parse_args(argv: list[str] | None = None) -> TransferArgs:
    """The command line; argparse's own errors exit 2, a bad value raises UsageError (``main``: exit 2)."""
    from sweep.store import DEFAULT_STORAGE_URL

    parser = argparse.ArgumentParser(prog="python -m sweep.transfer", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="the study as sweep.run was given it (name or .toml path)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--manifest", help="the study's manifest, if sweep.run was given --manifest")
    parser.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)), help="concurrencies (default 1,4,16)")
    parser.add_argument(
        "--long",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one more level at concurrency 1 on long-context prompts (default on; --no-long skips it)",
    )
    parser.add_argument("--num-prompts", type=int, default=DEFAULT_NUM_PROMPTS, help="requests a level (default 16)")
    parser.add_argument("--output-len", type=int, help="tokens a request (default: the profile's output_len)")
    parser.add_argument("--slo-ttft-ms", type=float, help="a TTFT bound in ms: each level's goodput under it")
    parser.add_argument("--top", type=int, default=DEFAULT_TOP, help="front points, fastest first (default 4)")
    parser.add_argument("--out", type=Path, help="output folder (default runs/exports/<study>/transfer/)")
    ns = parser.parse_args(argv)
    levels = _levels(ns.levels)
    if ns.num_prompts < max(levels):
        raise UsageError(
            f"--num-prompts {ns.num_prompts} never puts {max(levels)} requests in flight: give at least {max(levels)}"
        )
    if ns.output_len is not None and ns.output_len < 1:
        raise UsageError(f"--output-len must be at least 1, got {ns.output_len}")
    if ns.top < 1:
        raise UsageError(f"--top must be at least 1, got {ns.top}")
    if ns.slo_ttft_ms is not None and not 0 < ns.slo_ttft_ms < math.inf:
        raise UsageError(f"--slo-ttft-ms must be a positive number of milliseconds, got {ns.slo_ttft_ms}")
    return TransferArgs(
        study=ns.study,
        storage=ns.storage,
        manifest=ns.manifest,
        levels=levels,
        long=ns.long,
        num_prompts=ns.num_prompts,
        output_len=ns.output_len,
        slo_ttft_ms=ns.slo_ttft_ms,
        top=ns.top,
        out=ns.out,
    )


# --- what is booted, and what it is timed on -------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Point:
    """One configuration to boot: its trial's record, its knobs checked against the manifest."""

    record: TrialRecord
    knobs: KnobValues
    on_front: bool
    label: str

    @property
    def number(self) -> int:
        return self.record.trial_number

    @property
    def challenge_tps(self) -> float:
        assert self.record.tps is not None  # a front point or the baseline, measured to the end
        return self.record.tps


def _label(record: TrialRecord, swept: Sequence[str]) -> str:
    knobs = ", ".join(f"{k}={record.knobs[k]}" for k in swept if k in record.knobs)
    return f"trial {record.trial_number}{' (baseline)' if record.is_baseline else ''}" + (f": {knobs}" if knobs else "")


def choose_points(
    spec: StudySpec, records: Sequence[TrialRecord], front: Sequence[TrialRecord], top: int
) -> list[Point]:
    """The baseline (measured to the end) first, then the ``top`` fastest front points; their knobs checked now,
    before anything boots (a stored value the registry no longer takes is bad input)."""
    chosen = sorted(front, key=lambda r: (-(r.tps or 0.0), r.trial_number))[:top]
    baseline = next((r for r in records if r.is_baseline and r.full), None)
    if baseline is not None:
        chosen = [baseline, *(r for r in chosen if r.trial_number != baseline.trial_number)]
    on_front = {r.trial_number for r in front}
    swept = list(spec.space)
    return [
        Point(
            record=r,
            knobs=parse_knobs(spec.manifest, r.knobs, where=f"trial {r.trial_number}'s stored knobs: "),
            on_front=r.trial_number in on_front,
            label=_label(r, swept),
        )
        for r in chosen
    ]


def workloads(args: TransferArgs, profile: BenchProfile) -> list[Workload]:
    """One workload a concurrency on the public prompts, then the long-context one at concurrency 1."""
    output_len = args.output_len or profile.output_len
    made = [
        Workload(name=f"c{c}", concurrency=c, num_prompts=args.num_prompts, output_len=output_len) for c in args.levels
    ]
    if args.long:
        made.append(
            Workload(name="long-c1", concurrency=1, num_prompts=args.num_prompts, output_len=output_len, prompts="long")
        )
    return made


def level_prompts(profile: BenchProfile, plan: Sequence[Workload]) -> dict[str, list[Prompt]]:
    """Each workload's prompts: the public levels disjoint slices of the profile's prompts in its order (no prompt
    timed twice in a boot), the long level built from the whole public set; raises UsageError where it runs short."""
    path = profile.path(profile.prompts)
    every = load_prompts(path, shuffle_seed=profile.shuffle_seed or None)
    public = [w for w in plan if w.prompts == "public"]
    needed = sum(w.num_prompts for w in public)
    if needed > len(every):
        raise UsageError(
            f"{len(public)} levels of {public[0].num_prompts} prompts need {needed} public prompts, none timed twice "
            f"in a boot; {path} has {len(every)}: lower --num-prompts or drop a level"
        )
    slices, start = {}, 0
    for w in public:
        slices[w.name] = every[start : start + w.num_prompts]
        start += w.num_prompts
    for w in plan:
        if w.prompts == "long":
            slices[w.name] = long_prompts(every, w.num_prompts)
    return slices


# --- measuring -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LevelRun:
    """One workload's run on one boot: its figures (``LoadResult.figures()``) and its requests."""

    workload: Workload
    figures: dict[str, Any]
    requests: list[StreamTiming]
    goodput: float | None  # requests a second that met the SLO; None without one

    def to_dict(self) -> dict[str, Any]:
        first = min((r.start_s for r in self.requests), default=0.0)
        return {
            **self.figures,
            "prompts": self.workload.prompts,
            "output_len": self.workload.output_len,
            "goodput": self.goodput,
            "requests_timed": [
                {
                    "start_s": round(r.start_s - first, 6),
                    "ttft_s": r.ttft_s,
                    "itl_s": r.itl_s,
                    "latency_s": r.latency_s,
                    "output_tokens": r.output_tokens,
                }
                for r in self.requests
            ],
        }


@dataclass(kw_only=True)
class PointRun:
    """What one point's boot gave: its levels in order, as far as it got, and the error that stopped it."""

    point: Point
    log: Path
    levels: list[LevelRun] = field(default_factory=list)
    boot_s: float | None = None
    error: str | None = None

    def complete(self, plan: Sequence[Workload]) -> bool:
        return self.error is None and len(self.levels) == len(plan)

    def level(self, name: str) -> LevelRun | None:
        return next((lv for lv in self.levels if lv.workload.name == name), None)


@dataclass(frozen=True, kw_only=True)
class Setup:
    """What every point is measured with."""

    spec: StudySpec
    plan: list[Workload]
    prompts: dict[str, list[Prompt]]
    slo: Slo | None
    out: Path


def _measure(run: PointRun, engine: EngineProcess, setup: Setup, status: Status, where: str) -> None:
    """Warm the running stack once, then each workload in order; each level is kept as soon as it is measured."""
    profile, model = setup.spec.profile, engine.launch.served_model_name
    first = setup.prompts[setup.plan[0].name][0]
    with open_client(engine.base_url, timeout_s=profile.request_timeout_s) as client:
        status.update(f"{where}: warming up")
        warm_up(
            client,
            model=model,
            prompt=first,
            requests=profile.warmup_requests,
            output_len=profile.warmup_output_len,
            pause_s=profile.warmup_pause_s,
        )
        for i, workload in enumerate(setup.plan, start=1):
            status.update(
                f"{where}: level {workload.name} ({i}/{len(setup.plan)}), "
                f"{workload.num_prompts} requests x {workload.output_len} tokens"
            )
            result = measure_load(client, model=model, prompts=setup.prompts[workload.name], workload=workload)
            good = None if setup.slo is None else goodput(result.requests, setup.slo, wall_s=result.wall_s)
            run.levels.append(
                LevelRun(workload=workload, figures=result.figures(), requests=result.requests, goodput=good)
            )


def run_point(run: PointRun, setup: Setup, status: Status, where: str) -> None:
    """Boot ``run``'s point fresh, warm it, time every level into ``run``, stop it; a stack that misbehaves is the
    run's ``error`` (named, its log kept), never raised."""
    point, profile = run.point, setup.spec.profile
    run.log.parent.mkdir(parents=True, exist_ok=True)
    # a short /tmp path keeps a stack's UNIX sockets under the 107-byte limit a deep folder can exceed
    with tempfile.TemporaryDirectory(prefix="gemma-sweep-", ignore_cleanup_errors=True) as tmp:
        try:
            launch = build_launch(
                setup.spec.manifest,
                point.knobs,
                workdir=run.log.parent,
                tmpdir=Path(tmp),
                cache=RUN_DIR / setup.spec.name / "cache",  # the study's, as its trials had it
            )
            check_machine(launch)
            status.update(f"{where}: booting")
            began = time.monotonic()
            with EngineProcess(launch, log_path=run.log, boot_timeout_s=profile.boot_timeout_s) as engine:
                run.boot_s = time.monotonic() - began
                _measure(run, engine, setup, status, where)
        except EngineError as exc:
            run.error = f"{type(exc).__name__}: {exc}"


# --- ranks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranks:
    """Ranks among the points measured at every level (1: the fastest): by challenge TPS, and by output tok/s at
    each level."""

    challenge: dict[int, int]
    levels: dict[str, dict[int, int]]

    def held(self, number: int) -> bool | None:
        """Whether the point's rank at every level is its challenge rank; None for a point not compared."""
        if number not in self.challenge:
            return None
        return all(ranks[number] == self.challenge[number] for ranks in self.levels.values())


def _ranked(values: dict[int, float]) -> dict[int, int]:
    order = sorted(values, key=lambda n: (-values[n], n))
    return {n: i for i, n in enumerate(order, start=1)}


def rank(runs: Sequence[PointRun], plan: Sequence[Workload]) -> Ranks:
    compared = [r for r in runs if r.complete(plan)]
    challenge = _ranked({r.point.number: r.point.challenge_tps for r in compared})
    levels = {}
    for w in plan:
        measured = {r.point.number: lv.figures["output_tps"] for r in compared if (lv := r.level(w.name))}
        levels[w.name] = _ranked(measured)
    return Ranks(challenge=challenge, levels=levels)


# --- what is written and printed ---------------------------------------------------------------


def _basis(setup: Setup, runs: Sequence[PointRun]) -> str:
    profile, plan = setup.spec.profile, setup.plan
    sizes = f"{plan[0].num_prompts} requests x {plan[0].output_len} tokens"
    return (
        f"{len(runs)} boot(s), one a configuration, fresh, warmed once; {len(plan)} run(s) on each, one a level, in order "
        f"({sizes}, all sent at once, at most the level's concurrency in flight): every figure is one boot's one run, "
        f"one draw, no verdict. Ranks by output tok/s among the configurations measured at every level; challenge TPS: "
        f"the study's search boot, one stream ({profile.num_prompts} prompts x {profile.output_len} tokens)."
    )


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
        "workloads": [
            {
                "name": w.name,
                "concurrency": w.concurrency,
                "num_prompts": w.num_prompts,
                "output_len": w.output_len,
                "prompts": w.prompts,
            }
            for w in setup.plan
        ],
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


def _row(run: PointRun, setup: Setup, ranks: Ranks) -> list[str]:
    number = run.point.number
    rank_text = f" ({ranks.challenge[number]})" if number in ranks.challenge else ""
    cells = [escape(run.point.label), f"{run.point.challenge_tps:.2f}{rank_text}"]
    for w in setup.plan:
        lv = run.level(w.name)
        if lv is None:
            cells += ["-"] * (5 if setup.slo else 4)
            continue
        f = lv.figures
        cells += [f"{f['output_tps']:.2f}", f"{f['ttft_ms']['p99']:.0f}", f"{f['itl_ms']['p99']:.1f}"]
        cells += [f"{lv.goodput:.3f}"] if lv.goodput is not None else []
        level_rank = ranks.levels[w.name].get(number)
        cells.append("-" if level_rank is None else str(level_rank))
    held = ranks.held(number)
    cells.append("not compared" if held is None else "yes" if held else "no")
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


def draw_chart(source: Path, out: Console) -> bool:
    """The dashboards' own command on ``transfer.json`` (see the module's docstring); False where it failed, said."""
    if importlib.util.find_spec(CHART_MODULE.partition(".")[0]) is None:
        out.print(f"chart skipped: this installation has no {CHART_MODULE} (the figures are in {source})", markup=False)
        return False
    argv = [sys.executable, "-m", CHART_MODULE, str(source)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHART_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        out.print(f"chart failed: no answer in {CHART_TIMEOUT_S:g} s (the figures are in {source})", markup=False)
        return False
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no message")
        out.print(f"chart failed (exit {done.returncode}: {last}); the figures are in {source}", markup=False)
        return False
    for line in done.stdout.splitlines():
        out.print(f"chart: {line}", markup=False)
    return True


# --- the command -----------------------------------------------------------------------------


def _setup(args: TransferArgs) -> tuple[Setup, list[Point], str]:
    """Everything checked before a boot: the study, its front, its points, the workloads and their prompts."""
    from sweep.claims import load_evidence
    from sweep.search import load_study
    from sweep.store import open_existing, shown_url

    spec = load_study(args.study, manifest=args.manifest)
    storage = open_existing(args.storage)
    try:
        evidence = load_evidence(storage, spec.name)
    finally:
        storage.close()
    evidence.stored.require_manifest(spec.name, spec.manifest.name)
    front = front_records(evidence.records, evidence.noise)
    if not front:
        raise NoCompletedTrialsError(
            f"study {spec.name!r} has no front: no feasible trial measured to the end under its gate "
            f"({spec.gate.describe()}); run `python -m sweep.run --study {spec.name}` first"
        )
    points = choose_points(spec, evidence.records, front, args.top)
    plan = workloads(args, spec.profile)
    setup = Setup(
        spec=spec,
        plan=plan,
        prompts=level_prompts(spec.profile, plan),
        slo=Slo(ttft_ms=args.slo_ttft_ms) if args.slo_ttft_ms is not None else None,
        out=args.out if args.out is not None else RUN_DIR / "exports" / spec.name / "transfer",
    )
    return setup, points, shown_url(args.storage)


def _report(run: PointRun, out: Console) -> None:
    """One line a point as it ends: a log of a long command shows how far it got."""
    if run.error is not None:
        out.print(f"{escape(run.point.label)}: failed: {escape(run.error)}")
        return
    figures = ", ".join(f"{lv.workload.name} {lv.figures['output_tps']:.2f} tok/s" for lv in run.levels)
    out.print(f"{escape(run.point.label)}: booted in {run.boot_s or 0.0:.1f} s; {figures}")


def _transfer(args: TransferArgs, out: Console) -> int:
    setup, points, storage = _setup(args)
    setup.out.mkdir(parents=True, exist_ok=True)
    path = setup.out / "transfer.json"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the stacks it starts must not reach a hub
    runs: list[PointRun] = []
    out.print(
        f"{setup.spec.name}: {len(points)} configuration(s), one fresh boot each, {len(setup.plan)} level(s) each "
        f"({', '.join(w.name for w in setup.plan)}); writing {path}"
    )
    with out.status("starting") as status:
        for i, point in enumerate(points, start=1):
            run = PointRun(point=point, log=setup.out / f"trial-{point.number}" / "engine.log")
            runs.append(run)
            try:
                run_point(run, setup, status, where=f"{point.label} ({i}/{len(points)})")
            except KeyboardInterrupt:
                run.error = "interrupted"  # its levels measured so far are kept
                raise
            finally:
                write_json(path, setup, runs, storage)
            _report(run, out)
    print_table(out, setup, runs)
    drawn = draw_chart(path, out) if any(r.levels for r in runs) else False
    out.print(f"figures: {path}", markup=False)
    return 0 if drawn and all(r.error is None for r in runs) else 1


def main(argv: list[str] | None = None) -> int:
    out = Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 250)
    try:
        return _transfer(parse_args(argv), out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
