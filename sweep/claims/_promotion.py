"""After the search: the best configurations re-measured as the organisers measure, over fresh boots.

A sweep ranks trials by one run of one boot, which on a GPU is noise (one configuration's TPS
moves about 10% from boot to boot). So when a study's search ends, ``promote`` takes its
``[promotion] candidates`` distinct feasible configurations measured to the end whose search
figures are worth most by the claims' own law of a re-run (``screening_claim``: what one re-run reaches with
the target's probability, which a spread of runs costs; a configuration measured twice counts once, by its
best trial) and boots each ``boots`` times at
the promotion profile (for challenge studies the organisers' own: 128 prompts x 512 tokens and
their 128 PPL records), interleaved A B C A B C ..., each boot timing the public prompts and the
held-out ones (``sweep.claims``). Where the gate is a ratio of the baseline's PPL and the promotion
scores other references than the sweep did, the baseline is promoted with them: its boots resolve
the gate on those references.

The plan (``sweep.claims.PromotionPlan``: candidates, boots, profile, gate, target) is the study
record's ``promotion`` (``sweep.store.StudyRecord``) and every boot is stored as it ends (table ``promotions``), so an
interrupted promotion goes on with the same command from the next boot, and a new search result
(other candidates, another profile) starts a new promotion run. The claims are then what
``sweep.claims.load_evidence`` reads; a summary of a finished promotion's is the record's ``claims``,
which optuna-dashboard lists.

A serving study (``[serving]``) promotes the configurations of the most goodput under its SLO, and every boot runs
the study's load levels after the challenge's runs: the plan carries the SLO, and its claims are of goodput
(``sweep.claims._serving``), which choose the point to confirm and stop the confirmation.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console

from sweep.claims._claim import screening_claim
from sweep.claims._confirm import Stop
from sweep.claims._evidence import StudyClaims, load_evidence
from sweep.claims._runner import FreshBoots, PlannedBoot, interleave, new_run_id
from sweep.judgement import Gate
from sweep.search import StudySpec
from sweep.store import (
    ConfirmationPlan,
    PromotionPlan,
    Storage,
    StudyRecord,
    TrialRecord,
    baseline_ppls,
    read_record,
    write_record,
)

__all__ = ["confirm", "promote", "select"]


def _screening(record: TrialRecord, spec: StudySpec) -> float | None:
    """A trial's search figures by the claims' own law of a re-run (``screening_claim``): a noisy configuration's
    fast runs are worth less than a steady one's. A serving study's: the goodput of its best level (requests a
    second that met the SLO; one boot, one run a level: no law to weigh it by, and whether that one run's percentile
    held is for the promotion's boots to say); None where it ran no level."""
    if spec.serving is not None:
        served = record.served(spec.serving)
        return None if served is None else served.goodput
    runs = record.metric("tps_runs") or [record.tps]
    return screening_claim(record.tps or 0.0, runs, floor=spec.promotion.noise_floor, target=spec.promotion.target)


def select(spec: StudySpec, records: list[TrialRecord]) -> list[TrialRecord]:
    """The candidates: the best trial of each of the N distinct feasible configurations measured to the end
    whose search figures could claim most (``screening_claim``; a serving study's, goodput under the SLO), then the
    baseline if the gate must be re-resolved from it. The promotion's boots then recommend by what verifies: the
    highest claim reaching the target."""
    best: dict[str, tuple[TrialRecord, float]] = {}
    for r in records:
        worth = _screening(r, spec) if r.full and r.feasible else None
        if worth is not None:
            key = repr(sorted(r.knobs.items()))
            if key not in best or worth > best[key][1]:
                best[key] = (r, worth)
    ranked = [r for r, _ in sorted(best.values(), key=lambda pair: (-pair[1], pair[0].trial_number))]
    chosen = ranked[: spec.promotion.candidates]
    resolver = _gate(spec, records).baseline_trial
    if resolver is not None:
        baseline = next(r for r in records if r.trial_number == resolver)
        if not any(r.knobs == baseline.knobs for r in chosen):
            chosen.append(baseline)
    return chosen


def _gate(spec: StudySpec, records: list[TrialRecord]) -> Gate:
    """The study's gate with what resolves it on the promotion's references (``sweep.store.ppl_limit``'s rule): the
    search's baseline PPL where the promotion scores the sweep's own, else the baseline trial, promoted with the
    candidates, whose boots resolve it."""
    gate, profile = spec.gate, spec.promotion.profile
    if gate.ppl_max is not None:
        return gate
    baseline = next((r for r in records if r.is_baseline and r.full), None)
    searched = baseline_ppls(profile, baseline=baseline) if profile is not None else []
    if searched:
        return Gate(ppl_max_ratio=gate.ppl_max_ratio, baseline_ppl=searched[0])
    return Gate(ppl_max_ratio=gate.ppl_max_ratio, baseline_trial=baseline.trial_number if baseline else None)


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _serving_summary(view: StudyClaims) -> tuple[dict[str, Any], ...]:
    """A serving study's claims of goodput to act on (confirmed, else screening figures, labelled so)."""
    return tuple(
        {
            "trial": c.trial_number,
            "level": c.workload,
            "goodput": round(c.goodput, 4),
            "goodput_90": None if c.goodput_low is None else [_rounded(c.goodput_low, 4), _rounded(c.goodput_high, 4)],
            "slo_ratio": round(c.ratio, 4),
            "p_meets_slo": _rounded(c.p_verified, 4),
            "odds_of": c.basis,
            "boots": c.boots,
            "ppl": c.ppl,
            "recommended": view.serving_recommended is c,
        }
        for c in view.best_serving().values()
    )


def _record_of(view: StudyClaims) -> StudyRecord:
    """What a finished promotion's claims store in the study's record: their summaries, for optuna-dashboard."""
    if view.plan.slo is None:
        return StudyRecord(claims=_summary(view))
    return StudyRecord(claims=_summary(view), serving_claims=_serving_summary(view))


def _summary(view: StudyClaims) -> tuple[dict[str, Any], ...]:
    """Each promoted trial's claim to act on (its confirmed one, else its screening figure, labelled so)."""
    return tuple(
        {
            "trial": c.trial_number,
            "claim": round(c.claim, 3),
            "p_verified": _rounded(c.p_verified, 4),
            "odds_of": c.basis,
            "boots": c.boots,
            "rerun_90": None if c.rerun_low is None else [_rounded(c.rerun_low, 3), _rounded(c.rerun_high, 3)],
            "ppl": c.ppl,
            "ppl_tol": c.ppl_tol,
            "recommended": view.recommended is c,
        }
        for c in view.best_claims().values()
    )


def promote(
    spec: StudySpec, storage: Storage, *, out: Console, run_dir: Path, deadline: float | None = None
) -> StudyClaims | None:
    """Run (or go on with) the study's promotion; None when it has nothing to promote. Boots that the
    deadline (``time.monotonic()``) leaves unrun are run by the next call."""
    promotion = spec.promotion
    profile = promotion.profile
    if not promotion.candidates or profile is None:
        return None
    records = storage.records(spec.name, token_ids=False)
    chosen = select(spec, records)
    if not chosen:
        out.print(
            f"promotion: study {spec.name} has no feasible trial measured to the end; nothing promoted", markup=False
        )
        return None
    study = optuna.load_study(study_name=spec.name, storage=storage.optuna)
    wanted = PromotionPlan(
        run_id=new_run_id(),
        trials=tuple(r.trial_number for r in chosen),
        boots=promotion.boots,
        profile=profile,
        target=promotion.target,
        noise_floor=promotion.noise_floor,
        gate=_gate(spec, records),
        confirm_boots=promotion.confirm_boots,
        between_prior=promotion.between_prior,
        between_prior_df=promotion.between_prior_df,
        slo=spec.serving,
    )
    plan = read_record(study).promotion
    if plan is None or not wanted.same_plan(plan):
        plan = wanted
        write_record(study, StudyRecord(promotion=plan))
    gate = plan.gate.limit()  # None where the baseline's boots in this run resolve it
    laid = interleave(chosen, boots=promotion.boots, profile=lambda _: profile, gate=lambda _: gate)
    run = FreshBoots(
        spec,
        storage,
        kind="promotion",
        out=out,
        run_dir=run_dir,
        run_id=plan.run_id,
        expected=[b.record.trial_number for b in laid],
        go_on="the same command goes on with them",
        deadline=deadline,
    )
    if not run.done:
        began = "starts" if not run.stored else f"goes on after {run.stored} boot(s)"
        out.print(
            f"promotion {plan.run_id} {began}: trials {list(plan.trials)} x {promotion.boots} fresh boots, interleaved, "
            f"profile {profile.name} ({profile.num_prompts} public + {profile.num_prompts} held-out prompts x "
            f"{profile.output_len} tokens a boot, PPL over {profile.ppl_records} records"
            + (f", then the load levels at {list(profile.load_concurrency)} in flight)" if spec.serving else ")"),
            markup=False,
        )
        with run:
            run.boot(laid)
    view = load_evidence(storage, spec.name).claims
    assert view is not None  # the plan was stored above
    if view.complete:
        write_record(study, _record_of(view))
    return view


def _confirmation_of(storage: Storage, study: str) -> Stop | None:
    """Where the study's confirmation stopped, from its stored boots; None while it goes on."""
    claims = load_evidence(storage, study).claims
    return claims.confirmation.stop if claims and claims.confirmation else None


def confirm(
    spec: StudySpec,
    storage: Storage,
    *,
    out: Console,
    run_dir: Path,
    deadline: float | None = None,
    ray_address: str | None = None,
) -> StudyClaims | None:
    """Run (or go on with) the confirmation of a finished promotion's choice (``sweep.claims._confirm``): its
    boots and its control's, interleaved, in a run of their own (a new worker for every boot, spread over the
    nodes that host the study's trials), each starting as the organisers' first boot of the folder does. The
    study's claims after it; None where the study has no promotion. Boots that the deadline
    (``time.monotonic()``) leaves unrun are run by the next call."""
    evidence = load_evidence(storage, spec.name)
    view = evidence.claims
    if view is None or view.unfinished() is None or not view.complete or view.choice is None:
        return view
    chosen, control = view.choice
    study = optuna.load_study(study_name=spec.name, storage=storage.optuna)
    # the cap is the study's as it reads now: it changes no boot of the promotion, and raising it starts a new run
    boots, most = view.plan.confirm_boots, max(spec.promotion.confirm_max_boots, view.plan.confirm_boots)
    plan = read_record(study).confirmation
    wanted = ConfirmationPlan(
        run_id=new_run_id(), promotion_run=view.run_id, chosen=chosen, control=control, boots=boots, max_boots=most
    )
    if plan is None or replace(plan, run_id=wanted.run_id) != wanted:
        plan = wanted
        write_record(study, StudyRecord(confirmation=plan))
    records = [r for n in plan.trials if (r := evidence.record(n)) is not None]
    profile, gate = view.plan.profile, view.gate
    screening = {c.trial_number: c.claim for c in view.claims}

    def laid(rounds: int) -> list[PlannedBoot]:
        return interleave(records, boots=rounds, profile=lambda _: profile, gate=lambda _: gate, claims=screening)

    run = FreshBoots(
        spec,
        storage,
        kind="confirmation",
        out=out,
        run_dir=run_dir,
        run_id=plan.run_id,
        expected=[b.record.trial_number for b in laid(plan.cap)],
        go_on="the same command goes on with them",
        deadline=deadline,
        ray_address=ray_address,
        spread=True,
    )
    if _confirmation_of(storage, spec.name) is None:
        began = "starts" if not run.stored else f"goes on after {run.stored} boot(s)"
        out.print(
            f"confirmation {plan.run_id} {began}: trial {chosen} (the promotion's choice)"
            + ("" if control is None else f" and trial {control} (its control)")
            + f" x {boots} fresh boots, interleaved, in a run of their own (they alone make the claim), then a pair "
            f"at a time up to {plan.cap} each, until P(VERIFIED) reaches the target or cannot",
            markup=False,
        )
        with run:
            # one more round at a time while the stopping rule says go on; stored boots count, none is repeated
            while _confirmation_of(storage, spec.name) is None and run.boot(
                laid(max(boots, run.stored // len(plan.trials) + 1))
            ):
                pass
    view = load_evidence(storage, spec.name).claims
    assert view is not None  # promoted above
    if view.unfinished() is None:
        write_record(study, _record_of(view))
    return view
