"""What a study stores beside Optuna's own, typed once: ``StudyRecord``, read and written here alone.

Optuna keeps a study's trials; the project keeps, in the study's user attributes, what every later reader
needs and has no study file for: the identity its trials were measured under (manifest, profile), the
stack as it ran, the gate, target and noise floor its claims and verdicts are judged by, a serving study's
SLO, the latest promotion's and confirmation's plans, the client offset its odds carry, and a summary of
its claims, of TPS or (a serving study's) of goodput (which optuna-dashboard lists). ``read_record(study)`` gives
them typed, ``write_record(study, record)`` stores the fields that changed; no other module names an attribute.

Versioned: a study written since carries ``record_version``; one without it was written by an earlier
version (a560d4a, 18a687f) under the same keys, some of them absent (a560d4a stored no ``target``: read as
None, where the reader's default applies). A record of a newer version than this code knows is refused,
not misread. Version 2 added a serving promotion's SLO to its plan and the summary of its claims of goodput
(``serving_claims``): a version-1 reader would take such a promotion for one of TPS.

A trial's own marks (``TrialMarks``: the baseline, the trial a retry re-runs) ride on its user attributes
too, set when it is queued; its figures, which optuna-dashboard shows, are the ``TrialRecord``'s
(``write_trial_figures``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from errors import StudyMismatchError
from sweep.judgement import Slo
from sweep.store._plan import ClientOffset, ConfirmationPlan, PromotionPlan
from sweep.store._trial import TrialRecord

__all__ = [
    "RECORD_VERSION",
    "StudyRecord",
    "TrialMarks",
    "read_record",
    "trial_marks",
    "write_record",
    "write_trial_figures",
]

# 1: the first typed record (the keys of 18a687f and before, and this version number)
# 2: a serving promotion's plan carries its SLO; ``serving_claims``, the summary of its claims of goodput
RECORD_VERSION = 2
_VERSION_KEY = "record_version"


class _Readable(Protocol):
    """An Optuna study, its summary or a trial: what holds user attributes."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...


class _Attributed(_Readable, Protocol):
    def set_user_attr(self, key: str, value: Any) -> None: ...


@dataclass(frozen=True, kw_only=True)
class StudyRecord:
    """What a study stores beside its trials; None: not stored (an older version's study, or not yet)."""

    manifest: str | None = None  # the stack's name its trials were measured with (its identity)
    profile: dict[str, Any] | None = None  # the bench profile as stored (its identity; ``same_profile`` compares)
    manifest_json: dict[str, Any] | None = None  # the stack as it ran, secrets redacted: what a submission writes
    gate: str | None = None  # the gate as the study file states it (``Gate.describe``)
    noise_floor: float | None = None  # [promotion] noise_floor: what a study never promoted is judged by
    target: float | None = None  # [promotion] target: likewise
    objectives: str | None = None  # what the two objectives are, in words, for optuna-dashboard
    serving_slo: Slo | None = None  # a serving study's SLO: what the dashboards judge its load levels by
    promotion: PromotionPlan | None = None  # the latest promotion's plan
    confirmation: ConfirmationPlan | None = None  # the latest confirmation's plan
    client_offset: ClientOffset | None = None  # the organisers' client beside ours, where it was measured
    claims: tuple[dict[str, Any], ...] | None = None  # a summary of the finished claims, for optuna-dashboard
    # a serving study's: a summary of its finished claims of goodput, for optuna-dashboard
    serving_claims: tuple[dict[str, Any], ...] | None = None

    def require_manifest(self, study: str, name: str) -> None:
        """Raise StudyMismatchError where the study was measured with another manifest than ``name``."""
        if self.manifest is not None and self.manifest != name:
            raise StudyMismatchError(
                f"study {study!r} was measured with manifest {self.manifest!r}, not {name!r}: pass the sweep's "
                "--manifest"
            )


def _encode(name: str, value: Any) -> Any:
    if isinstance(value, (PromotionPlan, ConfirmationPlan, ClientOffset)):
        return value.to_attr()
    if isinstance(value, Slo):
        return asdict(value)
    if name in ("claims", "serving_claims"):
        return list(value)
    return value


def _decode(name: str, value: Any) -> Any:
    match name:
        case "promotion":
            return PromotionPlan.from_attr(value)
        case "confirmation":
            return ConfirmationPlan.from_attr(value)
        case "client_offset":
            return ClientOffset.from_attr(value)
        case "serving_slo":
            return Slo(**value)
        case "claims" | "serving_claims":
            return tuple(value)
        case "noise_floor" | "target":
            return float(value)
    return value


def read_record(study: _Readable) -> StudyRecord:
    """The study's record, from an Optuna study (or its summary) of any version up to ``RECORD_VERSION``."""
    attrs = study.user_attrs
    version = attrs.get(_VERSION_KEY, 0)
    if not isinstance(version, int) or version > RECORD_VERSION:
        raise StudyMismatchError(
            f"the study's record is of version {version!r}, newer than this code reads ({RECORD_VERSION}): "
            "read it with the version of gemma-sweep that wrote it"
        )
    stored = {f.name: _decode(f.name, attrs[f.name]) for f in fields(StudyRecord) if attrs.get(f.name) is not None}
    return StudyRecord(**stored)


def write_record(study: _Attributed, record: StudyRecord) -> None:
    """Store the fields of ``record`` that differ from the study's (None fields are left as they are)."""
    held = read_record(study)
    if study.user_attrs.get(_VERSION_KEY) != RECORD_VERSION:
        study.set_user_attr(_VERSION_KEY, RECORD_VERSION)
    for f in fields(StudyRecord):
        value = getattr(record, f.name)
        if value is not None and value != getattr(held, f.name):
            study.set_user_attr(f.name, _encode(f.name, value))


@dataclass(frozen=True, kw_only=True)
class TrialMarks:
    """What a queued trial is: the baseline (the manifest as it is), or a retry of a lost or interrupted trial."""

    is_baseline: bool = False
    retry_of: int | None = None

    def attrs(self) -> dict[str, Any]:
        """As ``enqueue_trial``'s user attributes."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def trial_marks(trial: _Readable) -> TrialMarks:
    attrs = trial.user_attrs
    return TrialMarks(is_baseline=bool(attrs.get("is_baseline")), retry_of=attrs.get("retry_of"))


def write_trial_figures(trial: _Attributed, record: TrialRecord) -> None:
    """A closed trial's figures as its user attributes, where optuna-dashboard shows them."""
    for key, value in record.optuna_attrs().items():
        trial.set_user_attr(key, value)
