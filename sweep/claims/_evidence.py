"""Everything a study's boots say, read once: ``load_evidence(storage, study) -> StudyEvidence``.

Every reader of claims and verdicts (``python -m sweep.claims``, ``sweep.verify``, ``sweep.submit``,
the calibration benchmark, the dashboards, the promotion's own summary) goes through this one loader,
so all of them see the same boots, the same noise floor and the same errors:

- the trial records, and the boots by kind: the latest promotion's (``promotions``), the
  verifications' and the calibrations' (``calibrations``; a calibration stored by an older version
  among the verifications is told apart by its order: every one of its boots timed the held-out set
  first, which a verification's first boot never does);
- the plan (``PromotionPlan``) and its claims (``StudyClaims``: unfinished promotions are labelled and
  recommend nothing);
- each trial's verdict: its latest verification run, judged against the claim it was measured against,
  with the study's noise floor and target;
- the noise one boot carries, for the front;
- a serving study's claims of goodput (``sweep.claims._serving``), where its plan carries an SLO: they, not the
  TPS claims beside them, choose the point to confirm, stop its confirmation and are recommended.

The noise floor and the target are the promotion's, as its plan stored them (editing the study file later
changes no claim made before); a study never promoted judges its verdicts by the ``noise_floor`` and
``target`` its record stored when it opened, else ``sweep.judgement.NOISE_FLOOR`` and ``DEFAULT_TARGET``.
Everything the study stores beside its trials is read through its record (``sweep.store.StudyRecord``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from errors import StudyNotFoundError
from sweep.claims._between import MachineTerm, machine_term
from sweep.claims._claim import Claim, best_claim, claim_for
from sweep.claims._confirm import Stop, changed_knobs, confirmation_pair, stopping
from sweep.claims._fit import Fit, fit
from sweep.claims._noise import study_noise
from sweep.claims._serving import ServingClaim, serving_claims
from sweep.claims._verdict import Verdict, judge
from sweep.judgement import DEFAULT_TARGET, NOISE_FLOOR, Noise
from sweep.store import (
    BootKind,
    BootRecord,
    ClientOffset,
    ConfirmationPlan,
    PromotionPlan,
    Storage,
    StudyRecord,
    TrialRecord,
    read_record,
    shown_url,
)

__all__ = ["Confirmation", "StudyClaims", "StudyEvidence", "claims_of", "load_evidence"]


@dataclass(frozen=True, kw_only=True)
class Confirmation:
    """The confirmation run of a promotion's choice: its boots, the machine term, and its claims, which alone
    are the ones to act on (``sweep.claims._confirm``)."""

    plan: ConfirmationPlan
    boots: tuple[BootRecord, ...]  # stored so far, failed ones included
    fit: Fit
    machine: MachineTerm
    claims: dict[int, Claim]  # the chosen point's and its control's, from these boots alone
    stop: Stop | None  # where and why it stopped (sweep.claims._confirm.stopping); None: it goes on
    serving: dict[int, ServingClaim] = field(default_factory=dict)  # a serving study's claims of goodput

    @property
    def complete(self) -> bool:
        return self.stop is not None

    @property
    def chosen(self) -> Claim | None:
        return self.claims.get(self.plan.chosen)


@dataclass(frozen=True, kw_only=True)
class StudyClaims:
    """The claims of one promotion run (screening figures: they chose), its choice's confirmation (the claim to
    act on), and whether both are finished."""

    plan: PromotionPlan
    boots: tuple[BootRecord, ...]  # stored so far, failed ones included
    fit: Fit
    offset: ClientOffset | None  # the organisers' client beside ours, carried into the odds; None: not measured
    claims: tuple[Claim, ...]  # the promotion's, fastest claim first: screening figures, within its run
    choice: tuple[int, int | None] | None  # the point to confirm and its control (confirmation_pair)
    confirmation: Confirmation | None  # the confirmation of ``choice``, once planned
    recommended: Claim | None  # the confirmed claim, where its odds reach the target; never while unfinished
    gate: float | None
    knobs: dict[int, dict[str, Any]]
    # a serving study's: the promotion's claims of goodput (screening figures), and the confirmed one recommended
    serving: dict[int, ServingClaim] = field(default_factory=dict)
    serving_recommended: ServingClaim | None = None

    @property
    def run_id(self) -> str:
        return self.plan.run_id

    @property
    def profile(self) -> str:
        return self.plan.profile.name

    @property
    def target(self) -> float:
        return self.plan.target

    @property
    def planned(self) -> int:
        return self.plan.planned

    @property
    def failed(self) -> list[BootRecord]:
        return [b for b in self.boots if not b.measured]

    @property
    def complete(self) -> bool:
        """The promotion's boots are all stored (its confirmation may still be to run)."""
        return len(self.boots) >= self.planned

    def unfinished(self) -> str | None:
        """Why nothing may act on these claims yet; None once the promotion and its confirmation are finished."""
        if not self.complete:
            return f"the promotion is not finished ({len(self.boots)} of {self.planned} boots)"
        if self.plan.confirm_boots and self.choice is not None:
            if self.confirmation is None:
                return "the promotion's choice is not confirmed yet"
            if not self.confirmation.complete:
                done, planned = len(self.confirmation.boots), self.confirmation.plan.planned
                return f"the confirmation is not finished ({done} of at most {planned} boots)"
        return None

    def of(self, trial_number: int) -> Claim | None:
        """The claim to act on for a trial: its confirmed one, else its promotion's (a screening figure)."""
        return self.best_claims().get(trial_number)

    def best_claims(self) -> dict[int, Claim]:
        """Every promoted trial's claim: the confirmation's where it confirmed one, else the promotion's."""
        confirmed = self.confirmation.claims if self.confirmation else {}
        return {c.trial_number: confirmed.get(c.trial_number, c) for c in self.claims}

    def best_serving(self) -> dict[int, ServingClaim]:
        """A serving study's claims of goodput likewise: the confirmation's where it confirmed one, else the
        promotion's; empty for a study of TPS."""
        confirmed = self.confirmation.serving if self.confirmation else {}
        return {n: confirmed.get(n, c) for n, c in self.serving.items()}


