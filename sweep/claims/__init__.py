"""The claims wing: from boots to the TPS to report, its odds, and the verdicts of later re-runs.

    _fit        the model of a boot's two runs: levels and the noise each configuration is judged by (``fit``)
    _between    how far a level moves from one run of boots to the next, and the machine term of the
                organisers' re-run (``between_runs``, ``MachineTerm``)
    _claim      the claim and P(VERIFIED) (``claim_for``); ``screening_claim``: a search trial's worth by the
                same law of a re-run, which ranks the candidates for promotion
    _serving    a serving study's claims of goodput: the goodput at a chosen load level, its interval, and the odds a
                re-run on another machine meets the SLO there, by the same fit and machine term
                (``serving_claims``); the highest load a configuration holds, from its boots (``held_load``)
    _confirm    the confirmation: the claim to act on, from boots its choice did not see (``confirmation_pair``),
                and when its sequential boots stop (``stopping``)
    _verdict    a verification run's verdict: VERIFIED, INVALID or UNDECIDED (``judge``)
    _noise      where a configuration's noise is: boot, run, prompt, request, streaks, steps (``decompose``)
    _evidence   ``load_evidence``: one study's records, boots, plan, claims, verdicts and noise, read once
    _runner     ``FreshBoots``: one run of fresh boots, whatever asks for it (``interleave`` lays it out)
    _promotion  the search's best configurations re-booted afresh (``promote``), its choice confirmed (``confirm``)
    _verification  fresh boots of chosen points on held-out prompts, judged (``verify``)
    _print      the claims, noise and verdict tables; a claim's row mark and odds as printed (``row_mark``,
                ``odds_text``: the exports' markdown reads them too)
    _serving_print  a serving study's claims of goodput (``print_serving_claims``); the highest load each promoted
                configuration holds and what is recommended (``held_loads``, ``serving_outcome``: the exports' too)
    cli         ``python -m sweep.claims``

A promotion's and a confirmation's plans (``PromotionPlan``, ``ConfirmationPlan``) and the client offset
(``ClientOffset``) are what the claims store in the study's record: ``sweep.store``'s, re-exported here.
The organisers' rule itself (a re-run within 5%, PPL under the gate) and the gate are
``sweep.judgement``'s. Only ``_runner`` boots anything.
"""

from sweep.claims._between import Between, MachineTerm, between_runs, machine_term
from sweep.claims._claim import MACHINE_TERMS, Ceiling, Claim, best_claim, claim_for, screening_claim
from sweep.claims._confirm import Candidate, Stop, StopReason, changed_knobs, confirmation_pair, stopping
from sweep.claims._evidence import Confirmation, StudyClaims, StudyEvidence, claims_of, load_evidence
from sweep.claims._fit import HETEROGENEITY, INTERVAL, Fit, Law, Level, Reading, Spread, fit, tps_reading
from sweep.claims._noise import WINDOW_S, NoiseParts, decompose, study_noise
from sweep.claims._print import odds_text, print_claims, print_noise, print_verdicts, row_mark
from sweep.claims._promotion import confirm, promote, select
from sweep.claims._runner import FreshBoots, PlannedBoot, heldout_first, interleave
from sweep.claims._serving import ServingClaim, SloCeiling, goodput_reading, held_load, ratio_reading, serving_claims
from sweep.claims._serving_print import held_loads, print_serving_claims, serving_outcome
from sweep.claims._verdict import Verdict, VerdictName, judge
from sweep.claims._verification import VerificationPlan, plan_verification, print_plan, select_trials, verify
from sweep.store import ClientOffset, ConfirmationPlan, PromotionPlan

__all__ = [
    "HETEROGENEITY",
    "INTERVAL",
    "MACHINE_TERMS",
    "WINDOW_S",
    "Between",
    "Candidate",
    "Ceiling",
    "Claim",
    "ClientOffset",
    "Confirmation",
    "ConfirmationPlan",
    "Fit",
    "FreshBoots",
    "Law",
    "Level",
    "MachineTerm",
    "NoiseParts",
    "PlannedBoot",
    "PromotionPlan",
    "Reading",
    "ServingClaim",
    "SloCeiling",
    "Spread",
    "Stop",
    "StopReason",
    "StudyClaims",
    "StudyEvidence",
    "Verdict",
    "VerdictName",
    "VerificationPlan",
    "best_claim",
    "between_runs",
    "changed_knobs",
    "claim_for",
    "claims_of",
    "confirm",
    "confirmation_pair",
    "decompose",
    "fit",
    "goodput_reading",
    "held_load",
    "held_loads",
    "heldout_first",
    "interleave",
    "judge",
    "load_evidence",
    "machine_term",
    "odds_text",
    "plan_verification",
    "print_claims",
    "print_noise",
    "print_plan",
    "print_serving_claims",
    "print_verdicts",
    "promote",
    "ratio_reading",
    "row_mark",
    "screening_claim",
    "select",
    "select_trials",
    "serving_claims",
    "serving_outcome",
    "stopping",
    "study_noise",
    "tps_reading",
    "verify",
]
