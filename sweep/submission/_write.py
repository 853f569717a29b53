"""From a study's evidence to its submission folder: ``submit_study``, what ``python -m sweep.submit`` writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from errors import UsageError
from sweep.claims import StudyEvidence
from sweep.search import StudySpec
from sweep.submission._choose import Choice, NothingToSubmit, choose
from sweep.submission._claimfile import ClaimFile, measured_on
from sweep.submission._folder import write_submission

__all__ = ["Submitted", "submit_study"]


@dataclass(frozen=True, kw_only=True)
class Submitted:
    choice: Choice
    claim: ClaimFile
    written: list[Path]


def submit_study(
    spec: StudySpec,
    evidence: StudyEvidence,
    folder: Path,
    *,
    allow_unverified: bool,
    commands: Callable[[Choice], list[str]],
) -> Submitted:
    """Choose the study's point (``choose``) and write its folder, with the ``commands`` that reproduce it. Raises NothingToSubmit where nothing may be
    submitted (an unfinished promotion, no VERIFIED point unless unverified ones are allowed), UsageError for a
    study that stored no manifest."""
    stored = evidence.stored.manifest_json
    if stored is None:
        raise UsageError(f"study {spec.name!r} stored no manifest (a study of an older version of this tool)")
    view = evidence.claims
    unfinished = view.unfinished() if view else None
    if unfinished is not None:
        raise NothingToSubmit(f"{unfinished}; `python -m sweep.run --study {spec.name}` goes on with it")
    claims = view.best_claims() if view else {}
    choice = choose(
        list(evidence.records), verdicts=evidence.verdicts, claims=claims, allow_unverified=allow_unverified
    )
    claim = ClaimFile.of(choice, study=spec.name, view=view)
    written = write_submission(
        folder,
        choice,
        claim,
        stored=stored,
        source=spec.manifest.source,
        model_id=spec.manifest.model_id,
        commands=commands(choice),
        provenance=measured_on(choice, view),
    )
    return Submitted(choice=choice, claim=claim, written=written)
