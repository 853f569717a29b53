"""``python -m sweep.claims --study NAME``: the TPS to report for each promoted candidate, and its odds.

A promotion (``sweep.promotion``) re-measures a study's best configurations over interleaved fresh
boots at the organisers' profile and stores every boot; its plan is the study's user attribute
``promotion``. This module turns the latest promotion's boots into claims (``sweep.estimate``:
the model and the estimator are stated there) and prints, per candidate: its knobs, the boots its
figures rest on, the claim, the 90% interval of one private re-run, P(VERIFIED) and the PPL with
its boot-to-boot tolerance, then the recommended point: the highest claim whose P(VERIFIED)
reaches the study's target, under the gate.

Exit status: 0 a point is recommended, 1 none reaches the target, 2 bad input (no such database or
study, or no promotion yet).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from errors import ConfigError, NoCompletedTrialsError, StudyNotFoundError
from sweep.boots import BootRecord
from sweep.estimate import Between, Claim, Fit, best_claim, between_runs, claim_for, fit

__all__ = ["PROMOTION_ATTR", "StudyClaims", "claims_of", "main", "print_claims", "resolve_gate"]

PROMOTION_ATTR = "promotion"  # the study's user attribute holding the latest promotion's plan


@dataclass(frozen=True, kw_only=True)
class StudyClaims:
    run_id: str
    profile: str
    planned: int  # boots in the plan
    boots: list[BootRecord]  # stored so far, failed ones included
    fit: Fit
    between: Between | None  # the run-to-run spread, where later runs measured it
    claims: list[Claim]  # fastest claim first
    recommended: Claim | None
    gate: float | None
    target: float
    knobs: dict[int, dict[str, Any]]

    @property
    def failed(self) -> list[BootRecord]:
        return [b for b in self.boots if not b.measured]

    @property
    def complete(self) -> bool:
        return len(self.boots) >= self.planned


def resolve_gate(plan: dict[str, Any], boots: Sequence[BootRecord]) -> float | None:
    """The gate the promotion's PPLs are held to: absolute, the sweep's own (the promotion scores the
    sweep's references), or the ratio times the baseline's median PPL over its promotion boots."""
    gate = plan["gate"]
    if gate["kind"] in ("absolute", "sweep"):
        return gate["ppl"]
    ppls = [b.ppl for b in boots if b.trial_number == gate["trial"] and b.measured]
    return gate["ratio"] * statistics.median(ppls) if ppls else None  # type: ignore[type-var]


def _same_measure(a: BootRecord, b: BootRecord) -> bool:
    """Whether two boots' TPS read at one level: the same profile's sizes over the same prompts. The PPL
    references are not compared: a verification scores its own held-out set, and PPL plays no part in
    how far a level moves between runs."""
    return (a.profile, a.prompts, a.public_prompts) == (b.profile, b.prompts, b.public_prompts)


def claims_of(plan: dict[str, Any], boots: Sequence[BootRecord], later: Sequence[BootRecord] = ()) -> StudyClaims:
    """The claims of the promotion run ``plan`` describes, from the boots stored for it; ``later``: the study's
    other runs of boots (verifications, calibrations), whose runs of the promoted configurations at the
    promotion's profile and prompts measure how far a level moves from run to run (``Claim.p_later``)."""
    mine = [b for b in boots if b.run_id == plan["run_id"]]
    fitted = fit(mine, floor=plan["noise_floor"])
    gate = resolve_gate(plan, mine)
    promoted = {b.trial_number for b in mine}
    others = [
        b
        for b in later
        if b.run_id != plan["run_id"]
        and b.trial_number in promoted
        and b.first is not None
        and _same_measure(b, mine[0])
    ]
    between = between_runs([*mine, *others], floor=plan["noise_floor"]) if others else None
    claims = sorted(
        (claim_for(fitted, n, gate=gate, target=plan["target"], between=between) for n in fitted.levels),  # type: ignore[arg-type]
        key=lambda c: (-c.claim, c.trial_number),
    )
    knobs = {b.trial_number: b.knobs for b in mine}
    return StudyClaims(
        run_id=plan["run_id"],
        profile=plan["profile"]["name"],
        planned=len(plan["trials"]) * plan["boots"],
        boots=mine,
        fit=fitted,
        between=between,
        claims=claims,
        recommended=best_claim(claims),
        gate=gate,
        target=plan["target"],
        knobs=knobs,
    )


def _spread(values: Sequence[float]) -> str:
    return f"{min(values):.1f}..{max(values):.1f}" if values else "-"


def print_claims(out: Console, view: StudyClaims, *, knobs: Sequence[str], study: str) -> None:
    f = view.fit
    title = (
        f"Claims of {study} (promotion {view.run_id}, profile {view.profile}: {len(view.boots)} of {view.planned} "
        f"boots, {len(view.failed)} failed; target P(VERIFIED) >= {view.target:g}"
        + ("" if view.gate is None else f", gate {view.gate:.4f}")
        + ")"
    )
    table = Table(title=escape(title), title_justify="left")
    head = [
        "trial",
        *knobs,
        "boots",
        "public TPS (boots)",
        "held-out TPS (boots)",
        "claim",
        "re-run 90%",
        "P(VERIFIED)",
        *(["P, a later run"] if view.between else []),
        "PPL ± tol",
        "",
    ]
    for column in head:
        table.add_column(column, justify="left" if column in ("", *knobs) else "right")
    for c in view.claims:
        level = f.levels[c.trial_number]
        mark = (
            "[green]recommended[/]"
            if view.recommended is c
            else "[yellow]no gate yet[/]"
            if view.gate is None
            else "[red]over the gate[/]"
            if c.ppl_over_gate
            else ""
            if c.meets
            else "[yellow]below target[/]"
        )
        table.add_row(
            str(c.trial_number),
            *(str(view.knobs[c.trial_number].get(k, "")) for k in knobs),
            str(c.boots),
            _spread(level.public_tps),
            _spread(level.heldout_tps),
            f"{c.claim:.2f}",
            f"{c.rerun_low:.1f}..{c.rerun_high:.1f}",
            f"{c.p_verified:.2f}",
            *([] if c.p_later is None else [f"{c.p_later:.2f}"]),  # measured for every claim, or for none
            f"{c.ppl:.4f} ± {c.ppl_tol:.4f}",
            mark,
        )
    out.print(table)
    out.print(
        f"noise over these boots: one boot's TPS {f.sigma_boot:.1%}, one run's {f.sigma_run:.1%} (pooled, {f.df} degrees of "
        f"freedom; floor {f.floor:.0%}); a boot's second run reads {f.gamma:+.1%} faster; PPL {f.ppl_sd:.3%} from boot "
        "to boot",
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
    if view.recommended is None:
        out.print(
            f"no candidate reaches P(VERIFIED) >= {view.target:g} under the gate: none is recommended", markup=False
        )
    else:
        r = view.recommended
        out.print(
            f"recommended: trial {r.trial_number}, claim {r.claim:.2f} tok/s (its public level {r.public:.2f}), "
            f"P(VERIFIED) {r.p_verified:.2f}",
            markup=False,
        )
    for b in view.failed:
        out.print(f"  boot {(b.order or 0) + 1} of trial {b.trial_number} failed: {b.reason}", markup=False)


@dataclass(frozen=True, kw_only=True)
class ClaimsArgs:
    study: str
    storage: str


def _main(args: ClaimsArgs, out: Console) -> int:
    import optuna

    from sweep.storage import open_existing
    from sweep.storage_url import shown_url

    storage = open_existing(args.storage)
    try:
        try:
            study = optuna.load_study(study_name=args.study, storage=storage.optuna)
        except KeyError:
            raise StudyNotFoundError(
                f"study {args.study!r} not found in {shown_url(args.storage)}: run the sweep first"
            ) from None
        plan = study.user_attrs.get(PROMOTION_ATTR)
        if plan is None:
            raise NoCompletedTrialsError(
                f"study {args.study!r} has no promotion yet: `python -m sweep.run --study "
                f"{args.study}` promotes its best configurations when its search ends"
            )
        view = claims_of(plan, storage.boots("promotion", args.study), storage.boots("verification", args.study))
    finally:
        storage.close()
    varying = sorted(
        k
        for k in {k for kn in view.knobs.values() for k in kn}
        if len({repr(kn.get(k)) for kn in view.knobs.values()}) > 1
    )
    print_claims(out, view, knobs=varying, study=args.study)
    if not view.complete:
        out.print(
            f"the promotion is not finished ({len(view.boots)} of {view.planned} boots): the same sweep.run command "
            "goes on with it",
            markup=False,
        )
    return 0 if view.recommended is not None else 1


def main(argv: list[str] | None = None) -> int:
    from sweep.storage import DEFAULT_STORAGE_URL

    parser = argparse.ArgumentParser(prog="python -m sweep.claims", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="the study's name")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    ns = parser.parse_args(argv)
    out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    try:
        return _main(ClaimsArgs(study=ns.study, storage=ns.storage), out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
