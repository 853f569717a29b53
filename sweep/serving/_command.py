"""``python -m sweep.transfer --study NAME``: does a study's front keep its order under serving load?

The challenge times one stream at a time; a deployed stack serves many at once. This command takes a finished
study's front as the project defines it (``sweep.judgement.front_records`` over the study's evidence and its noise,
as ``sweep.run`` prints it: the feasible trials measured to the end that no other beats beyond the noise, under the
PPL gate), its ``--top`` fastest points by their challenge TPS (the search boot's one-stream TPS), and the baseline
trial beside them as the control, whether or not it is on the front: what a point gains under load is read against
the stock stack. Each is booted fresh once with its trial's knobs (``engine.launch``), booted in order (the baseline
first, then the front by challenge TPS), warmed once as the organisers' harness warms (``engine.bench``'s
``harness_warm_up``, the one every timed run gets), timed under each workload in order on that one boot
(``engine.bench``'s ``measure_load``: streamed requests, at most ``concurrency`` in flight, all sent at once), then
stopped. One boot a point, its levels in order: the levels are not interleaved across points.

The workloads: one a ``--levels`` concurrency on the profile's public prompts, each level its own slice of them
(``engine.bench``'s ``level_prompts``, the rule a serving study's trials follow too), and, unless ``--no-long``, one
at concurrency 1 on long-context prompts built from the public ones (never the held-out set). ``--num-prompts``
requests a level (at least the largest concurrency), of ``--output-len`` tokens each (the profile's ``output_len`` by
default: at concurrency 1 the challenge's own shape).

Printed: a table of every point: its trial, its swept knobs, its challenge TPS and rank; per level its output tok/s,
p99 TTFT, p99 inter-token latency, with ``--slo-ttft-ms`` its goodput (requests a second whose TTFT met the bound,
``sweep.judgement.goodput``), and its rank by output tok/s at that level; whether its rank held at every level.
Ranks are among the points measured at every level. Every figure rests on one boot and one run a level: one draw, no
verdict (how much a boot moves is what ``sweep.claims`` measures; nothing here does). A stack that serves one request
at a time (the reference stack) gets no special case: its curves say so, its throughput flat while its TTFT grows.

Written to ``--out`` (default ``runs/exports/<study>/transfer/``): ``transfer.json`` (every figure and every
request's timings, rewritten after each point), each point's stack log (``trial-<N>/engine.log``), and the chart
``transfer.html`` / ``transfer.png`` (p99 TTFT against output tok/s, one line a configuration across its
concurrency levels), drawn by the dashboards' own command (``python -m dashboards.serving``).

``--max-load REPEATS`` (with ``--slo-ttft-ms``): after its levels, on the same boot, the highest of the
``--levels`` concurrencies the point holds under the SLO, each level decided over REPEATS runs (``_maxload``).

``--dry-run`` prints what would be booted (each point's knobs, argv and env, secrets redacted) and on what, and
which points an earlier run already measured; it boots nothing and writes nothing. Resume: the same command into the
same folder goes on where an interrupted or failed run stopped, keeping the points it finished (``_resume``).

Exit status: 0 every point measured and the chart drawn; 1 a point's stack failed to boot or answered badly (named,
its log kept; the other points measured and written) or the chart failed to render; 2 bad input (an unknown study,
a study with no front, bad levels, an earlier transfer of another plan in ``--out``: one line on stderr, nothing
booted); 130 interrupted (what was measured is written; the same command goes on from there).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from cli import command
from engine.bench import level_prompts
from engine.launch import build_launch
from engine.secrets import redact_argv, redact_env
from errors import NoCompletedTrialsError
from sweep.interrupts import raise_interrupt
from sweep.judgement import Slo, front_records
from sweep.runs import RUN_DIR
from sweep.serving._args import TransferArgs, parse_args
from sweep.serving._boots import PointRun, Setup, run_point
from sweep.serving._chart import draw_chart
from sweep.serving._output import print_table, report, write_json
from sweep.serving._points import Point, choose_points, workloads
from sweep.serving._resume import kept_points

__all__ = ["main"]


def _setup(args: TransferArgs) -> tuple[Setup, list[Point], str]:
    """Everything checked before a boot: the study, its front, its points, the workloads and their prompts."""
    from sweep.reading import read_study
    from sweep.store import shown_url

    spec, evidence = read_study(args.study, storage=args.storage, manifest=args.manifest)
    front = front_records(evidence.records, evidence.noise)
    if not front:
        raise NoCompletedTrialsError(
            f"study {spec.name!r} has no front: no feasible trial measured to the end under its gate "
            f"({spec.gate.describe()}); run `python -m sweep.run --study {spec.name}` first"
        )
    points = choose_points(spec, evidence.records, front, args.top)
    plan = workloads(args, spec.profile)
    public = spec.profile.load_public()
    setup = Setup(
        spec=spec,
        plan=plan,
        prompts=level_prompts(public, plan),
        public=public,
        max_load_repeats=args.max_load_repeats,
        slo=Slo(ttft_ms=args.slo_ttft_ms) if args.slo_ttft_ms is not None else None,
        out=args.out if args.out is not None else RUN_DIR / "exports" / spec.name / "transfer",
    )
    return setup, points, shown_url(args.storage)


def _dry_run(setup: Setup, points: Sequence[Point], kept: dict[int, PointRun], out: Console) -> int:
    """What a run would boot, and on what; nothing booted, nothing written."""
    levels = ", ".join(
        f"{w.name} ({w.concurrency} in flight, {w.num_prompts} {w.prompts} prompts x {w.output_len} tokens)"
        for w in setup.plan
    )
    out.print(
        f"dry run of the transfer of study {setup.spec.name}: manifest {setup.spec.manifest.name}, "
        f"{len(points) - len(kept)} of {len(points)} configuration(s) to boot, one fresh boot each; nothing is booted",
        markup=False,
    )
    out.print(f"levels on each boot, in order: {levels}", markup=False, soft_wrap=True)
    if setup.max_load_repeats is not None and setup.slo is not None:
        out.print(
            f"then the highest of them each point holds under {setup.slo.text()}, each level decided over "
            f"{setup.max_load_repeats} runs",
            markup=False,
        )
    for point in points:
        if point.number in kept:
            out.print(f"\n{point.label}: measured by an earlier run in {setup.out}; not booted again", markup=False)
            continue
        launch = build_launch(setup.spec.manifest, point.knobs)
        lines = [
            f"\n{point.label}: would boot",
            f"  argv: {shlex.join(redact_argv(launch.argv))}",
            *(f"  env:  {key}={value}" for key, value in redact_env(launch.env).items()),
        ]
        for line in lines:  # values printed as they are: no rich markup in them
            out.print(line, markup=False, soft_wrap=True)
    out.print(f"\nfigures would go to {setup.out / 'transfer.json'}", markup=False)
    return 0


def _transfer(args: TransferArgs, out: Console) -> int:
    setup, points, storage = _setup(args)
    path = setup.out / "transfer.json"
    kept = kept_points(path, setup, points)
    if args.dry_run:
        return _dry_run(setup, points, kept, out)
    setup.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the stacks it starts must not reach a hub
    signal.signal(signal.SIGTERM, raise_interrupt)  # under `timeout` or a scheduler, TERM stops it as Ctrl-C does
    runs: list[PointRun] = []
    again = f"; {len(kept)} kept from the earlier run there" if kept else ""
    out.print(
        f"{setup.spec.name}: {len(points)} configuration(s), one fresh boot each, {len(setup.plan)} level(s) each "
        f"({', '.join(w.name for w in setup.plan)}); writing {path}{again}"
    )
    with out.status("starting") as status:
        for i, point in enumerate(points, start=1):
            run = kept.get(point.number) or PointRun(
                point=point, log=setup.out / f"trial-{point.number}" / "engine.log"
            )
            runs.append(run)
            if not run.kept:
                try:
                    run_point(run, setup, status, where=f"{point.label} ({i}/{len(points)})")
                except KeyboardInterrupt:
                    run.error = "interrupted"  # its levels measured so far are kept
                    out.print(f"interrupted: what was measured is in {path}; the same command goes on from there")
                    raise
                finally:  # the kept points not reached yet too: a second interrupt loses none of them
                    write_json(path, setup, [*runs, *(k for k in kept.values() if k not in runs)], storage)
            report(run, out)
    write_json(path, setup, runs, storage)
    print_table(out, setup, runs)
    drawn = draw_chart(path, out) if any(r.levels for r in runs) else False
    out.print(f"figures: {escape(str(path))}")
    return 0 if drawn and all(r.error is None for r in runs) else 1


@command(parse_args, interrupted=True)
def main(args: TransferArgs) -> int:
    out = Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 250)
    return _transfer(args, out)
