"""A promotion's plan: ``PromotionPlan``, what its boots are and what they are judged by.

``sweep.claims`` writes it to the study's user attribute ``promotion`` (``PROMOTION_ATTR``) before
the first boot, so an interrupted promotion goes on with the same plan; every reader of the claims
reads it back through ``PromotionPlan.from_attr``, never as a dict. Its gate is the study's ``Gate``
with what resolves it on the promotion's PPL references: a number (absolute, or the sweep's baseline
scored those references) or the baseline trial promoted with the candidates, whose boots resolve it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from engine.profiles import BenchProfile
from sweep.judgement import Gate

__all__ = ["CLAIMS_ATTR", "PROMOTION_ATTR", "PromotionPlan"]

PROMOTION_ATTR = "promotion"  # the study's user attribute holding the latest promotion's plan
CLAIMS_ATTR = "claims"  # a summary of its claims, which optuna-dashboard lists


@dataclass(frozen=True, kw_only=True)
class PromotionPlan:
    run_id: str
    trials: tuple[int, ...]  # the configurations, by their trial, in the interleave's order
    boots: int  # fresh boots of each
    profile: BenchProfile  # what a boot measures
    target: float  # the P(VERIFIED) a claim must reach to be recommended
    noise_floor: float  # the least relative spread a private re-run is given
    gate: Gate  # resolved, or resolvable from the baseline trial's boots

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
        }

    @classmethod
    def from_attr(cls, attr: dict[str, Any]) -> PromotionPlan:
        """Read a stored plan, including those written before the gate was typed (a tagged dict)."""
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
        )
