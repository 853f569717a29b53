"""``claim.json`` through its model: what the folder writes reads back the same, and a malformed one is refused
with its field named."""

from __future__ import annotations

import json

import pytest

from benchmarks._draw import drawn_boots
from errors import UsageError
from sweep.claims import MACHINE_TERMS, MachineTerm, claim_for, fit
from sweep.submission import ClaimFile, read_claim
from sweep.submission._choose import Choice
from sweep.submission._claimfile import CLAIM_VERSION
from tests.sweep.kit import measured_record


def _claim(machine: MachineTerm | None = None) -> ClaimFile:
    boots = drawn_boots({1: (110.0, 108.0)}, rounds=4, boot_sd=0.01, run_sd=0.005, seed=3)
    claim = claim_for(fit(boots, floor=0.02), 1, gate=2.42, target=0.9, machine=machine)
    record = measured_record(1, 112.0, 2.3, knobs={"centroid_top_k": 16}, gate=2.42, feasible=True)
    return ClaimFile.of(Choice(record=record, claim=claim, verdict=None), study="s", view=None)


def test_a_claim_round_trips_through_its_file(tmp_path):
    claim = _claim()
    path = tmp_path / "claim.json"
    path.write_text(claim.to_json())
    assert read_claim(path) == claim
    assert json.loads(path.read_text())["version"] == CLAIM_VERSION and claim.p_verified is not None


def test_a_confirmed_claim_keeps_its_p_at_each_machine_term_and_its_ceiling(tmp_path):
    claim = _claim(MachineTerm(prior=0.01, prior_df=2.0, between=None))
    assert [sd for sd, _ in claim.p_at_machine] == list(MACHINE_TERMS) and claim.p_ceiling is not None
    path = tmp_path / "claim.json"
    path.write_text(claim.to_json())
    assert read_claim(path) == claim
    rows = "\n".join(claim.rows())
    assert "| P(VERIFIED), their machine a known distance from yours | 1%: " in rows
    assert f"8%: {claim.p_at_machine[-1][1]:.2f}" in rows and f"boots without end | {claim.p_ceiling:.2f}" in rows
    # a version 3 file (before them) reads with none; a screening claim writes none
    data = {k: v for k, v in json.loads(claim.to_json()).items() if k not in ("p_at_machine", "p_ceiling", "ceiling")}
    path.write_text(json.dumps({**data, "version": 3}))
    old = read_claim(path)
    assert old.p_at_machine == () and old.p_ceiling is None and "boots without end" not in "\n".join(old.rows())
    assert _claim().p_at_machine == () and _claim().p_ceiling is None


def test_a_claim_written_before_the_file_was_typed_still_reads(tmp_path):
    data = json.loads(_claim().to_json())
    for key in ("version", "promoted", "unmeasured", "odds_of", "p_within_run", "machine_term"):
        del data[key]  # version 1 held none of them
    data["p_later"] = 0.7  # ... and a later run's odds
    data["verdict"] = {
        "trial_number": 1,
        "verdict": "VERIFIED",
        "claimed_tps": 110.0,
        "repeats": 3,
        "run_id": "r",
        "reasons": [],
        "tps_cv": 0.01,
    }  # the whole verdict, as version 1 stored it
    (tmp_path / "claim.json").write_text(json.dumps(data))
    read = read_claim(tmp_path / "claim.json")
    assert read.version == CLAIM_VERSION and read.verdict is not None and read.verdict.verdict == "VERIFIED"
    assert read.p_later == 0.7 and read.machine_term is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"claim_tps": "fast"}, "field claim_tps"),
        ({"claim_tps": -1.0}, "field claim_tps"),
        ({"p_verified": 1.7}, "field p_verified"),
        ({"rerun_90": [1.0]}, "field rerun_90"),
        ({"verdict": {"verdict": "MAYBE", "claimed_tps": 1.0, "repeats": 1, "run_id": "r"}}, "field verdict.verdict"),
        ({"surprise": 1}, "field surprise"),
        ({"version": 9}, "field 'version'"),
    ],
)
def test_a_malformed_claim_is_refused_naming_the_field(tmp_path, change, field):
    data = {**json.loads(_claim().to_json()), **change}
    (tmp_path / "claim.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match=field):
        read_claim(tmp_path / "claim.json")


def test_a_file_without_a_required_field_names_it(tmp_path):
    data = json.loads(_claim().to_json())
    del data["study"]
    (tmp_path / "claim.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match="field study: Field required"):
        read_claim(tmp_path / "claim.json")
