"""A study's claims as markdown, for the optuna-dashboard note and ``best/README.md`` alike.

Two tables, as ``python -m sweep.claims`` prints them: the promotion's (screening figures, within its run: they
chose the point to confirm) and its choice's confirmation (the claim to act on, with the odds of the
organisers' re-run and the machine term they assume), then what is recommended.
"""

from __future__ import annotations

from collections.abc import Callable

from sweep.claims import Claim, StudyClaims

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
            "",
            "| " + " | ".join(head) + " |",
            rule,
        ]
        for n in confirmed.plan.trials:
            c = confirmed.claims.get(n)
            if c is not None:
                role = " (chosen)" if n == confirmed.plan.chosen else " (control)"
                mark = role + (" **recommended**" if view.recommended is c else "")
                lines.append(_row(c, mark=mark, state=state))
    return lines


def _row(c: Claim, *, mark: str, state: Callable[[int], str] | None) -> str:
    cells = [
        f"{c.trial_number}{mark}",
        str(c.boots),
        f"{c.claim:.2f}",
        c.rerun_text(),
        c.odds_text(),
        f"{c.ppl:.4f} ± {c.ppl_tol:.4f}",
        *([state(c.trial_number)] if state else []),
    ]
    return "| " + " | ".join(cells) + " |"
