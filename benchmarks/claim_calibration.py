"""``python -m benchmarks.claim_calibration --study ctk``: does P(VERIFIED) say how often a re-run verifies?

A promoted and confirmed study (``python -m sweep.run``) claims a TPS for its recommended point
(``sweep.claims``: the confirmation's claim) and the probability that one private re-run of it (a fresh boot,
the harness's warm-up, the first timed run, on prompts nobody timed) lands within 5% of the claim with its
PPL under the gate. This boots that point ``--reruns`` more times (default 20) exactly so, in a later run of
its own: a fresh boot each, the held-out run first, then the PPL on the promotion's references (a public run
follows it in the boot, unused here). Each boot is stored as a calibration run of the study (table
``calibrations``): evidence of how far a later run moves (the claims' machine term), never a verification's
verdict. The re-runs are a later run on this machine, so they are held to the confirmed claim's odds with
the machine term the study's own runs measured (the stated prior is of another machine; the organisers'
figure is printed beside). It prints every re-run, then::

    predicted P(VERIFIED) X, observed Y over N re-runs

with the 90% Clopper-Pearson interval of the observed rate and the Brier score of the prediction over the
re-runs, and exits 1 when the prediction lies outside that interval (a test makes it do so). The re-runs of
one calibration share its run's machine state, so their hits are binomial only given that state: the
interval is the least uncertainty the comparison has, not all of it. A study with no recommended point is
calibrated at its confirmed one, else at its highest screening P (``--trial`` picks another candidate); an
unfinished promotion or confirmation, or a candidate whose noise is not measured (no P), is refused.

A calibration longer than one sitting (on a lent GPU machine a command runs 10 minutes at most) is
made in parts: ``--time-limit S`` starts no re-run that the re-runs so far say would end after S
seconds and exits 3, naming the run; ``--resume RUN`` goes on with that run's stored re-runs, booting
none of them again, and prints the whole calibration once every re-run is stored.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from scipy import stats

from benchmarks._report import emit, table
from benchmarks._sweeps import load_note
from cli import command
from errors import NoCompletedTrialsError
from sweep.claims import (
    INTERVAL,
    Claim,
    FreshBoots,
    MachineTerm,
    StudyClaims,
    StudyEvidence,
    claim_for,
    interleave,
    load_evidence,
)
from sweep.judgement import verifies
from sweep.runs import RUN_DIR
from sweep.search import load_study
from sweep.store import DEFAULT_STORAGE_URL, BootRecord, TrialRecord, open_existing

__all__ = ["main"]


def _calibrate(args: argparse.Namespace, out: Console) -> tuple[str, bool] | None:
    """The report, and whether the prediction lies inside the observed rate's interval; None when the time limit
    left re-runs unrun (the run said how to go on)."""
    spec = load_study(args.study, manifest=args.manifest)
    storage = open_existing(args.storage)
    began = time.monotonic()
    try:
        # the study's earlier runs (not this calibration's own) say how far a later run moves: the re-runs here are one
        evidence = load_evidence(storage, spec.name, leave_out_run=args.resume)
        view, claim = _claim(evidence, args)
        record = evidence.record(claim.trial_number)
        assert record is not None  # a promoted trial was measured: it has its row
        profile = view.plan.profile
        laid = [
            replace(b, heldout_first=True)
            for b in interleave(
                [record],
                boots=args.reruns,
                profile=lambda _: profile,
                gate=lambda _: view.gate,
                claims={claim.trial_number: claim.claim},
            )
        ]
        predicted, basis = _prediction(view, claim)
        run = FreshBoots(
            spec,
            storage,
            kind="calibration",
            out=out,
            run_dir=RUN_DIR,
            resume=args.resume,
            expected=[claim.trial_number] * args.reruns,
            go_on="the same command with --resume {run} goes on",
            ray_address=args.ray_address,
            deadline=None if args.time_limit is None else began + args.time_limit,
        )
        stored = run.stored
        out.print(
            f"calibrating trial {claim.trial_number} of {spec.name}: claim {claim.claim:.2f} tok/s, predicted "
            f"P(VERIFIED) {predicted:.3f} ({basis}); {args.reruns} fresh boots, the held-out run first; run {run.run_id}"
            + (f", going on after {stored} stored re-run(s)" if stored else ""),
            markup=False,
            soft_wrap=True,  # one line, whatever the width: a script reads the run's id from it
        )
        with run:
            if not run.boot(laid):
                return None
    finally:
        storage.close()
    took = time.monotonic() - began
    return _report(
        spec.name,
        view,
        claim,
        record,
        run.boots,
        predicted=predicted,
        basis=basis,
        took=took,
        ran=len(run.boots) - stored,
    )


def _claim(evidence: StudyEvidence, args: argparse.Namespace) -> tuple[StudyClaims, Claim]:
    """The study's claims (as this project's client timed its boots) and the claim to calibrate: the recommended
    point, else the confirmed one, else the highest screening P; raises ConfigError where there is none."""
    # the re-runs are timed by this project's client, as the promotion's boots were: like with like, the claims
    # carry no client offset here (a claim's odds for the organisers' re-run do)
    view = evidence.claims_as_timed()
    study = evidence.study
    if view is None:
        raise NoCompletedTrialsError(
            f"study {study!r} has no promotion: run `python -m sweep.run --study {args.study}`"
        )
    if view.unfinished():
        raise NoCompletedTrialsError(
            f"study {study!r}: {view.unfinished()}; `python -m sweep.run --study {args.study}` goes on with it"
        )
    if not view.claims:
        raise NoCompletedTrialsError(f"study {study!r}: its promotion measured no boot")
    claims = view.best_claims()  # the confirmed ones where there are: the claims to act on
    if args.trial is not None:
        claim = claims.get(args.trial)
        if claim is None:
            raise NoCompletedTrialsError(f"--trial {args.trial} was not promoted; promoted: {sorted(claims)}")
    else:
        confirmed = view.confirmation.chosen if view.confirmation else None
        claim = view.recommended or confirmed or max(claims.values(), key=lambda c: c.p_verified or 0.0)
    if claim.p_verified is None:
        raise NoCompletedTrialsError(f"study {study!r}, trial {claim.trial_number}: {claim.unmeasured}")
    return view, claim


def _report(
    study: str,
    view: StudyClaims,
    claim: Claim,
    record: TrialRecord,
    reruns: Sequence[BootRecord],
    *,
    predicted: float,
    basis: str,
    took: float,
    ran: int,
) -> tuple[str, bool]:
    rows, hits, outcomes = [], 0, []
    for b in reruns:
        ok = b.measured and verifies(tps=b.tps, ppl=b.ppl, claim=claim.claim, gate=view.gate)
        hits += ok
        outcomes.append(ok)
        rows.append(
            [
                b.repeat + 1,
                "-" if b.tps is None else f"{b.tps:.2f}",
                "-" if b.tps is None else f"{(b.tps / claim.claim - 1) * 100:+.1f}%",
                "-" if b.ppl is None else f"{b.ppl:.4f}",
                "-" if b.host_steal is None else f"{b.host_steal:.0%}",
                "yes" if ok else "no",
            ]
        )
    observed = hits / len(reruns)
    low, high = clopper_pearson(hits, len(reruns))
    agree = low <= predicted <= high
    brier = statistics.fmean((predicted - ok) ** 2 for ok in outcomes)
    knobs = " ".join(f"{k}={v}" for k, v in sorted(record.knobs.items()))
    report = "\n".join(
        [
            f"study {study}, trial {claim.trial_number} ({knobs})",
            f"claim {claim.claim:.2f} tok/s from promotion {view.run_id} ({claim.boots} boots of each of {len(view.claims)} "
            f"candidates, profile {view.profile}); gate {view.gate:.4f}",
            "",
            table(
                ["re-run", "held-out TPS", "against the claim", "PPL", "host steal", "within 5%, under the gate"], rows
            ),
            "",
            f"the host's steal (CPU time given to other guests during the runs): promotion {_steal(view.boots)}; "
            f"re-runs {_steal(reruns)}",
            f"predicted ({basis}): P(VERIFIED) {predicted:.2f} (within the promotion's run {claim.p_verified:.2f})",
            f"predicted P(VERIFIED) {predicted:.2f}, observed {observed:.2f} over {len(reruns)} re-runs",
            f"the prediction lies {'inside' if agree else 'OUTSIDE'} the observed rate's {INTERVAL:.0%} interval "
            f"{low:.2f}..{high:.2f} (Clopper-Pearson); Brier score {brier:.3f}; "
            + (f"{ran} re-run(s) took {took:.0f} s here" if ran < len(reruns) else f"re-runs took {took:.0f} s")
            + f"; {load_note()}",
        ]
    )
    return report, agree


def clopper_pearson(hits: int, n: int, *, level: float = INTERVAL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a binomial rate: ``hits`` of ``n``."""
    tail = (1 - level) / 2
    low = 0.0 if hits == 0 else float(stats.beta.ppf(tail, hits, n - hits + 1))
    high = 1.0 if hits == n else float(stats.beta.ppf(1 - tail, hits + 1, n - hits))
    return low, high


