"""The claims as a table on the console: what ``python -m sweep.claims`` and ``sweep.run`` print."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.claims._claim import Claim
from sweep.claims._confirm import Candidate
from sweep.claims._evidence import StudyClaims
from sweep.claims._fit import Fit
from sweep.claims._noise import decompose
from sweep.claims._verdict import Verdict
from sweep.store import ConfirmationPlan

__all__ = ["odds_text", "print_claims", "print_noise", "print_verdicts", "row_mark"]


def _spread(values: Sequence[float]) -> str:
    return f"{min(values):.1f}..{max(values):.1f}" if values else "-"


def odds_text(p: float | None) -> str:
    return "-" if p is None else f"{p:.2f}"


def row_mark(view: StudyClaims, c: Candidate, *, recommended: Candidate | None, screening: bool) -> str:
    """The last column of a claim's row (of TPS or of goodput): recommended, why not, or the screening's choice."""
    if recommended is c:
        return "[green]recommended[/]"
    if view.gate is None:
        return "[yellow]no gate yet[/]"
    if c.ppl_over_gate:
        return "[red]over the gate[/]"
    if c.p_verified is None:
        return "[yellow]noise not measured[/]"
    if screening and view.choice is not None and c.trial_number == view.choice[0]:
        return "chosen to confirm"
    return "" if c.meets else "[yellow]below target[/]"


def print_claims(out: Console, view: StudyClaims, *, knobs: Sequence[str], study: str) -> None:
    """The promotion's screening table, its choice's confirmation (the claim to act on), what the odds rest on,
    and what is recommended."""
    out.print(_screening_table(view, knobs=knobs, study=study))
    _print_noise_basis(out, view)
    _print_ceilings(out, view.claims)
    if view.confirmation is not None:
        out.print(_confirmation_table(view, knobs=knobs))
        out.print(f"  {view.confirmation.machine.describe()}", markup=False, soft_wrap=True)
        out.print(f"  {_BOUNDED}", markup=False, soft_wrap=True)
        _print_at_machine(out, view.confirmation.plan, view.confirmation.claims)
        stop, plan = view.confirmation.stop, view.confirmation.plan
        rounds = len(view.confirmation.boots) // len(plan.trials)
        going = (
            f"the confirmation goes on to its first {plan.boots} boot(s) of each before it decides ({rounds} so far)"
            if rounds < plan.boots
            else "the confirmation goes on: its P may still reach the target"
        )
        out.print(f"  {stop.describe() if stop else going}", markup=False, soft_wrap=True)
        _print_ceilings(out, list(view.confirmation.claims.values()))
    _print_assumptions(out)
    _print_client(out, view)
    _print_outcome(out, view)


def _columns(table: Table, knobs: Sequence[str], head: Sequence[str]) -> None:
    for column in head:
        table.add_column(column, justify="left" if column in ("", "role", *knobs) else "right")


def _cells(view: StudyClaims, c: Claim, *, fitted: Fit, knobs: Sequence[str]) -> list[str]:
    """A claim's cells: its boots, their spread, the claim and its re-run interval."""
    level = fitted.levels[c.trial_number]
    return [
        str(c.trial_number),
        *(str(view.knobs[c.trial_number].get(k, "")) for k in knobs),
        str(c.boots),
        _spread(level.public_tps),
        _spread(level.heldout_tps),
        f"{c.spread.sigma_boot:.1%} / {c.spread.sigma_run:.1%}" + ("" if fitted.shared else " (own)"),
        f"{c.claim:.2f}",
        c.rerun_text(),
    ]


_HEAD = ["boots", "public TPS (boots)", "held-out TPS (boots)", "one boot / one run", "claim", "re-run 90%"]
_CEILING = "P ceiling"
# what the confirmation's odds take the noise at (sweep.claims._fit: the law a decision is taken on)
_BOUNDED = (
    "the confirmation's odds take a boot's and a run's noise at the upper end of their 90% interval: a P its boots "
    "vouch for at 95% (where they are few it reads below the truth, and more boots lift it)"
)


def _screening_table(view: StudyClaims, *, knobs: Sequence[str], study: str) -> Table:
    title = (
        f"Screening: the promotion of {study} (run {view.run_id}, profile {view.profile}: {len(view.boots)} of "
        f"{view.planned} boots, {len(view.failed)} failed"
        + ("" if view.gate is None else f", gate {view.gate:.4f}")
        + "). Its odds are of a re-run within its own run and chose the point to confirm: they are no claim to act "
        "on (a point is chosen where its few boots read fast and steady)"
    )
    table = Table(title=escape(title), title_justify="left")
    _columns(table, knobs, ["trial", *knobs, *_HEAD, "P, within its run (screening)", _CEILING, "PPL ± tol", ""])
    for c in view.claims:
        table.add_row(
            *_cells(view, c, fitted=view.fit, knobs=knobs),
            odds_text(c.p_verified),
            c.ceiling_text(),
            f"{c.ppl:.4f} ± {c.ppl_tol:.4f}",
            row_mark(view, c, recommended=view.recommended, screening=c.machine is None),
        )
    return table


