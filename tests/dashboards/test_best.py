"""``best/``: the submission's own choice of a VERIFIED point, or none: a point found INVALID or UNDECIDED is never
offered, and nothing here writes a manifest (``sweep.submit`` writes the folder)."""

from __future__ import annotations

import json

from dashboards.best import best_point, write_best
from dashboards.data import study_data
from sweep.claims import judge
from sweep.store import BootRecord, StudyRecord
from tests.dashboards.test_data import GATE, row
from tests.stacks import stub_manifest


def _verdict(number: int, claimed: float, heldout: list[float]):
    return judge(
        [
            BootRecord(
                study_name="s",
                trial_number=number,
                run_id="v",
                repeat=i,
                status="complete",
                claimed_tps=claimed,
                claimed_ppl=2.3,
                gate=GATE,
                tps=h,
                ppl=2.3,
                prompts="p",
                refs="r",
                profile="quick",
            )
            for i, h in enumerate(heldout)
        ]
    )


def _data(verdicts):
    trials = [row(0, 95.0, 2.30, is_baseline=True), row(1, 120.0, 2.35), row(3, 140.0, 2.39), row(4, 200.0, 2.50)]
    record = StudyRecord(manifest_json=stub_manifest().to_json_dict())
    return study_data(study_name="ctk", trials=trials, gate=GATE, verdicts=verdicts, stored=record)


def test_the_fastest_point_found_invalid_is_never_offered(tmp_path):
    # six boots each: enough degrees of freedom for a verdict on TPS either way
    verdicts = {1: _verdict(1, 120.0, [119.0, 121.0] * 3), 3: _verdict(3, 140.0, [100.0, 101.0] * 3)}
    assert verdicts[1].verdict == "VERIFIED" and verdicts[3].verdict == "INVALID"
    data = _data(verdicts)
    best = best_point(data)
    assert best is not None and best.record.trial_number == 1 and best.tps == 120.0  # not trial 3: faster, INVALID
    written = write_best(data, tmp_path, storage="sqlite:///runs/sweeps.db")
    assert [p.name for p in written] == ["README.md"] and not (tmp_path / "best" / "manifest.json").exists()
    readme = (tmp_path / "best" / "README.md").read_text()
    # the claim as the submission folder's README shows it, from the same model
    assert "Trial 1 is VERIFIED against its claim" in readme and "| TPS to report | **120.00** tok/s" in readme
    assert "| verification | VERIFIED: held-out TPS" in readme
    assert "python -m sweep.submit --study ctk" in readme


def test_with_no_verified_point_best_says_so_and_writes_no_manifest(tmp_path):
    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "manifest.json").write_text(json.dumps({"stale": True}))  # an earlier export's
    undecided = _verdict(1, 120.0, [112.0, 116.0, 121.0])
    verdicts = {1: undecided, 3: _verdict(3, 140.0, [100.0, 101.0] * 3)}
    assert undecided.verdict == "UNDECIDED" and verdicts[3].verdict == "INVALID"
    data = _data(verdicts)
    assert best_point(data) is None
    written = write_best(data, tmp_path, storage="sqlite:///runs/sweeps.db")
    # an earlier export's manifest goes: the point to submit is sweep.submit's to write
    assert [p.name for p in written] == ["README.md"] and not (tmp_path / "best" / "manifest.json").exists()
    readme = (tmp_path / "best" / "README.md").read_text()
    assert "no point to submit yet" in readme and "No point of this study is VERIFIED" in readme
    assert "| 3 |" in readme and "INVALID" in readme and "UNDECIDED" in readme
    assert "python -m sweep.verify --study ctk" in readme and "python -m sweep.submit --study ctk" in readme


def test_a_verdict_of_another_claim_is_not_this_claims():
    # VERIFIED against 118 tok/s, while the trial's claim is now 120: that verdict says nothing of 120
    stale = _verdict(1, 118.0, [118.0, 118.5] * 3)
    assert stale.verdict == "VERIFIED" and not stale.verifies(120.0) and stale.verifies(118.0)
    assert best_point(_data({1: stale})) is None
