"""``python -m sweep.claims --study NAME``: the TPS to report for each promoted candidate, and its odds.

Prints, per candidate of the latest promotion (``sweep.claims.load_evidence``): its knobs, the boots its
figures rest on and their spread, the claim, the 90% interval of one private re-run, P(VERIFIED) and the
PPL with its boot-to-boot tolerance, then the recommended point: the highest claim whose P(VERIFIED)
reaches the study's target, under the gate; then where each candidate's noise is (``sweep.claims.decompose``:
boot, run, prompt, request, streaks within a run, the stack's step time and acceptance, migrations, steal).
A serving study's promotion prints its claims of goodput instead (``sweep.claims.print_serving_claims``): the
goodput at each configuration's chosen level, its interval, the odds that a re-run on another machine meets the SLO
at that load, the highest load each holds, and the confirmed claim, recommended or not.

Exit status: 0 a point is recommended (a serving study's: its claim of goodput), 1 none is (none reaches the
target, or the promotion is not finished), 2 bad input (no such database or study, or no promotion yet).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from rich.console import Console

from cli import command
from errors import NoCompletedTrialsError

__all__ = ["main"]


@dataclass(frozen=True, kw_only=True)
class ClaimsArgs:
    study: str
    storage: str


def _main(args: ClaimsArgs, out: Console) -> int:
    from sweep.claims import load_evidence, print_claims, print_noise, print_serving_claims
    from sweep.store import open_existing

    storage = open_existing(args.storage)
    try:
        evidence = load_evidence(storage, args.study)
    finally:
        storage.close()
    view = evidence.claims
    if view is None:
        raise NoCompletedTrialsError(
            f"study {args.study!r} has no promotion yet: `python -m sweep.run --study "
            f"{args.study}` promotes its best configurations when its search ends"
        )
    varying = sorted(
        k
        for k in {k for kn in view.knobs.values() for k in kn}
        if len({repr(kn.get(k)) for kn in view.knobs.values()}) > 1
    )
    if view.plan.slo is not None:  # a serving study's claims are of goodput under its SLO
        print_serving_claims(out, view, knobs=varying, study=args.study)
        return 0 if view.serving_recommended is not None else 1
    print_claims(out, view, knobs=varying, study=args.study)
    print_noise(out, view)
    return 0 if view.recommended is not None else 1


def _parse(argv: list[str] | None) -> ClaimsArgs:
    from sweep.store import DEFAULT_STORAGE_URL

    parser = argparse.ArgumentParser(prog="python -m sweep.claims", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="the study's name")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    ns = parser.parse_args(argv)
    return ClaimsArgs(study=ns.study, storage=ns.storage)


@command(_parse)
def main(args: ClaimsArgs) -> int:
    return _main(args, Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200))
