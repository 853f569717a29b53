"""Boots drawn from the claims' own model of a run of fresh boots: the world the claims' statistics are checked in.

For the log TPS of one timed run of configuration c in boot b: ``L[c, set] + u[b] + gamma [second run] + e``
(``sweep.claims._fit``). ``drawn_boots`` lays the boots out as a run does (interleaved rounds, alternating
which run comes first) and draws each boot's ``u`` and each run's ``e``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from sweep.claims import heldout_first
from sweep.store import BootRecord

__all__ = ["drawn_boots"]


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
    shift: float = 0.0,
    machine: str | None = None,
) -> list[BootRecord]:
    """Boots of configurations whose first public and held-out runs read (P, H) tok/s, each boot moved by
    N(0, boot_sd) (a mapping: each configuration's own), each run by N(0, run_sd), a boot's second run ``gamma``
    faster; PPL ``ppl`` (each configuration's, where a mapping) moved by N(0, ppl_sd) a boot; ``shift``: the whole
    run's log offset (a machine faster or slower that hour); ``machine``: the provenance's machine id."""
    rng = rng or random.Random(seed)
    out = []
    for r in range(rounds):
        for i, (trial, (public, held)) in enumerate(levels.items()):
            sd = boot_sd[trial] if isinstance(boot_sd, Mapping) else boot_sd
            u, second_held = shift + rng.gauss(0, sd), not heldout_first(r)
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
