"""A database written by an earlier version still loads: what it stored reads back as that version read it."""

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from sweep.claims import StudyEvidence, load_evidence
from sweep.store import open_existing

DATA = Path(__file__).resolve().parents[1] / "data"
LEGACY = DATA / "legacy-a560d4a.db"
# What 18a687f read from both databases (``reading``), but the verdicts of a study verified with no promotion:
# their target is the one its verification printed them with (18a687f re-read them at the default target), and the
# claims of a confirmation, whose machine term is pooled with its prior since (tests/data/README.md)
READINGS = DATA / "legacy-readings.json"


def _evidence(tmp_path: Path, db: str, study: str) -> StudyEvidence:
    copy = tmp_path / db
    shutil.copy(DATA / db, copy)
    storage = open_existing(f"sqlite:///{copy}")
    try:
        return load_evidence(storage, study)
    finally:
        storage.close()


def reading(evidence: StudyEvidence) -> dict[str, Any]:
    """What a study's claims and verdicts print, as JSON: the figures a later version must read back the same."""
    view = evidence.claims
    best = view.best_claims() if view else {}
    return {
        "target": evidence.target,
        "floor": evidence.floor,
        "gate": view.gate if view else None,
        "claims": {str(n): c.claim for n, c in best.items()},
        "p_verified": {str(n): c.p_verified for n, c in best.items()},
        "recommended": view.recommended.trial_number if view and view.recommended else None,
        "verdicts": {
            str(n): {"verdict": v.verdict, "gate": v.gate, "target": v.target, "p_rerun": v.p_rerun}
            for n, v in evidence.verdicts.items()
        },
    }


def test_a_database_written_by_a560d4a_still_loads(tmp_path):
    evidence = _evidence(tmp_path, LEGACY.name, "legacy")
    records = {r.trial_number: r for r in evidence.records}
    assert sorted(records) == [0, 1, 2, 3]
    assert records[0].is_baseline and records[0].tps is not None and abs(records[0].tps - 939.98778) < 1e-3
    assert records[2].reuse == "copy" and records[2].source == 0
    assert {kind: len(boots) for kind, boots in evidence.boots.items()} == {
        "promotion": 6,
        "confirmation": 0,
        "verification": 4,
        "calibration": 3,
    }
    assert evidence.plan is not None and evidence.plan.trials == (1, 0) and evidence.plan.boots == 3
    assert evidence.claims is not None and evidence.claims.complete
    assert sorted(c.trial_number for c in evidence.claims.claims) == [0, 1]
    # a promotion planned before confirmations: it plans none, is finished, and recommends nothing
    assert evidence.plan.confirm_boots == 0 and evidence.claims.unfinished() is None
    assert evidence.claims.recommended is None
    assert all(b.measured for kind in evidence.boots.values() for b in kind)
    # the verification's verdicts are recomputed from its stored rows: one per trial it booted
    assert sorted(evidence.verdicts) == [0, 1]


@pytest.mark.parametrize(
    "db, study",
    [
        ("legacy-a560d4a.db", "legacy"),
        ("legacy-18a687f.db", "legacy"),
        ("legacy-18a687f.db", "unpromoted"),
        ("legacy-18a687f.db", "verified"),
    ],
)
def test_the_claims_and_verdicts_of_older_databases_read_as_they_printed(tmp_path, db, study):
    expected = _flat(json.loads(READINGS.read_text())[f"{db.removesuffix('.db')}/{study}"])
    read = _flat(reading(_evidence(tmp_path, db, study)))
    assert read.keys() == expected.keys()
    numbers = {k for k, v in expected.items() if isinstance(v, float)}
    assert {k: read[k] for k in expected.keys() - numbers} == {k: expected[k] for k in expected.keys() - numbers}
    # the same arithmetic: equal but for the last bits another machine's libm may round differently
    close = pytest.approx({k: expected[k] for k in numbers}, rel=1e3 * sys.float_info.epsilon)
    assert {k: read[k] for k in numbers} == close


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
