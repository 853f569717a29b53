"""What a sweep prints: a live progress line, one line per finished trial, then the front.

On a terminal the progress line (done / running / failed, best feasible TPS, front size,
elapsed, ETA) stays at the bottom and redraws; elsewhere (CI, a log file) only the event lines
and the final table are printed, so a log reads top to bottom.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from engine.config import KnobValues
from sweep.judgement import (
    Noise,
    Slo,
    Z,
    front_point,
    front_records,
    front_ties,
    level_goodput,
    serving_front,
)
from sweep.store import TrialRecord

__all__ = ["Progress", "SweepConsole"]


@dataclass(frozen=True, kw_only=True)
class Progress:
    budget: int
    done: int  # trials that ended for good (complete + pruned + failed)
    complete: int  # gate-stopped ones included (told with their probe, infeasible)
    failed: int
    running: int
    best_tps: float | None  # fastest feasible trial so far
    front_size: int
    elapsed_s: float
    eta_s: float | None
    pruned: int = 0  # stopped by multi-fidelity's front rule
    gate_stopped: int = 0  # stopped by the PPL gate after a TPS probe
    unbooted: int = 0  # closed without a boot (sweep.search: a known failure, a copy, a PPL-memo hit); not in done


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _spread(record: TrialRecord) -> str:
    """' (of R runs, CV x%)' when the profile repeated the TPS run, else nothing."""
    cv = record.metric("tps_cv")
    return "" if cv is None else f" (of {len(record.metric('tps_runs'))} runs, CV {cv:.1%})"


def _bucket_ppl(record: TrialRecord, end: int) -> str:
    bucket = record.figures.length_bucket(end)
    return "-" if bucket is None else f"{bucket.ppl:.4f}"


class SweepConsole:
    def __init__(self, console: Console | None = None) -> None:
        self.out = console or Console(highlight=False)
        self._live: Live | None = None
        self._last_done = 0  # a log's first progress line comes with the first finished trial

    # --- the run ----------------------------------------------------------------------

    def begin(self, *, study: str, manifest: str, gate: str, budget: int, workers: int, db: str, fidelity: str) -> None:
        self.out.print(
            f"[bold]study {escape(study)}[/]: manifest {escape(manifest)}, gate {gate}, budget {budget} trials, "
            f"{workers} worker(s); database {escape(db)}"
        )
        self.out.print(f"  {escape(fidelity)}")
        if self.out.is_terminal:
            self._live = Live(Text(""), console=self.out, refresh_per_second=2, transient=True)
            self._live.start()

    def note(self, message: str) -> None:
        self.out.print(escape(message))

    def started(self, number: int, knobs: KnobValues, *, baseline: bool) -> None:
        label = "baseline " if baseline else ""
        self.out.print(f"  trial {number}: {label}started  {escape(knobs.text(sorted(knobs)))}")

    def finished(self, record: TrialRecord, *, requeued: bool, slo: Slo | None = None) -> None:
        head = f"  trial {record.trial_number}: "
        m = record.measurement
        if record.reused:
            kind = "copy" if record.reuse == "copy" else "PPL memo"
            self.out.print(
                f"{head}[cyan]not booted[/] ({kind} of trial {record.source}): {escape(record.reason or '')}"
            )
        elif record.status == "pruned" and m is not None:
            self.out.print(
                f"{head}[cyan]PRUNED[/] after {m.prompts_timed} of {m.num_prompts} prompts: "
                f"TPS {m.tps:.2f} (partial)  PPL {m.ppl:.4f}"
            )
            self.out.print(f"    {escape(record.reason or '')}")
        elif record.gate_stopped and m is not None:
            gate = "" if record.gate is None else f"  gate {record.gate:.4f}"
            self.out.print(
                f"{head}TPS {m.tps:.2f} (probe: {m.prompts_timed} of {m.num_prompts} prompts)  "
                f"PPL {m.ppl:.4f}{gate}  [yellow]infeasible: stopped at the gate[/]"
            )
        elif record.measured:
            gate = "" if record.gate is None else f"  gate {record.gate:.4f}"
            mark = "feasible" if record.feasible else "[yellow]infeasible[/]"
            identity = ""
            if record.identity_diff_prompts is not None:
                n = record.identity_diff_prompts
                identity = "  greedy identical" if n == 0 else f"  [red]greedy output differs on {n} prompt(s)[/]"
            boot = record.timings.get("boot")
            booted = "" if boot is None else f"  (boot {boot:.1f} s)"
            repeat = "" if record.reuse != "repeat" else f"  (repeat of trial {record.source})"
            self.out.print(
                f"{head}TPS {record.tps:.2f}{_spread(record)}  PPL {record.ppl:.4f}{gate}  {mark}{identity}"
                f"{booted}{repeat}"
            )
            self._lengths(record)
            self._serving(record, slo)
        else:
            again = "; re-queued" if requeued else ""
            self.out.print(f"{head}[red]FAILED[/] ({record.fail_kind}): {escape(record.reason or '')}{again}")
            # The stack's own last words (a Python exception, usually) name the cause without
            # a trip to the log file.
            last = next((line.strip() for line in reversed(record.log_tail.splitlines()) if line.strip()), "")
            if last:
                self.out.print(f"    last log line: {escape(last)}")
        held = record.node.get("gpu_held_after_stop_mib")
        if held:
            where = ", ".join(f"GPU {gpu}: {mib} MiB" for gpu, mib in held.items())
            self.out.print(f"    [yellow]its stack left GPU memory held after it stopped ({where})[/]")

    def _lengths(self, record: TrialRecord) -> None:
        """Its PPL by context length over the profile's long texts (engine.measurement), where it scored them."""
        buckets = record.figures.ppl_lengths
        if not buckets:
            return
        cells = "  ".join(f"{b.label} {b.ppl:.4f} ({b.tokens} tokens)" for b in buckets)
        limit = "" if record.length_gate is None else f"  length gate {record.length_gate:.4f}"
        self.out.print(f"    PPL by context length: {cells}{limit}")

    def _serving(self, record: TrialRecord, slo: Slo | None) -> None:
        """Its serving load, a line a level (one boot, one run each), judged under a serving study's SLO."""
        m = record.measurement
        for level in m.load if m is not None else []:
            judged = ""
            if slo is not None:
                held = "held" if slo.holds(level) else "[yellow]missed[/]"
                judged = f"  goodput {level_goodput(level, slo):.2f} req/s, SLO ({slo.text()}) {held}"
            self.out.print(
                f"    load {level.workload} ({len(level.requests)} requests, one run): {level.output_tps:.2f} "
                f"output tok/s, {level.requests_per_s:.2f} req/s, p99 TTFT {level.ttft_ms.p99:.0f} ms, "
                f"p99 ITL {level.itl_ms.p99:.0f} ms{judged}"
            )
        rss = (m.telemetry.get("stack") or {}).get("rss_peak_mib") if m is not None else None
        if m is not None and m.load and rss:
            self.out.print(f"    the stack's resident memory at its peak in the timed runs: {rss:.0f} MiB")

    def progress(self, p: Progress) -> None:
        best = "-" if p.best_tps is None else f"{p.best_tps:.2f}"
        stopped = f"pruned {p.pruned}  gate-stopped {p.gate_stopped}  " if p.pruned or p.gate_stopped else ""
        stopped += f"not booted {p.unbooted}  " if p.unbooted else ""
        line = (
            f"done {p.done}/{p.budget}  running {p.running}  failed {p.failed}  {stopped}"
            f"best feasible TPS {best}  front {p.front_size}  "
            f"elapsed {_duration(p.elapsed_s)}  ETA {_duration(p.eta_s)}"
        )
        if self._live is not None:
            self._live.update(Text(line))
        elif p.done != self._last_done:  # a log gets the line once per finished trial
            self.out.print(f"  ({line})")
        self._last_done = p.done

    def end(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # --- the result -------------------------------------------------------------------

    def front(
        self,
        records: Sequence[TrialRecord],
        *,
        knobs: Sequence[str],
        title: str,
        noise: Noise | None = None,
        claims: Mapping[int, str] | None = None,
    ) -> None:
        """The front, fastest first; with ``noise``, its points that cannot be told apart are marked as
        one tie group each (``sweep.judgement.front_ties``), not as trade-offs; with ``claims`` (a trial's claim
        and its odds as the claims' side words them), a promoted point shows the figure a re-run reproduces,
        beside the search's one boot."""
        front = front_records(records, noise)
        groups: dict[int, int] = {}
        if noise is not None:
            points = [front_point(r, noise) for r in front]
            tied = [g for g in front_ties(points) if len(g) > 1]
            groups = {p.number: i for i, g in enumerate(tied, start=1) for p in g}
        table = Table(title=escape(title), title_justify="left")
        table.add_column("trial", justify="right")
        if groups:
            table.add_column("tie", justify="right")
        for knob in knobs:
            table.add_column(knob, justify="right")
        spread = any(r.metric("tps_cv") is not None for r in front)
        claims = claims or {}
        # each length bucket any front point scored, by where it ends: PPL by context length beside the gate's PPL
        lengths = {b.end: b.label for r in front for b in r.figures.ppl_lengths}
        for column in (
            "TPS",
            *(["TPS CV"] if spread else []),
            *(["claim (P(VERIFIED))"] if claims else []),
            "PPL",
            *(f"PPL {label}" for _, label in sorted(lengths.items())),
            "gate margin",
            "greedy identity",
        ):
            table.add_column(column, justify="right")
        for r in front:
            ppl = r.figures.ppl
            margin = "" if r.gate is None else f"{r.gate - ppl:+.4f} ({(r.gate - ppl) / r.gate:+.1%})"
            identity = (
                "baseline"
                if r.is_baseline
                else "-"
                if r.identity_diff_prompts is None
                else "same"
                if r.identity_diff_prompts == 0
                else f"differs ({r.identity_diff_prompts})"
            )
            cells = [str(r.knobs.get(k, "")) for k in knobs]
            cv = [] if not spread else ["-" if r.metric("tps_cv") is None else f"{r.metric('tps_cv'):.1%}"]
            tie = [f"{groups[r.trial_number]}" if r.trial_number in groups else ""] if groups else []
            claim = [claims.get(r.trial_number, "-")] if claims else []
            by_length = [_bucket_ppl(r, end) for end in sorted(lengths)]
            table.add_row(
                str(r.trial_number),
                *tie,
                *cells,
                f"{r.tps:.2f}",
                *cv,
                *claim,
                f"{r.ppl:.4f}",
                *by_length,
                margin,
                identity,
            )
        if not front:
            self.out.print(f"{escape(title)}: no feasible measured trial yet")
            return
        self.out.print(table)
        if noise is not None:
            self.out.print(
                f"  one boot's TPS moves {noise.tps_sd:.1%} and its PPL {noise.ppl_sd:.3%} ({escape(noise.basis)}): "
                f"points closer than {Z:g} deviations of that in both are ties"
                + (", numbered alike in column 'tie'" if groups else "")
            )

    def serving_front(self, records: Sequence[TrialRecord], *, knobs: Sequence[str], slo: Slo) -> None:
        """A serving study's front: goodput at each trial's best level against PPL, under the gate and the SLO, by
        the one front rule (one boot, one run a level: no noise model), the most goodput first."""
        front = serving_front(records, slo)
        if not front:
            self.out.print(f"serving front: no trial held the SLO ({escape(slo.text())}) under the gate")
            return
        table = Table(
            title=escape(f"Serving front: goodput under {slo.text()}, PPL under the gate (one boot, one run a level)"),
            title_justify="left",
        )
        for name in ["trial", *knobs, "level", "goodput req/s", "output tok/s", f"p{slo.percentile} TTFT ms", "PPL"]:
            table.add_column(name, justify="right")
        for r, s in front:
            level = next(x for x in r.figures.load if x.workload == s.level)
            cells = [str(r.knobs.get(k, "")) for k in knobs]
            table.add_row(
                str(r.trial_number),
                *cells,
                s.level,
                f"{s.goodput:.3f}",
                f"{level.output_tps:.2f}",
                f"{level.ttft_ms.at(slo.percentile):.0f}",
                f"{r.figures.ppl:.4f}",
            )
        self.out.print(table)

    def summary(self, p: Progress, *, db: str) -> None:
        gated = f" ({p.gate_stopped} stopped at the PPL gate)" if p.gate_stopped else ""
        pruned = f", {p.pruned} pruned" if p.pruned else ""
        unbooted = f", {p.unbooted} closed without a boot" if p.unbooted else ""
        self.out.print(
            f"{p.complete} complete{gated}{pruned}, {p.failed} failed{unbooted}, {_duration(p.elapsed_s)} elapsed. "
            f"Database: {escape(db)}  (browse: optuna-dashboard {escape(db)})"
        )
