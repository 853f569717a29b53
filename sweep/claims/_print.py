"""The claims as a table on the console: what ``python -m sweep.claims`` and ``sweep.run`` print."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.claims._claim import Claim
from sweep.claims._evidence import StudyClaims
from sweep.claims._noise import decompose
from sweep.claims._verdict import Verdict

__all__ = ["print_claims", "print_noise", "print_verdicts"]


def _spread(values: Sequence[float]) -> str:
    return f"{min(values):.1f}..{max(values):.1f}" if values else "-"


def _odds(p: float | None) -> str:
    return "-" if p is None else f"{p:.2f}"


def _mark(view: StudyClaims, c: Claim) -> str:
    if view.recommended is c:
        return "[green]recommended[/]"
    if view.gate is None:
        return "[yellow]no gate yet[/]"
    if c.ppl_over_gate:
        return "[red]over the gate[/]"
    if c.p_verified is None:
        return "[yellow]noise not measured[/]"
    return "" if c.meets else "[yellow]below target[/]"


def print_claims(out: Console, view: StudyClaims, *, knobs: Sequence[str], study: str) -> None:
    """The claims table, then what its figures rest on and what is recommended."""
    out.print(_claims_table(view, knobs=knobs, study=study))
    _print_basis(out, view)
    _print_outcome(out, view)


def _claims_table(view: StudyClaims, *, knobs: Sequence[str], study: str) -> Table:
    f = view.fit
    title = (
        f"Claims of {study} (promotion {view.run_id}, profile {view.profile}: {len(view.boots)} of {view.planned} "
        f"boots, {len(view.failed)} failed; target P(VERIFIED) >= {view.target:g}"
        + ("" if view.gate is None else f", gate {view.gate:.4f}")
        + ")"
    )
    table = Table(title=escape(title), title_justify="left")
    later = view.between is not None
    head = [
        "trial",
        *knobs,
        "boots",
        "public TPS (boots)",
        "held-out TPS (boots)",
        "one boot / one run",
        "claim",
        "re-run 90%",
        "P(VERIFIED)",
        *(["P, a later run"] if later else []),
        "PPL ± tol",
        "",
    ]
    for column in head:
        table.add_column(column, justify="left" if column in ("", *knobs) else "right")
    for c in view.claims:
        level = f.levels[c.trial_number]
        own = "" if f.shared else " (own)"
        table.add_row(
            str(c.trial_number),
            *(str(view.knobs[c.trial_number].get(k, "")) for k in knobs),
            str(c.boots),
            _spread(level.public_tps),
            _spread(level.heldout_tps),
            f"{c.spread.sigma_boot:.1%} / {c.spread.sigma_run:.1%}{own}",
            f"{c.claim:.2f}",
            "-" if c.rerun_low is None else f"{c.rerun_low:.1f}..{c.rerun_high:.1f}",
            _odds(c.p_verified),
            *([_odds(c.p_later)] if later else []),
            f"{c.ppl:.4f} ± {c.ppl_tol:.4f}",
            _mark(view, c),
        )
    return table


def _print_basis(out: Console, view: StudyClaims) -> None:
    """What the odds rest on: the noise pooled or not, the client, the spread between runs."""
    f = view.fit
    p = f.pooled
    out.print(
        f"noise over these boots: one boot's TPS {p.sigma_boot:.1%}, one run's {p.sigma_run:.1%} (pooled, "
        f"{p.df_y:g} and {p.df_d:g} degrees of freedom; floor {f.floor:.0%}); "
        + (
            "every configuration is judged by this pooled noise"
            if f.shared
            else "the configurations' noise differs (Bartlett's test), so each is judged by its own boots"
        )
        + f"; a boot's second run reads {f.gamma:+.1%} faster; PPL {f.ppl_sd:.3%} from boot to boot",
        markup=False,
    )
    for c in view.claims:
        if c.unmeasured:
            out.print(f"  trial {c.trial_number}: {c.unmeasured}", markup=False)
    out.print(
        "client: the boots were timed by this project's client and the private re-run is timed by the organisers'; "
        + (
            f"{view.offset.describe()}, carried into the re-run interval and the odds"
            if view.offset
            else "how far apart the two read is not measured for this study (python -m benchmarks.harness_agreement "
            "--study measures it), so the odds assume they agree"
        ),
        markup=False,
    )
    spread = view.between
    out.print(
        "P(VERIFIED) is for a re-run within the promotion's run of boots: no later run of these configurations at this "
        "profile is stored, so how far a later run (another hour, another lease, the organisers' machine) moves is not "
        "measured; sweep.verify or benchmarks.claim_calibration adds runs"
        if spread is None
        else f"between runs: {spread.describe()}; 'P, a later run' is P(VERIFIED) for a re-run in another run, the "
        "claim resting on the promotion's",
        markup=False,
    )


def _print_outcome(out: Console, view: StudyClaims) -> None:
    """What is recommended, and the boots that failed."""
    unfinished = view.unfinished()
    if unfinished is not None:
        out.print(f"{unfinished}: nothing is recommended until it is; the same sweep.run command goes on", markup=False)
    elif view.recommended is None:
        out.print(
            f"no candidate reaches P(VERIFIED) >= {view.target:g} under the gate: none is recommended", markup=False
        )
    else:
        r = view.recommended
        out.print(
            f"recommended: trial {r.trial_number}, claim {r.claim:.2f} tok/s over {r.boots} boots (its public level "
            f"{r.public:.2f}), P(VERIFIED) {r.p_verified:.2f}",
            markup=False,
        )
    for b in view.failed:
        out.print(f"  boot {(b.order or 0) + 1} of trial {b.trial_number} failed: {b.reason}", markup=False)


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}%}"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_noise(out: Console, view: StudyClaims) -> None:
    """Each candidate's noise taken apart (``sweep.claims.decompose``), from its boots' telemetry."""
    table = Table(
        title="Where the noise is (each candidate on its own boots; log-scale spreads as percentages)",
        title_justify="left",
    )
    head = [
        "trial",
        "boots x runs",
        "one boot",
        "one run",
        "prompt",
        "request",
        "streaks (lag-1)",
        "10 s windows",
        "step ms (cv)",
        "acceptance (cv)",
        "migrations / run",
        "steal",
    ]
    for column in head:
        table.add_column(column, justify="right")
    for n in decompose(view.boots):
        table.add_row(
            str(n.trial_number),
            f"{n.boots} x {n.runs}",
            f"{n.boot:.1%}",
            f"{n.run:.1%}",
            _pct(n.prompt),
            _pct(n.request),
            _num(n.lag1, ".2f"),
            _pct(n.window_cv),
            "-" if n.step_ms is None else f"{n.step_ms:.3f} ({_pct(n.step_cv)})",
            "-" if n.acceptance is None else f"{n.acceptance:.4f} ({_pct(n.acceptance_cv, 2)})",
            _num(n.migrations, ".0f"),
            _pct(n.steal),
        )
    out.print(table)


def print_verdicts(
    out: Console, verdicts: list[Verdict], *, knobs: dict[int, dict[str, Any]], swept: list[str], title: str
) -> None:
    """One row per trial, then each INVALID verdict's reasons in full (they are long)."""
    table = Table(title=title, title_justify="left")
    columns = [
        "trial",
        *swept,
        "claimed TPS",
        "held-out TPS min/med/max",
        "gap (90% interval)",
        "P(a re-run within 5%)",
        "public gap",
        "PPL",
        "gate",
        "verdict",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column == "verdict" else "right")
    colour = {"VERIFIED": "green", "INVALID": "red", "UNDECIDED": "yellow"}
    for v in verdicts:
        spread = "-" if v.tps_median is None else f"{v.tps_min:.2f}/{v.tps_median:.2f}/{v.tps_max:.2f}"
        gap = "-" if v.tps_gap_pct is None else f"{v.tps_gap_pct:+.1f}%"
        if v.gap_low_pct is not None:
            gap += f" ({v.gap_low_pct:+.1f}..{v.gap_high_pct:+.1f})"
        table.add_row(
            str(v.trial_number),
            *(str(knobs[v.trial_number].get(k, "")) for k in swept),
            f"{v.claimed_tps:.2f}",
            spread,
            gap,
            "-" if v.p_rerun is None else f"{v.p_rerun:.2f}",
            "-" if v.public_gap_pct is None else f"{v.public_gap_pct:+.1f}%",
            "-" if v.ppl_median is None else f"{v.ppl_median:.4f}",
            "-" if v.gate is None else f"{v.gate:.4f}",
            f"[{colour[v.verdict]}]{v.verdict}[/]",
        )
    out.print(table)
    for v in verdicts:
        if v.reasons:
            out.print(f"  trial {v.trial_number} [red]INVALID[/]: {escape(v.reason)}")
        elif v.undecided:
            out.print(f"  trial {v.trial_number} [yellow]UNDECIDED[/]: {escape(v.undecided)}")