def _confirmation_table(view: StudyClaims, *, knobs: Sequence[str]) -> Table:
    confirmed = view.confirmation
    assert confirmed is not None  # print_claims asks only where there is one
    plan = confirmed.plan
    title = (
        f"Confirmation (run {plan.run_id}: {len(confirmed.boots)} of at most {plan.planned} fresh boots, each as the "
        "organisers' first boot of the folder starts): the claim to act on, and the odds of the organisers' re-run, "
        f"a later run on another machine; target P(VERIFIED) >= {view.target:g}"
    )
    table = Table(title=escape(title), title_justify="left")
    head = [
        "trial",
        "role",
        *knobs,
        *_HEAD,
        "P(VERIFIED), organisers' re-run",
        "P, within its run",
        _CEILING,
        "PPL ± tol",
        "",
    ]
    _columns(table, knobs, head)
    for n in plan.trials:
        c = confirmed.claims.get(n)
        if c is None:
            continue
        cells = _cells(view, c, fitted=confirmed.fit, knobs=knobs)
        role = "chosen" if n == plan.chosen else "control"
        table.add_row(
            cells[0],
            role,
            *cells[1:],
            odds_text(c.p_verified),
            odds_text(c.p_within_run),
            c.ceiling_text(),
            f"{c.ppl:.4f} ± {c.ppl_tol:.4f}",
            row_mark(view, c, recommended=view.recommended, screening=c.machine is None) if n == plan.chosen else "",
        )
    return table


def _print_noise_basis(out: Console, view: StudyClaims) -> None:
    """What the screening's noise is: pooled or not, the second run's warming, the PPL's spread."""
    f = view.fit
    p = f.pooled
    out.print(
        f"noise over the promotion's boots: one boot's TPS {p.sigma_boot:.1%}, one run's {p.sigma_run:.1%} (pooled, "
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


def _print_ceilings(out: Console, claims: Sequence[Claim]) -> None:
    """Each claim whose P no number of boots lifts to the target, at once, with the noise the target needs."""
    for c in claims:
        if c.ceiling is not None and not c.ceiling.reaches and not c.ppl_over_gate:
            out.print(f"  trial {c.trial_number}, P ceiling {c.ceiling.describe()}", markup=False, soft_wrap=True)


def _print_at_machine(out: Console, plan: ConfirmationPlan, claims: dict[int, Claim]) -> None:
    """The confirmed claims' P where the organisers' machine reads a known distance from yours."""
    for n in plan.trials:
        c = claims.get(n)
        if c is None or not c.p_at_machine:
            continue
        role = "chosen" if n == plan.chosen else "control"
        at = ", ".join(f"{sd:.0%} {p:.2f}" for sd, p in c.p_at_machine)
        out.print(
            f"  trial {n} ({role}), P(VERIFIED) at {c.claim:.2f} tok/s where the organisers' machine reads a known "
            f"distance from yours: {at} (with the machine term above: {odds_text(c.p_verified)})",
            markup=False,
            soft_wrap=True,
        )


def _print_assumptions(out: Console) -> None:
    out.print(
        f"{_CEILING}: the P infinitely many boots would give (the level known; the noise of a boot and a run, and the "
        "machine term where the odds carry one, stay), at the best claim; < under the target",
        markup=False,
        soft_wrap=True,
    )


def _print_client(out: Console, view: StudyClaims) -> None:
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


def _print_outcome(out: Console, view: StudyClaims) -> None:
    """What is recommended, and the boots that failed."""
    unfinished = view.unfinished()
    confirmed = view.confirmation.chosen if view.confirmation else None
    if unfinished is not None:
        out.print(f"{unfinished}: nothing is recommended until it is; the same sweep.run command goes on", markup=False)
    elif view.recommended is not None:
        r = view.recommended
        out.print(
            f"recommended: trial {r.trial_number}, claim {r.claim:.2f} tok/s over {r.boots} confirming boots (its public "
            f"level {r.public:.2f}), P(VERIFIED) of the organisers' re-run {r.p_verified:.2f}",
            markup=False,
        )
    elif confirmed is not None:
        out.print(
            f"not recommended: the confirmed claim of trial {confirmed.trial_number} reaches P(VERIFIED) "
            f"{odds_text(confirmed.p_verified)} for the organisers' re-run, under the target {view.target:g}"
            + (" (over the gate)" if confirmed.ppl_over_gate else ""),
            markup=False,
        )
    else:
        out.print("none is recommended: nothing was confirmed (no confirmation is planned for this promotion)")
    boots = [*view.boots, *(view.confirmation.boots if view.confirmation else ())]
    for b in boots:
        if not b.measured:
            out.print(
                f"  boot {(b.order or 0) + 1} of trial {b.trial_number} ({b.run_id}) failed: {b.reason}", markup=False
            )


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
