"""Boots drawn from the claims' own model of a run of fresh boots: the world the claims' statistics are checked in.

For the log TPS of one timed run of configuration c in boot b: ``L[c, set] + u[b] + gamma [second run] + e``
(``sweep.claims._fit``). ``drawn_boots`` lays the boots out as a run does (interleaved rounds, alternating
which run comes first) and draws each boot's ``u`` and each run's ``e``; ``confirmed`` runs a confirmation of
such boots as the tool runs one, sequentially, stopped by the tool's own rule.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence

from sweep.claims import ConfirmationPlan, PromotionPlan, StudyClaims, claims_of, heldout_first
from sweep.store import BootRecord

__all__ = ["confirmed", "drawn_boots"]


def drawn_boots(
    levels: Mapping[int, tuple[float, float]],
    *,
    rounds: int,
    boot_sd: float | Mapping[int, float] = 0.0,
    run_sd: float = 0.0,
    gamma: float = 0.0,
    ppl: float | Mapping[int, float] = 2.3,
    ppl_sd: float = 0.0,
    gate: float | None = None,
    seed: int = 0,
    rng: random.Random | None = None,
    run_id: str = "p1",
    shift: float | Sequence[float] = 0.0,
    machine: str | None = None,
    start: int = 0,
) -> list[BootRecord]:
    """Boots of configurations whose first public and held-out runs read (P, H) tok/s, each boot moved by
    N(0, boot_sd) (a mapping: each configuration's own), each run by N(0, run_sd), a boot's second run ``gamma``
    faster; PPL ``ppl`` (each configuration's, where a mapping) moved by N(0, ppl_sd) a boot; ``shift``: the whole
    run's log offset (a machine faster or slower that hour), or each boot's in the order drawn (a machine whose
    level moves during the run); ``machine``: the provenance's machine id; ``start``: the first round's index in
    its run (a run drawn a round at a time, as a sequential confirmation boots it)."""
    rng = rng or random.Random(seed)
    shifts = list(shift) if isinstance(shift, Sequence) else [shift] * (rounds * len(levels))
    if len(shifts) != rounds * len(levels):
        raise ValueError(f"{len(shifts)} shifts for {rounds} round(s) of {len(levels)} configuration(s)")
    out = []
    for r in range(start, start + rounds):
        for i, (trial, (public, held)) in enumerate(levels.items()):
            sd = boot_sd[trial] if isinstance(boot_sd, Mapping) else boot_sd
            u, second_held = shifts[(r - start) * len(levels) + i] + rng.gauss(0, sd), not heldout_first(r)
            p = math.log(public) + u + rng.gauss(0, run_sd) + (0.0 if second_held else gamma)
            h = math.log(held) + u + rng.gauss(0, run_sd) + (gamma if second_held else 0.0)
            true_ppl = ppl[trial] if isinstance(ppl, Mapping) else ppl
            read_ppl = true_ppl * math.exp(rng.gauss(0, ppl_sd)) if ppl_sd else true_ppl
            out.append(
                BootRecord(
                    study_name="s",
                    trial_number=trial,
                    run_id=run_id,
                    repeat=r,
                    order=r * len(levels) + i,
                    status="complete",
                    claimed_tps=public,
                    claimed_ppl=true_ppl,
                    gate=gate,
                    prompts="h",
                    refs="r",
                    profile="quick",
                    first="heldout" if heldout_first(r) else "public",
                    public_tps=math.exp(p),
                    tps=math.exp(h),
                    ppl=read_ppl,
                    provenance={} if machine is None else {"machine": machine},
                )
            )
    return out


def confirmed(
    plan: PromotionPlan,
    promotion: Sequence[BootRecord],
    confirmation: ConfirmationPlan,
    draw: Callable[[int, int], list[BootRecord]],
) -> tuple[StudyClaims, list[BootRecord]]:
    """The claims once the ``confirmation`` of ``plan``'s choice has stopped, and its boots, run as
    ``sweep.claims.confirm`` runs it: ``confirmation.boots`` rounds of its pair, then a round at a time until the
    tool's own stopping rule (``sweep.claims.stopping``, asked through ``claims_of``) stops it. ``draw(rounds,
    start)``: that many rounds of fresh boots of the pair (``drawn_boots``), from round ``start``."""
    boots = draw(confirmation.boots, 0)
    while True:
        done = claims_of(plan, promotion, confirmation=confirmation, confirming=boots)
        assert done.confirmation is not None  # the plan confirms the promotion's choice
        if done.confirmation.stop is not None:
            return done, boots
        boots += draw(1, len(boots) // len(confirmation.trials))