def _prediction(view: StudyClaims, claim: Claim) -> tuple[float, str]:
    """What the re-runs are held to. They are a later run on this machine: a confirmed claim's odds with the
    machine term its study's runs measured (the stated prior is of another machine, which these re-runs are
    not); a claim never confirmed, its screening figure within its run."""
    confirmed = view.confirmation
    if claim.machine is None or confirmed is None:
        assert claim.p_verified is not None  # _calibrate refuses a claim whose noise is not measured
        return claim.p_verified, "a screening figure, within the promotion's run: the claim was not confirmed"
    # the measurement alone (no prior: it is of another machine); none where only one run measured the points
    between = claim.machine.between
    here = None if between is None else MachineTerm(prior=0.0, prior_df=0.0, between=between)
    again = claim_for(confirmed.fit, claim.trial_number, gate=claim.gate, target=claim.target, machine=here)
    assert again.p_verified is not None  # the confirmed claim's noise is measured, as its own P says
    return again.p_verified, (
        f"a later run on this machine: the confirmation's odds with the machine term its runs measured "
        f"({0.0 if here is None else here.sd:.1%}; the organisers' re-run, on another machine, "
        f"{claim.p_verified:.2f})"
    )


def _steal(boots: Sequence[BootRecord]) -> str:
    shares = sorted(b.host_steal for b in boots if b.host_steal is not None)
    if not shares:
        return "not recorded"
    return f"median {statistics.median(shares):.0%}, at most {shares[-1]:.0%} over {len(shares)} boot(s)"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.claim_calibration", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="a promoted study (name or .toml path)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--manifest", help="the study's manifest, if sweep.run was given --manifest")
    parser.add_argument("--trial", type=int, help="calibrate this promoted trial instead of the recommended one")
    parser.add_argument("--reruns", type=int, default=20, help="fresh boots (default 20)")
    parser.add_argument(
        "--time-limit", type=float, metavar="S", help="start no re-run that would end after S seconds (exit 3)"
    )
    parser.add_argument("--resume", metavar="RUN", help="go on with this calibration run's stored re-runs")
    parser.add_argument("--ray-address", help="join this Ray cluster (default: start a local one)")
    parser.add_argument("--out", type=Path, help="also write the report there, under its command line")
    args = parser.parse_args(argv)
    if args.reruns < 1:
        parser.error(f"--reruns must be at least 1, got {args.reruns}")
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be a positive number of seconds, got {args.time_limit}")
    return args


@command(_parse)
def main(args: argparse.Namespace) -> int:
    calibrated = _calibrate(args, Console(highlight=False, width=160))
    if calibrated is None:
        return 3
    report, agree = calibrated
    emit(report, out=args.out)
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
