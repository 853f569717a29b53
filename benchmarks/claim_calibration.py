"""``python -m benchmarks.claim_calibration --study ctk``: does P(VERIFIED) say how often a private re-run verifies?

A promoted study (``python -m sweep.run`` ends with its promotion) claims a TPS for its recommended
point (``sweep.claims``) and the probability that one private re-run of it (a fresh boot, the
harness's warm-up, the first timed run, on prompts nobody timed) lands within 5% of the claim with
its PPL under the gate. This boots that point ``--reruns`` more times (default 20) exactly so: a
fresh boot each, the held-out run first, then the PPL on the promotion's references (a public run
follows it in the boot, unused here). Each boot is stored as a verification run of the study, so
nothing is lost and the export shows its verdict. It prints every re-run, then one line::

    predicted P(VERIFIED) X, observed Y over N re-runs

and whether the two lie within 10 points. A study with no recommended point is calibrated at its
highest P(VERIFIED) (``--trial`` picks another candidate).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import optuna
from rich.console import Console

from benchmarks._report import emit, table
from benchmarks._sweeps import load_note
from errors import ConfigError, NoCompletedTrialsError, StudyNotFoundError
from sweep.booter import BootRunner, interleave, run_boots
from sweep.claims import PROMOTION_ATTR, claims_of
from sweep.cluster import check_capacity, ray_session
from sweep.estimate import TPS_TOLERANCE
from sweep.judgement import over_gate
from sweep.spec import load_study
from sweep.storage import DEFAULT_STORAGE_URL, open_existing

__all__ = ["main"]

RUN_DIR = Path("runs")
WITHIN = 0.10  # the calibration's own tolerance: predicted and observed rates within 10 points


def _calibrate(args: argparse.Namespace, out: Console) -> str:
    spec = load_study(args.study, manifest=args.manifest)
    storage = open_existing(args.storage)
    try:
        try:
            study = optuna.load_study(study_name=spec.name, storage=storage.optuna)
        except KeyError:
            raise StudyNotFoundError(f"study {spec.name!r} not found in {args.storage}") from None
        plan = study.user_attrs.get(PROMOTION_ATTR)
        if plan is None:
            raise NoCompletedTrialsError(
                f"study {spec.name!r} has no promotion: run `python -m sweep.run --study {args.study}`"
            )
        view = claims_of(plan, storage.boots("promotion", spec.name))
        if not view.claims:
            raise NoCompletedTrialsError(f"study {spec.name!r}: its promotion measured no boot")
        if args.trial is not None:
            claim = next((c for c in view.claims if c.trial_number == args.trial), None)
            if claim is None:
                raise NoCompletedTrialsError(
                    f"--trial {args.trial} was not promoted; promoted: {[c.trial_number for c in view.claims]}"
                )
        else:
            claim = view.recommended or max(view.claims, key=lambda c: c.p_verified)
        record = storage.record(spec.name, claim.trial_number)
        assert record is not None  # a promoted trial was measured: it has its row
        from engine.profiles import BenchProfile

        profile = BenchProfile.from_record(plan["profile"])
        run_id = uuid.uuid4().hex[:12]
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
        out.print(
            f"calibrating trial {claim.trial_number} of {spec.name}: claim {claim.claim:.2f} tok/s, predicted "
            f"P(VERIFIED) {claim.p_verified:.3f}; {args.reruns} fresh boots, the held-out run first; run {run_id}",
            markup=False,
        )
        began = time.monotonic()
        with ray_session(address=args.ray_address, temp_dir=RUN_DIR / "ray"):
            check_capacity(spec.resources)
            runner = BootRunner(spec, run_dir=RUN_DIR)
            try:
                reruns, _ = run_boots(laid, runner=runner, storage=storage, kind="verification", run_id=run_id, out=out)
            finally:
                runner.stop()
    finally:
        storage.close()
    rows, hits = [], 0
    for b in reruns:
        ok = b.measured and abs(b.tps / claim.claim - 1) <= TPS_TOLERANCE and not over_gate(b.ppl, view.gate)  # type: ignore[operator,arg-type]
        hits += ok
        rows.append(
            [
                b.repeat + 1,
                "-" if b.tps is None else f"{b.tps:.2f}",
                "-" if b.tps is None else f"{(b.tps / claim.claim - 1) * 100:+.1f}%",
                "-" if b.ppl is None else f"{b.ppl:.4f}",
                "yes" if ok else "no",
            ]
        )
    observed = hits / len(reruns)
    agree = abs(observed - claim.p_verified) <= WITHIN
    return "\n".join(
        [
            f"study {spec.name}, trial {claim.trial_number} ({' '.join(f'{k}={v}' for k, v in sorted(record.knobs.items()))})",
            f"claim {claim.claim:.2f} tok/s from promotion {view.run_id} ({claim.boots} boots of each of {len(view.claims)} "
            f"candidates, profile {view.profile}); gate {view.gate:.4f}",
            "",
            table(["re-run", "held-out TPS", "against the claim", "PPL", "within 5%, under the gate"], rows),
            "",
            f"predicted P(VERIFIED) {claim.p_verified:.2f}, observed {observed:.2f} over {len(reruns)} re-runs",
            f"{'within' if agree else 'NOT within'} {WITHIN:.0%} points of each other; re-runs took {time.monotonic() - began:.0f} s; "
            f"{load_note()}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.claim_calibration", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="a promoted study (name or .toml path)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--manifest", help="the study's manifest, if sweep.run was given --manifest")
    parser.add_argument("--trial", type=int, help="calibrate this promoted trial instead of the recommended one")
    parser.add_argument("--reruns", type=int, default=20, help="fresh boots (default 20)")
    parser.add_argument("--ray-address", help="join this Ray cluster (default: start a local one)")
    parser.add_argument("--out", type=Path, help="also write the report there, under its command line")
    args = parser.parse_args(argv)
    if args.reruns < 1:
        parser.error(f"--reruns must be at least 1, got {args.reruns}")
    out = Console(highlight=False, width=160)
    try:
        report = _calibrate(args, out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    emit(report, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
