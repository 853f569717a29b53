"""The claims wing: from boots to the TPS to report, its odds, and the verdicts of later re-runs.

    _plan       PromotionPlan: a promotion's boots and what they are judged by (the study's ``promotion``)
    _estimate   the model of a boot's two runs: levels, noise, the claim and P(VERIFIED) (``fit``, ``claim_for``)
    _verdict    a verification run's verdict: VERIFIED, INVALID or UNDECIDED (``judge``)
    _noise      where a configuration's noise is: boot, run, prompt, request, streaks, steps (``decompose``)
    _evidence   ``load_evidence``: one study's records, boots, plan, claims, verdicts and noise, read once
    _print      the claims table
    cli         ``python -m sweep.claims``

The organisers' rule itself (a re-run within 5%, PPL under the gate) and the gate are
``sweep.judgement``'s. Nothing here boots anything: ``sweep.claims`` and ``sweep.verify`` do.
"""

from sweep.claims._estimate import (
    BETWEEN_PRIOR,
    HETEROGENEITY,
    INTERVAL,
    Between,
    Claim,
    ClientOffset,
    Fit,
    Law,
    Level,
    Spread,
    best_claim,
    between_runs,
    claim_for,
    fit,
    study_noise,
)
from sweep.claims._evidence import OFFSET_ATTR, StudyClaims, StudyEvidence, claims_of, load_evidence
from sweep.claims._noise import WINDOW_S, NoiseParts, decompose
from sweep.claims._plan import CLAIMS_ATTR, PROMOTION_ATTR, PromotionPlan
from sweep.claims._print import print_claims, print_noise, print_verdicts
from sweep.claims._promotion import claimable, promote, select
from sweep.claims._runner import FreshBoots, PlannedBoot, heldout_first, interleave
from sweep.claims._verdict import Verdict, VerdictName, judge
from sweep.claims._verification import VerificationPlan, plan_verification, print_plan, select_trials, verify

__all__ = [
    "BETWEEN_PRIOR",
    "FreshBoots",
    "VerificationPlan",
    "PlannedBoot",
    "claimable",
    "heldout_first",
    "interleave",
    "promote",
    "plan_verification",
    "print_plan",
    "print_verdicts",
    "select_trials",
    "verify",
    "select",
    "CLAIMS_ATTR",
    "HETEROGENEITY",
    "INTERVAL",
    "OFFSET_ATTR",
    "PROMOTION_ATTR",
    "WINDOW_S",
    "Between",
    "Claim",
    "ClientOffset",
    "Fit",
    "Law",
    "Level",
    "NoiseParts",
    "PromotionPlan",
    "Spread",
    "StudyClaims",
    "StudyEvidence",
    "Verdict",
    "VerdictName",
    "best_claim",
    "between_runs",
    "claim_for",
    "claims_of",
    "decompose",
    "fit",
    "judge",
    "load_evidence",
    "print_claims",
    "print_noise",
    "study_noise",
]