def _same_measure(a: BootRecord, b: BootRecord) -> bool:
    """Whether two boots' TPS read at one level: the same profile's sizes over the same prompts. The PPL
    references are not compared: a verification scores its own held-out set, and PPL plays no part in
    how far a level moves between runs."""
    return (a.profile, a.prompts, a.public_prompts) == (b.profile, b.prompts, b.public_prompts)


def claims_of(
    plan: PromotionPlan,
    boots: Sequence[BootRecord],
    later: Sequence[BootRecord] = (),
    *,
    offset: ClientOffset | None = None,
    confirmation: ConfirmationPlan | None = None,
    confirming: Sequence[BootRecord] = (),
    baseline: int | None = None,
    reference: Mapping[str, Any] | None = None,
) -> StudyClaims:
    """The claims of the promotion run ``plan`` describes, from the boots stored for it (screening figures, within
    its run), and of its choice's ``confirmation`` from its own boots (``confirming``: the study's confirmation
    boots), whose odds are the organisers' re-run's: the machine term measured over every run at the promotion's
    profile and prompts (this promotion's, the confirmation's and ``later``: verifications, calibrations) against
    the plan's stated prior. ``offset``: how the organisers' client reads beside the one the boots were timed by;
    ``baseline``: the study's baseline trial, a control where the promotion had no runner-up; ``reference``: its
    knobs, against which the choice counts each candidate's changed knobs (``confirmation_pair``)."""
    mine = tuple(b for b in boots if b.run_id == plan.run_id)
    fitted = fit(mine, floor=plan.noise_floor)
    # the plan's gate carries the search's baseline PPL where the promotion scores the sweep's references, else
    # the baseline trial promoted with the candidates: its boots' PPLs (sweep.store.ppl_limit's rule, applied when
    # the plan was made)
    gate = plan.gate.limit(
        [b.ppl for b in mine if b.trial_number == plan.gate.baseline_trial and b.measured and b.ppl is not None]
    )
    claims = tuple(
        sorted(
            (claim_for(fitted, n, gate=gate, target=plan.target, offset=offset) for n in fitted.levels),
            key=lambda c: (-c.claim, c.trial_number),
        )
    )
    complete = len(mine) >= plan.planned
    knobs = {b.trial_number: b.knobs for b in mine}
    changed = None if reference is None else {n: changed_knobs(k, reference) for n, k in knobs.items()}
    # a serving study's claims of goodput, where its plan carries the SLO: they choose, stop and are recommended
    serving = (
        {}
        if plan.slo is None
        else serving_claims(mine, slo=plan.slo, gate=gate, target=plan.target, floor=plan.noise_floor)
    )
    choice = None
    if complete and plan.slo is None:
        choice = confirmation_pair(claims, baseline=baseline, fitted=fitted, changed=changed)
    elif complete:
        ranked = sorted(serving.values(), key=lambda c: (-c.claim, c.trial_number))
        choice = confirmation_pair(ranked, baseline=baseline)
    confirmed = None
    if confirmation is not None and confirmation.promotion_run == plan.run_id and mine:
        runs = [*mine, *confirming, *later]
        confirmed = _confirmed(plan, confirmation, runs, gate=gate, offset=offset, measure=mine[0])
    recommended = serving_recommended = None
    if confirmed is not None and confirmed.complete:
        if plan.slo is None:
            recommended = None if confirmed.chosen is None else best_claim([confirmed.chosen])
        else:
            served = confirmed.serving.get(confirmed.plan.chosen)
            serving_recommended = served if served and served.meets and not served.ppl_over_gate else None
    return StudyClaims(
        plan=plan,
        boots=mine,
        fit=fitted,
        offset=offset,
        claims=claims,
        choice=choice,
        confirmation=confirmed,
        recommended=recommended,
        gate=gate,
        knobs=knobs,
        serving=serving,
        serving_recommended=serving_recommended,
    )


