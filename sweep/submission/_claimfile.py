"""``claim.json``: what a submission folder claims, typed and versioned (``ClaimFile``).

The folder's writer makes it from the chosen point (``ClaimFile.of``) and writes it; the check
(``sweep.submit --check``), the folder's README and the dashboards' ``best/`` read the same model back,
never a dict. A file that does not parse is refused with the field named (``read_claim``). Versions:

    1   written before the file was typed (no ``version`` field): the same fields, read as they are
    2   ``version`` added; the verdict carries only what a reader shows
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from errors import UsageError
from sweep.claims import StudyClaims
from sweep.submission._choose import Choice

__all__ = ["CLAIM_FILE", "CLAIM_VERSION", "ClaimFile", "VerdictSummary", "measured_on", "read_claim"]

CLAIM_FILE = "claim.json"
CLAIM_VERSION = 2


class VerdictSummary(BaseModel):
    """The verification a claim passed (or did not), as a reader shows it."""

    model_config = ConfigDict(extra="ignore", frozen=True)  # version 1 held the whole verdict: the rest is left

    verdict: Literal["VERIFIED", "INVALID", "UNDECIDED"]
    claimed_tps: float
    repeats: int = Field(ge=0)
    tps_gap_pct: float | None = None
    gap_low_pct: float | None = None
    gap_high_pct: float | None = None
    run_id: str


class ClaimFile(BaseModel):
    """One submission's claim (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = CLAIM_VERSION
    study: str
    trial: int = Field(ge=0)
    knobs: dict[str, int | bool | str]
    claim_tps: float = Field(gt=0)  # the TPS to report
    verified: bool  # VERIFIED against this claim
    label: str  # "VERIFIED", or what else it is
    p_verified: float | None = Field(default=None, ge=0, le=1)  # None: never promoted, or its noise unmeasured
    p_later: float | None = Field(default=None, ge=0, le=1)  # for a re-run in a later run of boots; None: not measured
    between_runs: str | None = None  # what p_later rests on
    promoted: bool = True  # its figures come from its promotion's boots (else from its one boot in the sweep)
    boots: int = Field(ge=1)
    unmeasured: str | None = None  # why the odds are missing, where the promotion could not measure its noise
    rerun_90: tuple[float, float] | None = None  # one private re-run's 90% interval
    ppl: float = Field(gt=0)
    ppl_tol: float | None = None
    gate: float | None = None
    profile: dict[str, Any]  # what the claim was measured at: the check measures the same (engine.profiles)
    verdict: VerdictSummary | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)  # what the claim's measurements ran on

    @classmethod
    def of(cls, choice: Choice, *, study: str, view: StudyClaims | None) -> ClaimFile:
        """The claim of a chosen point: its promotion's figures where it was promoted (``view``, the study's
        claims), its sweep trial's otherwise."""
        c, r, v = choice.claim, choice.record, choice.verdict
        promoted = c is not None and view is not None
        between = view.between.describe() if view is not None and view.between is not None else None
        return cls(
            study=study,
            trial=r.trial_number,
            knobs=dict(r.knobs),
            claim_tps=choice.tps,
            verified=choice.verified,
            label=choice.label,
            p_verified=c.p_verified if c else None,
            p_later=c.p_later if c else None,
            between_runs=between if c and c.p_later is not None else None,
            promoted=promoted,
            boots=c.boots if c else 1,
            unmeasured=c.unmeasured if c else None,
            rerun_90=(c.rerun_low, c.rerun_high)
            if c and c.rerun_low is not None and c.rerun_high is not None
            else None,
            ppl=c.ppl if c else (r.ppl or 0.0),
            ppl_tol=c.ppl_tol if c else None,
            gate=view.gate if promoted and view else r.gate,
            profile=asdict(view.plan.profile) if promoted and view else dict(r.profile),
            verdict=None if v is None else VerdictSummary.model_validate(v, from_attributes=True),
            provenance={
                k: val for k, val in measured_on(choice, view).items() if k != "packages"
            },  # pins: the manifest's
        )

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, default=str) + "\n"

    def rows(self) -> list[str]:
        """The claim as a two-column markdown table, as the folder's README and the dashboards' ``best/`` show it."""
        where = f" (claim over {self.boots} fresh boots at profile {self.profile.get('name')})"
        v, made = self.verdict, self.provenance
        return [
            "| | |",
            "|---|---|",
            f"| trial | {self.trial} of study {self.study} |",
            f"| knobs | {' '.join(f'`{k}={val}`' for k, val in sorted(self.knobs.items()))} |",
            f"| TPS to report | **{self.claim_tps:.2f}** tok/s{where if self.promoted else ' (one boot of the sweep)'} |",
            "| a private re-run, 90% | "
            + (
                f"{self.rerun_90[0]:.1f} .. {self.rerun_90[1]:.1f} tok/s"
                if self.rerun_90 is not None
                else self.unmeasured or ("not estimated" if self.promoted else "not estimated (never promoted)")
            )
            + " |",
            "| P(VERIFIED) | "
            + (
                f"{self.p_verified:.2f} (a re-run within the promotion's run of boots)"
                if self.p_verified is not None
                else "not estimated"
            )
            + " |",
            "| P(VERIFIED), a later run | "
            + (
                f"{self.p_later:.2f} (between runs, {self.between_runs})"
                if self.p_later is not None
                else "not measured: no later run of these boots is stored (`python -m sweep.verify` makes one); a "
                "re-run on another day or machine, as the organisers' is, can move further than the promotion's "
                "boots did"
            )
            + " |",
            f"| PPL | {self.ppl:.4f}"
            + ("" if self.ppl_tol is None else f" ± {self.ppl_tol:.4f} (boot to boot)")
            + ("" if self.gate is None else f", gate {self.gate:.4f}")
            + " |",
            "| verification | "
            + (
                f"{v.verdict}: held-out TPS {v.tps_gap_pct:+.1f}% of the claim (90% interval {v.gap_low_pct:+.1f}.."
                f"{v.gap_high_pct:+.1f}%), {v.repeats} boot(s)"
                if v and v.tps_gap_pct is not None and v.gap_low_pct is not None and v.gap_high_pct is not None
                else "none"
            )
            + " |",
            f"| measured on | {made.get('stack')} {made.get('stack_version')}, torch {made.get('torch')}, GPU "
            f"{', '.join(made.get('gpu') or []) or 'none'} |",
        ]

    def odds_text(self) -> str:
        """The claim's odds as a reader prints them."""
        if self.p_verified is None:
            return "the claim has no P(VERIFIED) (never promoted, or its noise not measured)"
        later = "" if self.p_later is None else f", for a later run {self.p_later:.2f}"
        return f"the claim's P(VERIFIED) is {self.p_verified:.2f}{later}"


def measured_on(choice: Choice, view: StudyClaims | None) -> dict[str, Any]:
    """What the claim's measurements ran on (``engine.provenance``): its promotion's boots, or its trial's own."""
    boots = [b.provenance for b in (view.boots if view else ()) if b.trial_number == choice.record.trial_number]
    return next((p for p in boots if p), choice.record.provenance)


def read_claim(path: Path) -> ClaimFile:
    """A folder's ``claim.json``; raises UsageError naming the field that does not parse."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a claim of this tool ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a claim is a JSON object, got {type(data).__name__}")
    version = data.get("version", 1)
    if version not in (1, CLAIM_VERSION):
        raise UsageError(
            f"{path}: field 'version': {version!r} is not a version this tool reads (1 or {CLAIM_VERSION})"
        )
    try:
        return ClaimFile.model_validate({**data, "version": CLAIM_VERSION})
    except ValidationError as exc:
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise UsageError(f"{path}: {problems}") from None
