"""A stored study opened to read, as every command that reads one opens it (``sweep.verify``, ``sweep.submit``).

The study's file (``load_study``: its manifest, profile, gate) and what its database holds (``load_evidence``) are
one study only if the database measured the manifest the file names now: a study run with ``--manifest`` is read
with the same ``--manifest``, or the command stops (``StudyMismatchError``, exit 2) before it reads a figure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sweep.claims import StudyEvidence, load_evidence
from sweep.search import StudySpec, load_study
from sweep.store import Storage, open_existing

__all__ = ["OpenStudy", "open_study", "read_study"]


@dataclass(frozen=True, kw_only=True)
class OpenStudy:
    spec: StudySpec
    storage: Storage  # open while the ``open_study`` block runs
    evidence: StudyEvidence


@contextmanager
def open_study(
    study: str, *, storage: str, manifest: str | None, accelerator: str | None = None
) -> Iterator[OpenStudy]:
    """The study (a name or a .toml path; ``manifest``: the sweep's ``--manifest``; ``accelerator``: its
    ``--accelerator``) and its database at ``storage``, open for the block. Raises StudyMismatchError where the database measured another manifest, and what
    ``load_study``, ``open_existing`` and ``load_evidence`` raise for a study that does not load."""
    spec = load_study(study, manifest=manifest, accelerator=accelerator)
    opened = open_existing(storage)
    try:
        evidence = load_evidence(opened, spec.name)
        evidence.stored.require_manifest(spec.name, spec.manifest.name)
        yield OpenStudy(spec=spec, storage=opened, evidence=evidence)
    finally:
        opened.close()


def read_study(study: str, *, storage: str, manifest: str | None) -> tuple[StudySpec, StudyEvidence]:
    """The study and what its database holds (``open_study``), the database closed again."""
    with open_study(study, storage=storage, manifest=manifest) as opened:
        read = opened.spec, opened.evidence
    return read
