"""Telemetry stored with every boot: a study searched and promoted on the stub stack through the real Ray
workers and SQLite keeps each boot's ``Measurement.telemetry`` in its row and each trial's in its record;
a database written before the column existed still opens."""

from __future__ import annotations

import sqlite3

from sweep.store import BootRecord, open_storage
from tests.sweep.kit import promoted_stub_study, write_manifest


def test_every_boot_and_every_trial_stores_its_telemetry(ray_connected, tmp_path):
    manifest = write_manifest(tmp_path, STUB_DECODE_STEP_S="0.004")
    _, url, _ = promoted_stub_study(tmp_path, manifest=manifest, name="tele", choices=[16, 32])
    storage = open_storage(url)
    try:
        boots = storage.boots("promotion", "tele")
        records = [r for r in storage.records("tele") if r.booted]
    finally:
        storage.close()
    assert len(boots) == 4 and all(b.measured for b in boots)
    for boot in boots:
        t = boot.telemetry
        runs = {r["label"]: r for r in t["runs"]}
        assert [r["label"] for r in t["runs"]] == ["public", "heldout"][:: 1 if boot.first == "public" else -1]
        assert runs["public"]["tps"] == boot.public_tps and runs["heldout"]["tps"] == boot.tps
        assert all(len(r["requests"]) == 4 and r["host"]["samples"] >= 2 for r in runs.values())
        assert runs["public"]["stack"]["acceptance"] is not None
        assert t["stack"]["threads_ran"] >= 1 and t["stack"]["pgid"] is not None
        assert set(t["affinity"]) == {"stack", "client", "client_rule"} and t["affinity"]["client_rule"] == (
            "client_cpus = none"
        )
        assert t["gpu"]["available"] is False  # no GPU here, recorded as such
    assert records and all(r.measurement and [x["label"] for x in r.measurement.telemetry["runs"]] for r in records)


def test_a_database_from_before_the_telemetry_column_opens_and_reads_none_recorded(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    boot = BootRecord(
        study_name="s",
        trial_number=1,
        run_id="r",
        repeat=0,
        status="failed",
        claimed_tps=1.0,
        claimed_ppl=2.0,
        gate=None,
        prompts="p",
        refs="r",
        profile="quick",
        telemetry={"runs": []},
    )
    storage = open_storage(url)
    storage.insert_boots("promotion", [boot])
    storage.close()
    with sqlite3.connect(tmp_path / "old.db") as db:  # as an older version wrote it: no telemetry column
        db.execute("ALTER TABLE promotions DROP COLUMN telemetry")
    storage = open_storage(url)
    try:
        (old,) = storage.boots("promotion", "s")
        storage.insert_boots("promotion", [boot])
        _, new = storage.boots("promotion", "s")
    finally:
        storage.close()
    assert old.telemetry == {} and new.telemetry == {"runs": []}
