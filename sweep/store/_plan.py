"""A promotion's plan (``PromotionPlan``: what its boots are and what they are judged by), its
confirmation's (``ConfirmationPlan``: the chosen point and its control, booted again in a run of their own)
and the client offset its odds carry (``ClientOffset``): what ``sweep.claims`` stores in the study's record.

``sweep.claims`` stores the plan in the study's record (``StudyRecord.promotion``) before the first boot,
so an interrupted promotion goes on with the same plan; every reader of the claims reads it back
through the record, never as a dict. Its gate is the study's ``Gate``
with what resolves it on the promotion's PPL references: a number (absolute, or the sweep's baseline
scored those references) or the baseline trial promoted with the candidates, whose boots resolve it.
The confirmation's plan is the record's ``confirmation``, stored before its first boot; it belongs to the
promotion run it names, and a new promotion leaves it behind. Plans stored before the confirmation was sequential
(no ``max_boots``) ran a fixed number of boots: they read so. A serving study's plan carries its SLO (``slo``): its
boots run the study's load levels and its claims are of goodput under that SLO, as the plan states it (editing the
study file later changes no claim made before).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from engine.config import BenchProfile
from sweep.judgement import BETWEEN_PRIOR, BETWEEN_PRIOR_DF, Gate, Slo

__all__ = ["ClientOffset", "ConfirmationPlan", "PromotionPlan"]


@dataclass(frozen=True, kw_only=True)
class PromotionPlan:
    run_id: str
    trials: tuple[int, ...]  # the configurations, by their trial, in the interleave's order
    boots: int  # fresh boots of each
    profile: BenchProfile  # what a boot measures
    target: float  # the P(VERIFIED) a claim must reach to be recommended
    noise_floor: float  # the least relative spread a private re-run is given
    gate: Gate  # resolved, or resolvable from the baseline trial's boots
    # fresh boots of the chosen point and its control in the confirmation (0: a plan stored before confirmations)
    confirm_boots: int = 0
    between_prior: float = BETWEEN_PRIOR  # the odds' machine term as the study states it (MachineTerm)
    between_prior_df: float = BETWEEN_PRIOR_DF  # the degrees of freedom that statement is worth
    slo: Slo | None = None  # a serving study's: its claims are of goodput under it (sweep.claims._serving)

    @property
    def planned(self) -> int:
        return len(self.trials) * self.boots

    def same_plan(self, other: PromotionPlan) -> bool:
        """The same boots judged the same way: a run of this plan goes on where the other stopped."""
        return replace(self, run_id=other.run_id) == other

    def to_attr(self) -> dict[str, Any]:
        """As the study's user attribute (JSON)."""
        return {
            "run_id": self.run_id,
            "trials": list(self.trials),
            "boots": self.boots,
            "profile": asdict(self.profile),
            "target": self.target,
            "noise_floor": self.noise_floor,
            "gate": asdict(self.gate),
            "confirm_boots": self.confirm_boots,
            "between_prior": self.between_prior,
            "between_prior_df": self.between_prior_df,
            "slo": None if self.slo is None else asdict(self.slo),
        }

    @classmethod
    def from_attr(cls, attr: dict[str, Any]) -> PromotionPlan:
        """Read a stored plan, including those written before the gate was typed (a tagged dict) and before the
        confirmation (no ``confirm_boots``: none is run for it, and none of its claims is recommended), before the
        prior had its degrees of freedom (no ``between_prior_df``: the default's) and before serving claims (no
        ``slo``: a claim of TPS)."""
        gate = attr["gate"]
        kind = gate.get("kind")
        if kind in ("absolute", "sweep"):  # a number already resolved on the promotion's references
            typed = Gate(ppl_max=gate["ppl"])
        elif kind == "baseline":
            typed = Gate(ppl_max_ratio=gate["ratio"], baseline_trial=gate["trial"])
        else:
            typed = Gate(**gate)
        return cls(
            run_id=attr["run_id"],
            trials=tuple(attr["trials"]),
            boots=attr["boots"],
            profile=BenchProfile.from_record(attr["profile"]),
            target=attr["target"],
            noise_floor=attr["noise_floor"],
            gate=typed,
            confirm_boots=attr.get("confirm_boots", 0),
            between_prior=attr.get("between_prior", BETWEEN_PRIOR),
            between_prior_df=attr.get("between_prior_df", BETWEEN_PRIOR_DF),
            slo=None if attr.get("slo") is None else Slo(**attr["slo"]),
        )


@dataclass(frozen=True, kw_only=True)
class ConfirmationPlan:
    """The confirmation of the point a promotion chose: its boots and its control's, in a run of their own."""

    run_id: str
    promotion_run: str  # the promotion whose choice it confirms
    chosen: int
    control: int | None  # the runner-up, else the baseline; None: the promotion had no other candidate
    boots: int  # fresh boots of each before the stopping rule is asked (``sweep.claims._confirm.stopping``)
    max_boots: int | None = None  # the most of each it adds; None: ``boots``, fixed (a plan stored before)

    @property
    def trials(self) -> tuple[int, ...]:
        return (self.chosen,) if self.control is None else (self.chosen, self.control)

    @property
    def cap(self) -> int:
        return self.boots if self.max_boots is None else self.max_boots

    @property
    def planned(self) -> int:
        """The most boots it runs."""
        return len(self.trials) * self.cap

    def to_attr(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_attr(cls, attr: dict[str, Any]) -> ConfirmationPlan:
        return cls(**attr)


@dataclass(frozen=True, kw_only=True)
class ClientOffset:
    """How the organisers' TPS client (sglang's ``bench_serving``) reads beside this project's, measured on
    one server with the two alternated (``python -m benchmarks.harness_agreement --study``): the mean and
    spread of log(theirs / ours) over its rounds. Boots are timed by this project's client and the private
    re-run by theirs, so a claim's odds carry it; it is stored in the study's record (``StudyRecord.client_offset``)."""

    log_mean: float
    sd: float
    rounds: int
    basis: str  # what it was measured on: the stack, the prompts, the machine

    def describe(self) -> str:
        return (
            f"the organisers' client reads {math.expm1(self.log_mean):+.1%} beside ours (sd {self.sd:.1%} over "
            f"{self.rounds} alternated rounds; {self.basis})"
        )

    def part(self) -> tuple[float, float]:
        """Its uncertainty as a variance part of a re-run's law (variance, degrees of freedom)."""
        return self.sd**2 / self.rounds, self.rounds - 1

    def to_attr(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_attr(cls, attr: dict[str, Any]) -> ClientOffset:
        return cls(**attr)
