"""A study's claims as markdown, for the optuna-dashboard note and ``best/README.md`` alike.

Two tables, as ``python -m sweep.claims`` prints them: the promotion's (screening figures, within its run: they
chose the point to confirm) and its choice's confirmation (the claim to act on, with the odds of the
organisers' re-run and the machine term they assume, the P where their machine reads a known 1-8% from yours
and the P ceiling boots without end would give), then what is recommended.
"""

from __future__ import annotations

from collections.abc import Callable

from sweep.claims import MACHINE_TERMS, Claim, StudyClaims

__all__ = ["claims_lines"]


def claims_lines(view: StudyClaims, *, state: Callable[[int], str] | None = None) -> list[str]:
    """The claims' markdown lines; ``state``: a last column for each trial (its verification, say)."""
    extra = ["verification"] if state else []
    head = ["trial", "boots", "claim", "private re-run 90%", "P(VERIFIED)", "PPL ± tol", *extra]
    rule = "|" + "---|" * len(head)
    lines = [
        "",
        f"### Screening: promotion {view.run_id}, {len(view.boots)} of {view.planned} fresh boots at profile "
        f"{view.profile}",
        "",
        "Odds of a re-run within the promotion's own run: they chose the point to confirm and are no claim to act on.",
        "",
        *(
            [f"**Unfinished**: {view.unfinished()}; nothing is recommended until it is.", ""]
            if view.unfinished()
            else []
        ),
        "| " + " | ".join(head) + " |",
        rule,
        *(_row(c, mark="", state=state) for c in view.claims),
    ]
    confirmed = view.confirmation
    if confirmed is not None:
        lines += [
            "",
            f"### Confirmation: run {confirmed.plan.run_id}, {len(confirmed.boots)} of {confirmed.plan.planned} "
            "fresh boots: the claim to act on",
            "",
            f"P(VERIFIED) is of the organisers' re-run, a later run on another machine: {confirmed.machine.describe()}.",
            "Where their machine is known to read 1-8% from yours, read the column of that term; the ceiling is the P "
            "that boots without end would give (< : under the target, more boots buy nothing).",
            "",
            "| " + " | ".join([*head[:5], *_AT_MACHINE, "P ceiling", *head[5:]]) + " |",
            "|" + "---|" * (len(head) + len(_AT_MACHINE) + 1),
        ]
        for n in confirmed.plan.trials:
            c = confirmed.claims.get(n)
            if c is not None:
                role = " (chosen)" if n == confirmed.plan.chosen else " (control)"
                mark = role + (" **recommended**" if view.recommended is c else "")
                lines.append(_row(c, mark=mark, state=state, confirmed=True))
    return lines


_AT_MACHINE = [f"P, machine {sd:.0%}" for sd in MACHINE_TERMS]


def _row(c: Claim, *, mark: str, state: Callable[[int], str] | None, confirmed: bool = False) -> str:
    at = dict(c.p_at_machine)
    odds = [*(f"{at[sd]:.2f}" if sd in at else "-" for sd in MACHINE_TERMS), c.ceiling_text()] if confirmed else []
    cells = [
        f"{c.trial_number}{mark}",
        str(c.boots),
        f"{c.claim:.2f}",
        c.rerun_text(),
        c.odds_text(),
        *odds,
        f"{c.ppl:.4f} ± {c.ppl_tol:.4f}",
        *([state(c.trial_number)] if state else []),
    ]
    return "| " + " | ".join(cells) + " |"
