"""A serving study's claims of goodput on the console: what ``python -m sweep.claims`` and ``sweep.run`` print for
a promotion whose plan carries an SLO (``sweep.claims._serving``)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sweep.claims._evidence import StudyClaims
from sweep.claims._print import odds_text, row_mark
from sweep.claims._serving import ServingClaim, held_load
from sweep.judgement import MaxLoad, Slo

__all__ = ["held_loads", "print_serving_claims", "serving_outcome"]


def _table(
    view: StudyClaims,
    claims: Sequence[tuple[str, ServingClaim]],
    *,
    slo: Slo,
    knobs: Sequence[str],
    title: str,
    odds: str,
    screening: bool,
) -> Table:
    table = Table(title=escape(title), title_justify="left")
    head = ["trial", "role", *knobs, "level", "boots", "goodput req/s", "re-run 90%", "SLO figures (median)"]
    for column in [*head, "SLO ratio (90%)", odds, "P, within its run", "P ceiling", "PPL", ""]:
        table.add_column(column, justify="left" if column in ("role", "level", "", *knobs) else "right")
    for role, c in claims:
        table.add_row(
            str(c.trial_number),
            role,
            *(str(view.knobs[c.trial_number].get(k, "")) for k in knobs),
            *c.level_cells(slo),
            odds_text(c.p_verified),
            odds_text(c.p_within_run),
            c.ceiling_text(),
            f"{c.ppl:.4f}",
            row_mark(view, c, recommended=view.serving_recommended, screening=screening) if role != "control" else "",
        )
    return table


def held_loads(view: StudyClaims) -> dict[int, MaxLoad | None]:
    """The highest load each promoted configuration holds under the plan's SLO, from its promotion's and
    confirmation's boots (each level decided over them: ``held_load``); None where fewer than two boots measured
    every level."""
    slo = view.plan.slo
    if slo is None:
        return {}
    boots = [*view.boots, *(view.confirmation.boots if view.confirmation else ())]
    return {trial: held_load(boots, trial, slo) for trial in view.plan.trials}


def _held_text(trial: int, found: MaxLoad | None) -> str:
    if found is None:
        return f"trial {trial}: fewer than two boots measured every level: no highest load"
    tested = ", ".join(
        f"c{v.concurrency} {'held' if v.holds else 'missed'} (upper {v.upper:.2f} over {len(v.ratios)} boots)"
        for v in found.verdicts
    )
    held = "none of its levels" if found.concurrency is None else f"{found.concurrency} in flight"
    return f"trial {trial} holds up to {held} under the SLO ({tested})"


def _outcome(view: StudyClaims, slo: Slo) -> str:
    unfinished = view.unfinished()
    chosen = view.confirmation.serving.get(view.confirmation.plan.chosen) if view.confirmation else None
    if unfinished is not None:
        return f"{unfinished}: nothing is recommended until it is; the same sweep.run command goes on"
    if chosen is None:
        return "no serving claim: nothing was confirmed (no confirmation is planned for this promotion)"
    verdict = (
        "recommended"
        if view.serving_recommended is chosen
        else f"not recommended (under the target {view.target:g}"
        + (", over the gate)" if chosen.ppl_over_gate else ")")
    )
    return (
        f"serving claim: trial {chosen.trial_number}, goodput {chosen.goodput:.3f} req/s at {chosen.workload} "
        f"({chosen.concurrency} in flight; 90% interval of a re-run {chosen.interval_text()}), "
        f"{chosen.figures_text(slo)}; P that a re-run on another machine meets {slo.text()} at that load "
        f"{odds_text(chosen.p_verified)} over {chosen.boots} confirming boots: {verdict}"
    )


def serving_outcome(view: StudyClaims) -> tuple[list[str], str]:
    """A serving promotion's ending as plain text, for the console and the exports alike: the highest load each
    promoted configuration holds under the SLO (one line each), and the claim, recommended or why not."""
    slo = view.plan.slo
    assert slo is not None  # a promotion of TPS has no claim of goodput
    return [_held_text(trial, found) for trial, found in held_loads(view).items()], _outcome(view, slo)


def print_serving_claims(out: Console, view: StudyClaims, *, knobs: Sequence[str], study: str) -> None:
    """A serving promotion's claims of goodput (screening), its choice's confirmation (the claim to act on), the
    machine terms its odds carry, the highest load each configuration holds, and what is recommended."""
    slo = view.plan.slo
    assert slo is not None  # the caller prints claims of TPS otherwise
    out.print(
        _table(
            view,
            [("", c) for c in sorted(view.serving.values(), key=lambda c: (-c.goodput, c.trial_number))],
            slo=slo,
            knobs=knobs,
            title=f"Screening: the serving promotion of {study} (run {view.run_id}: {len(view.boots)} of "
            f"{view.planned} boots, {len(view.failed)} failed; SLO {slo.text()}). Its odds are of a re-run within its "
            "own run and chose the point to confirm: no claim to act on",
            odds="P meets SLO, within its run (screening)",
            screening=True,
        )
    )
    confirmed = view.confirmation
    if confirmed is not None:
        plan = confirmed.plan
        roles = [("chosen" if n == plan.chosen else "control", confirmed.serving.get(n)) for n in plan.trials]
        out.print(
            _table(
                view,
                [(role, c) for role, c in roles if c is not None],
                slo=slo,
                knobs=knobs,
                title=f"Confirmation (run {plan.run_id}: {len(confirmed.boots)} of at most {plan.planned} fresh "
                "boots): the claim of goodput to act on, and the odds that a re-run on another machine meets the SLO "
                f"at that load with its PPL under the gate; target >= {view.target:g}",
                odds="P meets SLO, re-run on another machine",
                screening=False,
            )
        )
        chosen = confirmed.serving.get(plan.chosen)
        if chosen is not None and chosen.machine is not None and chosen.goodput_machine is not None:
            out.print(f"  the SLO ratio's {chosen.machine.describe()}", markup=False, soft_wrap=True)
            out.print(f"  the goodput's {chosen.goodput_machine.describe()}", markup=False, soft_wrap=True)
        if confirmed.stop is not None:
            out.print(f"  {confirmed.stop.describe()}", markup=False, soft_wrap=True)
    for c in view.best_serving().values():
        if c.unmeasured:
            out.print(f"  trial {c.trial_number}: {c.unmeasured}", markup=False)
    held, outcome = serving_outcome(view)
    out.print("the highest load each promoted configuration holds (the max-load search over its boots):")
    for line in held:
        out.print(f"  {line}", markup=False, soft_wrap=True)
    out.print(outcome, markup=False, soft_wrap=True)