def _confirmed(
    plan: PromotionPlan,
    confirmation: ConfirmationPlan,
    runs: Sequence[BootRecord],
    *,
    gate: float | None,
    offset: ClientOffset | None,
    measure: BootRecord,
) -> Confirmation:
    """The confirmation's claims from its own boots, the machine term from every run that measured its points."""
    boots = tuple(b for b in runs if b.run_id == confirmation.run_id)
    fitted = fit(boots, floor=plan.noise_floor)
    measured = [b for b in runs if b.trial_number in confirmation.trials and b.first and _same_measure(b, measure)]
    machine = machine_term(measured, prior=plan.between_prior, prior_df=plan.between_prior_df, floor=plan.noise_floor)
    made = (claim_for(fitted, n, gate=gate, target=plan.target, machine=machine, offset=offset) for n in fitted.levels)
    claims = {c.trial_number: c for c in made}
    serving: dict[int, ServingClaim] = {}
    if plan.slo is None:
        stop = stopping(confirmation, claims.get(confirmation.chosen), stored=len(boots), target=plan.target)
    else:  # a serving study's claims of goodput stop it: each figure's machine term over the same runs and prior
        serving = serving_claims(
            boots,
            slo=plan.slo,
            gate=gate,
            target=plan.target,
            floor=plan.noise_floor,
            runs=measured,
            prior=plan.between_prior,
            prior_df=plan.between_prior_df,
        )
        chosen = serving.get(confirmation.chosen)
        stop = stopping(confirmation, chosen, stored=len(boots), target=plan.target, odds="P(meets the SLO)")
    return Confirmation(
        plan=confirmation, boots=boots, fit=fitted, machine=machine, claims=claims, stop=stop, serving=serving
    )


@dataclass(frozen=True, kw_only=True)
class StudyEvidence:
    """One study's records, boots, claims, verdicts and noise, as every reader sees them."""

    study: str
    stored: StudyRecord  # what the study stores beside its trials
    records: tuple[TrialRecord, ...]
    plan: PromotionPlan | None
    boots: dict[BootKind, tuple[BootRecord, ...]]  # in the order they were stored
    claims: StudyClaims | None
    verdicts: dict[int, Verdict] = field(default_factory=dict)  # the latest verification run of each trial
    noise: Noise = field(default_factory=lambda: Noise(tps_sd=NOISE_FLOOR, ppl_sd=0.0, basis="nothing measured"))
    floor: float = NOISE_FLOOR  # the noise floor and the target its claims and verdicts are judged by
    target: float = DEFAULT_TARGET

    def record(self, trial_number: int) -> TrialRecord | None:
        return next((r for r in self.records if r.trial_number == trial_number), None)

    def claims_as_timed(self) -> StudyClaims | None:
        """The claims for a re-run timed by this project's client, as the boots were (no client offset): what a
        calibration's re-runs are held to."""
        if self.plan is None:
            return None
        later = [*self.boots["verification"], *self.boots["calibration"]]
        return claims_of(
            self.plan,
            self.boots["promotion"],
            later,
            confirmation=self.claims.confirmation.plan if self.claims and self.claims.confirmation else None,
            confirming=self.boots["confirmation"],
            baseline=self.baseline,
            reference=next((r.knobs for r in self.records if r.is_baseline), None),
        )

    @property
    def baseline(self) -> int | None:
        """The baseline trial's number, where the study measured one."""
        return next((r.trial_number for r in self.records if r.is_baseline), None)

    def measured_before(self) -> list[BootRecord]:
        """The boots a verification's noise pools with, beside its own run's other trials: its promotion's and
        its confirmation's (the same stack and machine, their noise measured as a verification's is)."""
        return [*self.boots["promotion"], *self.boots["confirmation"]]


