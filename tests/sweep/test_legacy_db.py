"""A database written by an earlier version still loads: what it stored reads back as that version read it."""

import shutil
from pathlib import Path

from sweep.claims import load_evidence
from sweep.store import open_existing

LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy-a560d4a.db"


def test_a_database_written_by_a560d4a_still_loads(tmp_path):
    db = tmp_path / "legacy.db"
    shutil.copy(LEGACY, db)
    storage = open_existing(f"sqlite:///{db}")
    try:
        evidence = load_evidence(storage, "legacy")
    finally:
        storage.close()
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
