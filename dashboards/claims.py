"""A study's claims as markdown, for the optuna-dashboard note and ``best/README.md`` alike.

Two tables, as ``python -m sweep.claims`` prints them: the promotion's (screening figures, within its run: they
chose the point to confirm) and its choice's confirmation (the claim to act on, with the odds of the
organisers' re-run and the machine term they assume, the P where their machine reads a known 1-8% from yours
and the P ceiling boots without end would give), then what is recommended. A serving study's (its plan carries an
SLO) are its claims of goodput instead, as the console shows them: each configuration's chosen load level, its
goodput, the SLO ratio, the odds a re-run meets the SLO there, then the highest load each promoted configuration
holds and the claim, recommended or why not, in the console's words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from rich.text import Text

from sweep.claims import (
    MACHINE_TERMS,
    Candidate,
    Claim,
    ServingClaim,
    StudyClaims,
    odds_text,
    row_mark,
    serving_outcome,
)

__all__ = ["claims_lines"]


def claims_lines(view: StudyClaims, *, state: Callable[[int], str] | None = None) -> list[str]:
    """The claims' markdown lines; ``state``: a last column for each claim of TPS (its verification, say)."""
    if view.plan.slo is not None:
        return _serving_lines(view)
    extra = ["verification"] if state else []
    head = ["trial", "boots", "claim", "private re-run 90%", "P(VERIFIED)", "PPL ± tol", *extra]
    lines = [
        *_screening(view, ""),
        *_table(head, (_row(c, mark="", state=state) for c in view.claims)),
    ]
    confirmed = view.confirmation
    if confirmed is not None:
        lines += [
            *_confirmation(view, ""),
            f"P(VERIFIED) is of the organisers' re-run, a later run on another machine: {confirmed.machine.describe()}.",
            "Where their machine is known to read 1-8% from yours, read the column of that term; the ceiling is the P "
            "that boots without end would give (< : under the target, more boots buy nothing).",
            "",
        ]
        rows = []
        for n in confirmed.plan.trials:
            c = confirmed.claims.get(n)
            if c is not None:
                role = " (chosen)" if n == confirmed.plan.chosen else " (control)"
                mark = role + (" **recommended**" if view.recommended is c else "")
                rows.append(_row(c, mark=mark, state=state, confirmed=True))
        lines += _table([*head[:5], *_AT_MACHINE, "P ceiling", *head[5:]], rows)
    return lines


_AT_MACHINE = [f"P, machine {sd:.0%}" for sd in MACHINE_TERMS]


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A markdown table: its head, its rule, a line a row."""
    return ["| " + " | ".join(cells) + " |" for cells in [head, ["---"] * len(head), *rows]]


def _screening(view: StudyClaims, of: str) -> list[str]:
    """The screening table's heading: a claim of TPS's or of goodput's (``of``: what follows the boots)."""
    unfinished = view.unfinished()
    return [
        "",
        f"### Screening: promotion {view.run_id}, {len(view.boots)} of {view.planned} fresh boots at profile "
        f"{view.profile}{of}",
        "",
        "Odds of a re-run within the promotion's own run: they chose the point to confirm and are no claim to act on.",
        "",
        *([f"**Unfinished**: {unfinished}; nothing is recommended until it is.", ""] if unfinished else []),
    ]


def _confirmation(view: StudyClaims, of: str) -> list[str]:
    confirmed = view.confirmation
    assert confirmed is not None  # asked only where there is one
    return [
        "",
        f"### Confirmation: run {confirmed.plan.run_id}, {len(confirmed.boots)} of {confirmed.plan.planned} "
        f"fresh boots: the claim{of} to act on",
        "",
    ]


def _row(c: Claim, *, mark: str, state: Callable[[int], str] | None, confirmed: bool = False) -> list[str]:
    at = dict(c.p_at_machine)
    odds = [*(f"{at[sd]:.2f}" if sd in at else "-" for sd in MACHINE_TERMS), c.ceiling_text()] if confirmed else []
    return [
        f"{c.trial_number}{mark}",
        str(c.boots),
        f"{c.claim:.2f}",
        c.rerun_text(),
        c.odds_text(),
        *odds,
        f"{c.ppl:.4f} ± {c.ppl_tol:.4f}",
        *([state(c.trial_number)] if state else []),
    ]


def _serving_lines(view: StudyClaims) -> list[str]:
    """A serving study's claims of goodput: the screening, the confirmation, the highest loads and the claim."""
    slo = view.plan.slo
    assert slo is not None  # claims_lines asks only for a serving study's
    head = ["trial", "role", "level", "boots", "goodput req/s", "re-run 90%", "SLO figures (median)", "SLO ratio (90%)"]
    # the odds: P(a re-run meets the SLO at that load) x P(its PPL under the gate), headed by the re-run they are of
    tail = ["P ceiling", "PPL", ""]
    screening = sorted(view.serving.values(), key=lambda c: (-c.goodput, c.trial_number))
    lines = [
        *_screening(view, f"; SLO {slo.text()}"),
        *_table(
            [*head, f"P(meets SLO) ({_basis(screening)})", *tail],
            (_serving_row(view, "", c, screening=True) for c in screening),
        ),
    ]
    confirmed = view.confirmation
    if confirmed is not None:
        plan = confirmed.plan
        roles = [("chosen" if n == plan.chosen else "control", confirmed.serving.get(n)) for n in plan.trials]
        claims = [(role, c) for role, c in roles if c is not None]
        chosen = confirmed.serving.get(plan.chosen)
        lines += _confirmation(view, " of goodput")
        if chosen is not None and chosen.machine is not None and chosen.goodput_machine is not None:
            lines += [
                "P(meets SLO) is of a re-run on another machine at that load, with its PPL under the gate; target "
                f">= {view.target:g}. The SLO ratio's {chosen.machine.describe()}; the goodput's "
                f"{chosen.goodput_machine.describe()}.",
                "",
            ]
        lines += _table(
            [*head, f"P(meets SLO) ({_basis([c for _, c in claims])})", *tail],
            (_serving_row(view, role, c, screening=False) for role, c in claims),
        )
        if confirmed.stop is not None:
            lines += ["", f"{confirmed.stop.describe()}."]
    unmeasured = [f"- trial {c.trial_number}: {c.unmeasured}" for c in view.best_serving().values() if c.unmeasured]
    held, outcome = serving_outcome(view)
    return [
        *lines,
        "",
        *([*unmeasured, ""] if unmeasured else []),
        "The highest load each promoted configuration holds (the max-load search over its boots):",
        "",
        *(f"- {line}" for line in held),
        "",
        f"**{outcome}**",
    ]


def _basis(claims: Sequence[ServingClaim]) -> str:
    """What a table's odds are of: one basis for all its rows (a screening's, or the confirmation's)."""
    return claims[0].basis if claims else "-"


def _serving_row(view: StudyClaims, role: str, c: ServingClaim, *, screening: bool) -> list[str]:
    slo = view.plan.slo
    assert slo is not None
    return [
        str(c.trial_number),
        role,
        *c.level_cells(slo),
        odds_text(c.p_verified),
        c.ceiling_text(),
        f"{c.ppl:.4f}",
        "" if role == "control" else _mark(view, c, screening=screening),
    ]


def _mark(view: StudyClaims, c: Candidate, *, screening: bool) -> str:
    """The console's row mark (``row_mark``) without its colour; recommended in bold."""
    mark = Text.from_markup(row_mark(view, c, recommended=view.serving_recommended, screening=screening)).plain
    return f"**{mark}**" if mark == "recommended" else mark