def _split_calibrations(stored: Sequence[BootRecord]) -> tuple[list[BootRecord], list[BootRecord]]:
    """Verification-table boots as (verifications, calibrations): a run whose every boot timed the held-out
    prompts first is a calibration an older version stored there (a verification alternates, its first
    boot public first)."""
    runs: dict[str, list[BootRecord]] = {}
    for b in stored:
        runs.setdefault(b.run_id, []).append(b)
    calibration = {run for run, bs in runs.items() if all(b.first == "heldout" for b in bs)}
    return [b for b in stored if b.run_id not in calibration], [b for b in stored if b.run_id in calibration]


def _verdicts(
    verifications: Sequence[BootRecord], promoted: Sequence[BootRecord], *, floor: float, target: float
) -> dict[int, Verdict]:
    by_run: dict[tuple[int, str], list[BootRecord]] = {}
    latest: dict[int, str] = {}
    for boot in verifications:  # in insertion order: later runs win
        by_run.setdefault((boot.trial_number, boot.run_id), []).append(boot)
        latest[boot.trial_number] = boot.run_id
    verdicts = {}
    for n, run_id in latest.items():
        beside = [*promoted, *(b for (m, r), bs in by_run.items() if r == run_id and m != n for b in bs)]
        verdicts[n] = judge(by_run[(n, run_id)], beside=beside, floor=floor, target=target)
    return verdicts


def load_evidence(storage: Storage, study_name: str, *, leave_out_run: str | None = None) -> StudyEvidence:
    """Read one study (raises ``StudyNotFoundError`` naming the studies there when it has none of that
    name). ``leave_out_run``: a run of boots that is not yet evidence (a calibration going on, whose own
    re-runs must not count as a later run)."""
    import optuna

    try:
        study = optuna.load_study(study_name=study_name, storage=storage.optuna)
    except KeyError:
        names = sorted(s.study_name for s in optuna.get_all_study_summaries(storage.optuna))
        raise StudyNotFoundError(
            f"study {study_name!r} not found in {shown_url(storage.url)}: run the sweep first "
            f"(studies there: {names or 'none'})"
        ) from None
    stored = read_record(study)
    plan = stored.promotion
    floor, target = _judged_by(stored)
    records = tuple(storage.records(study_name, token_ids=False))
    promotion = storage.boots("promotion", study_name)
    verifications, old_calibrations = _split_calibrations(storage.boots("verification", study_name))
    calibrations = [
        b for b in [*old_calibrations, *storage.boots("calibration", study_name)] if b.run_id != leave_out_run
    ]
    later = [*verifications, *calibrations]
    confirming = storage.boots("confirmation", study_name)
    baseline = next((r for r in records if r.is_baseline), None)
    boots: dict[BootKind, tuple[BootRecord, ...]] = {
        "promotion": tuple(b for b in promotion if plan is None or b.run_id == plan.run_id),
        "confirmation": tuple(confirming),
        "verification": tuple(verifications),
        "calibration": tuple(calibrations),
    }
    claims = None
    if plan is not None:
        claims = claims_of(
            plan,
            promotion,
            later,
            offset=stored.client_offset,
            confirmation=stored.confirmation,
            confirming=confirming,
            baseline=baseline.trial_number if baseline else None,
            reference=baseline.knobs if baseline else None,
        )
    evidence = StudyEvidence(
        study=study_name,
        stored=stored,
        records=records,
        plan=plan,
        boots=boots,
        claims=claims,
        noise=study_noise(records, claims.boots if claims else (), floor=floor),
        floor=floor,
        target=target,
    )
    # judged as sweep.verify judged them when it printed them
    return replace(evidence, verdicts=_verdicts(verifications, evidence.measured_before(), floor=floor, target=target))


def _judged_by(record: StudyRecord) -> tuple[float, float]:
    """The noise floor and the target a study's claims and verdicts are judged by: its promotion's, else those its
    record stored when it opened, else the defaults."""
    if record.promotion is not None:
        return record.promotion.noise_floor, record.promotion.target
    floor = NOISE_FLOOR if record.noise_floor is None else record.noise_floor
    return floor, DEFAULT_TARGET if record.target is None else record.target
