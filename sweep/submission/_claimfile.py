"""``claim.json``: what a submission folder claims, typed and versioned (``ClaimFile``).

The folder's writer makes it from the chosen point (``ClaimFile.of``) and writes it; the check
(``sweep.submit --check``), the folder's README and the dashboards' ``best/`` read the same model back,
never a dict. A file that does not parse is refused with the field named (``read_claim``). Versions:

    1   written before the file was typed (no ``version`` field): the same fields, read as they are
    2   ``version`` added; the verdict carries only what a reader shows
    3   the odds are of the organisers' re-run where the claim was confirmed (``odds_of``, ``machine_term``),
        the within-run figure beside them (``p_within_run``); ``p_later`` is no longer written
    4   a confirmed claim's P where the organisers' machine reads a known 1-8% from yours (``p_at_machine``) and
        the P boots without end would give (``p_ceiling``, ``ceiling``)
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
CLAIM_VERSION = 4


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
    odds_of: str | None = None  # what p_verified is of: "organisers' re-run" (confirmed), or a screening figure
    p_within_run: float | None = Field(default=None, ge=0, le=1)  # a re-run within the claim's own run of boots
    machine_term: str | None = None  # what the organisers' re-run's odds assume of another machine
    # (machine term, P) with the organisers' machine a known distance away (sweep.claims.MACHINE_TERMS); () where the
    # claim was not confirmed, or the file is older than version 4
    p_at_machine: tuple[tuple[float, float], ...] = ()
    p_ceiling: float | None = Field(default=None, ge=0, le=1)  # the P boots without end would give (confirmed only)
    ceiling: str | None = None  # what that ceiling says
    p_later: float | None = Field(default=None, ge=0, le=1)  # versions 1 and 2: a later run's odds
    between_runs: str | None = None  # versions 1 and 2: what p_later rests on
    promoted: bool = True  # its figures come from its promotion's boots (else from its one boot in the sweep)
    boots: int = Field(ge=1)
    unmeasured: str | None = None  # why the odds are missing, where the promotion could not measure its noise
    rerun_90: tuple[float, float] | None = None  # one private re-run's 90% interval
    ppl: float = Field(gt=0)
    ppl_tol: float | None = None
    gate: float | None = None
    profile: dict[str, Any]  # what the claim was measured at: the check measures the same (engine.config)
    verdict: VerdictSummary | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)  # what the claim's measurements ran on

    @classmethod
    def of(cls, choice: Choice, *, study: str, view: StudyClaims | None) -> ClaimFile:
        """The claim of a chosen point: its promotion's figures where it was promoted (``view``, the study's
        claims), its sweep trial's otherwise."""
        c, r, v = choice.claim, choice.record, choice.verdict
        promoted = c is not None and view is not None
        return cls(
            study=study,
            trial=r.trial_number,
            knobs=dict(r.knobs),
            claim_tps=choice.tps,
            verified=choice.verified,
            label=choice.label,
            p_verified=c.p_verified if c else None,
            odds_of=c.basis if c else None,
            p_within_run=c.p_within_run if c else None,
            machine_term=c.machine.describe() if c and c.machine else None,
            p_at_machine=c.p_at_machine if c and c.machine else (),
            p_ceiling=c.ceiling.p if c and c.machine and c.ceiling else None,
            ceiling=c.ceiling.describe() if c and c.machine and c.ceiling else None,
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
            "| P(VERIFIED), the organisers' re-run | "
            + (
                f"{self.p_verified:.2f} (a later run on another machine: {self.machine_term})"
                if self.p_verified is not None and self.machine_term is not None
                else "not estimated: the claim was not confirmed"
                + ("" if self.p_verified is None else f" (a screening figure within its run: {self.p_verified:.2f})")
            )
            + " |",
            *self._machine_rows(),
            "| P(VERIFIED), within its run | "
            + (
                "-"
                if self.p_within_run is None
                else f"{self.p_within_run:.2f} (a re-run within the confirmation's own run of boots, no machine term)"
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

    def _machine_rows(self) -> list[str]:
        """What the confirmed odds assume of the organisers' machine, and what more boots could buy."""
        rows = []
        if self.p_at_machine:
            at = ", ".join(f"{sd:.0%}: {p:.2f}" for sd, p in self.p_at_machine)
            rows.append(
                f"| P(VERIFIED), their machine a known distance from yours | {at} (read the one that fits the "
                "organisers' machine) |"
            )
        if self.p_ceiling is not None:
            rows.append(f"| P(VERIFIED), boots without end | {self.ceiling} |")
        return rows

    def odds_text(self) -> str:
        """The claim's odds as a reader prints them."""
        if self.p_verified is None:
            return "the claim has no P(VERIFIED) (never promoted, or its noise not measured)"
        if self.machine_term is None:
            return (
                f"the claim's P(VERIFIED) is a screening figure, {self.p_verified:.2f} within its run (not confirmed)"
            )
        return f"the claim's P(VERIFIED) for the organisers' re-run is {self.p_verified:.2f} ({self.machine_term})"


def measured_on(choice: Choice, view: StudyClaims | None) -> dict[str, Any]:
    """What the claim's measurements ran on (``engine.host``): its promotion's boots, or its trial's own."""
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
    if version not in range(1, CLAIM_VERSION + 1):
        raise UsageError(
            f"{path}: field 'version': {version!r} is not a version this tool reads (1 to {CLAIM_VERSION})"
        )
    try:
        return ClaimFile.model_validate({**data, "version": CLAIM_VERSION})
    except ValidationError as exc:
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise UsageError(f"{path}: {problems}") from None
