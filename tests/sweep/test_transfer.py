"""``python -m sweep.transfer``: a tiny study's front re-measured under serving load, on a stub stack that serves one
request at a time (``STUB_SERIAL=1``): the table, ``transfer.json``'s figures, the chart drawn through the browser, a
point whose stack fails to boot, and bad input refused before anything boots."""

from __future__ import annotations

import json
import math
import signal
import struct
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from sweep import transfer
from tests.stacks import stub_profile, write_ppl_refs
from tests.sweep.kit import run_in_process, write_manifest, write_study

# A request of 16 tokens takes about 0.28 s at window 512 (0.22 s at 128), all of it inside the serial stub's lock:
# long beside what a client and a server overlap outside it (connecting, parsing), and beside a busy machine's jitter
STEP_S = "0.03"
OVERHEAD_S = "0.05"
OUTPUT_LEN = 16
SLO_TTFT_MS = 250.0  # met alone (about 65 ms); at 4 in flight, only by the first served: the others wait >= 0.22 s


@pytest.fixture
def swept(ray_connected, tmp_path, monkeypatch):
    """A searched grid over the window on a serial stub: the baseline (window 512) and window 128 (faster, its PPL
    higher but under the study's gate of +10%) make a front of two."""
    monkeypatch.chdir(tmp_path)  # the study's cache folder (runs/<study>/cache) is relative to where it runs
    manifest = write_manifest(tmp_path, STUB_SERIAL="1", STUB_DECODE_STEP_S=STEP_S, STUB_REQUEST_OVERHEAD_S=OVERHEAD_S)
    study = write_study(
        tmp_path,
        manifest=manifest,
        # each trial and each point also scores two long texts by context length (engine.measurement)
        profile=stub_profile(
            tmp_path,
            output_len=OUTPUT_LEN,
            length_refs=str(write_ppl_refs(tmp_path / "long.jsonl", 2, context_len=1, target_len=40)),
            length_buckets=[16, 32],
        ),
        name="transfer",
        space={"sliding_window": {"choices": [128, 512]}},
        gate={"ppl_max_ratio": 1.1},
        sampler="grid",
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    run_in_process(study, url, tmp_path / "runs")
    return study, url


def _levels(point: dict) -> dict[str, dict]:
    return {level["workload"]: level for level in point["levels"]}


def _met(level: dict, bound_ms: float) -> int:
    return sum(1000 * r["ttft_s"] <= bound_ms for r in level["requests"])


def test_a_serial_stacks_front_under_load_and_a_point_that_fails_to_boot(swept, tmp_path, capsys):
    study, url = swept
    out = tmp_path / "transfer-out"
    argv = ["--study", str(study), "--storage", url, "--levels", "1,4", "--num-prompts", "4"]
    argv += ["--output-len", str(OUTPUT_LEN), "--slo-ttft-ms", str(SLO_TTFT_MS), "--out", str(out)]
    code = transfer.main(argv)
    printed = capsys.readouterr().out
    assert code == 0, printed

    doc = json.loads((out / "transfer.json").read_text())
    assert [w["name"] for w in doc["workloads"]] == ["c1", "c4", "long-c1"]
    points = doc["points"]
    baseline, tuned = points  # the baseline booted first, then the front by challenge TPS
    assert baseline["baseline"] and baseline["knobs"]["sliding_window"] == 512 and baseline["on_front"]
    assert tuned["knobs"]["sliding_window"] == 128 and tuned["on_front"]
    assert tuned["challenge_tps"] > baseline["challenge_tps"]
    # re-scored by context length on its own boot: the stub's smaller window reads a higher PPL in every bucket
    ends = [[b["end"] for b in p["ppl_lengths"]] for p in points]
    assert ends == [[16, 32], [16, 32]], points
    assert all(t["nll"] > b["nll"] for t, b in zip(tuned["ppl_lengths"], baseline["ppl_lengths"]))
    flowing = " ".join(printed.split())  # a line the console wrapped, read whole
    for point in points:
        first = point["ppl_lengths"][0]
        assert f"PPL 0-16 {math.exp(first['nll'] / first['tokens']):.4f}" in flowing
    for point in points:
        assert point["error"] is None and point["boots"] == 1
        levels = _levels(point)
        for level in levels.values():
            assert len(level["requests"]) == 4 and level["output_tokens"] == 4 * OUTPUT_LEN
            # goodput as bench_serving computes it, from the requests written beside it
            assert level["goodput"] == pytest.approx(_met(level, SLO_TTFT_MS) / level["wall_s"], rel=1e-12)
        c1, c4 = levels["c1"], levels["c4"]
        # one request at a time: four in flight serve hardly faster than one (a stack that serves four at once: about
        # 4x), while the last of the four waits for the three before it
        assert c4["output_tps"] < 1.5 * c1["output_tps"], (c1["output_tps"], c4["output_tps"])
        assert c4["ttft_ms"]["p99"] > 2 * c1["ttft_ms"]["p99"], (c1["ttft_ms"], c4["ttft_ms"])
        assert _met(c4, SLO_TTFT_MS) <= 1 and c4["goodput"] < c1["goodput"]
        assert levels["long-c1"]["prompts"] == "long" and levels["long-c1"]["concurrency"] == 1
    # ranks: the challenge's by the study's TPS, each level's by its output tok/s (one draw: which way a busy machine
    # tips them is not this test's to say), held where they agree at every level
    assert tuned["challenge_rank"] == 1 and baseline["challenge_rank"] == 2
    for name in ("c1", "c4", "long-c1"):
        by_speed = sorted(points, key=lambda p: -_levels(p)[name]["output_tps"])
        assert [p["ranks"][name] for p in by_speed] == [1, 2]
    for point in points:
        assert point["rank_held"] == all(r == point["challenge_rank"] for r in point["ranks"].values())

    # the table: every point with its figures, and what they rest on
    assert "trial 0 (baseline): sliding_window=512" in printed
    assert f"trial {tuned['trial']}: sliding_window=128" in printed
    assert f"{tuned['challenge_tps']:.2f} (1)" in printed and f"{baseline['challenge_tps']:.2f} (2)" in printed
    for point in points:
        for level in point["levels"]:
            assert f"{level['output_tps']:.2f}" in printed and f"{level['ttft_ms']['p99']:.0f}" in printed
    held = {True: "yes", False: "no"}
    assert all(held[p["rank_held"]] in printed for p in points)
    assert "rank held" in printed and "2 boot(s), one a configuration" in printed
    assert "3 run(s) on each, one a level" in printed and "one draw, no verdict" in printed

    # the chart: a real PNG, rendered by Chromium at the export's size, and its page
    png = (out / "transfer.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1200, 700)
    assert len(png) > 10_000
    page = (out / "transfer.html").read_text()
    assert "trial 0 (baseline)" in page and "c=4" in page

    # the same front, on a manifest whose window 128 fails at boot: the point named, the baseline measured and drawn
    failing = tmp_path / "failing"
    failing.mkdir()
    manifest = write_manifest(
        failing, STUB_SERIAL="1", STUB_DECODE_STEP_S=STEP_S, STUB_BOOT_EXIT_IF="SLIDING_WINDOW=128"
    )
    out = tmp_path / "failed-out"
    argv = ["--study", str(study), "--storage", url, "--manifest", str(manifest), "--levels", "1", "--no-long"]
    code = transfer.main([*argv, "--num-prompts", "2", "--output-len", "4", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 1, printed
    assert "sliding_window=128 failed: EngineBootError" in printed
    baseline, tuned = json.loads((out / "transfer.json").read_text())["points"]
    assert [lv["workload"] for lv in baseline["levels"]] == ["c1"] and baseline["error"] is None
    assert tuned["levels"] == [] and "EngineBootError" in tuned["error"] and tuned["rank_held"] is None
    assert (out / "transfer.png").is_file()  # the measured point is drawn


def _read(path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def test_a_dry_run_boots_nothing_and_an_interrupted_transfer_goes_on(swept, tmp_path, capsys):
    study, url = swept
    out = tmp_path / "transfer-out"
    argv = ["--study", str(study), "--storage", url, "--levels", "1,4", "--num-prompts", "4"]
    argv += ["--output-len", str(OUTPUT_LEN), "--slo-ttft-ms", str(SLO_TTFT_MS), "--out", str(out), "--max-load", "3"]
    command = [sys.executable, "-m", "sweep.transfer", *argv]

    # --dry-run: each point it would boot, with its command line; nothing booted, nothing written
    dry = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert "trial 0 (baseline): sliding_window=512: would boot" in dry.stdout
    assert "sliding_window=128: would boot" in dry.stdout and dry.stdout.count("  argv: ") == 2
    assert "levels on each boot, in order: c1 (1 in flight, 4 public prompts x 16 tokens)" in dry.stdout
    assert "nothing is booted" in dry.stdout and not out.exists()
    assert "then the highest of them each point holds under p99 TTFT <= 250 ms, each level decided over 3 runs" in (
        dry.stdout
    )

    # interrupted while the second point is measured: the first is written whole, the second marked. By TERM, as
    # `timeout` or a scheduler stops it: a child of an xdist worker inherits SIGINT ignored, so Ctrl-C cannot be sent
    running = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(
            p["error"] is None and len(p["levels"]) == 3 for p in _read(out / "transfer.json").get("points", [])
        ):
            assert running.poll() is None and time.monotonic() < deadline, "the first point was never written whole"
            time.sleep(0.05)
        running.send_signal(signal.SIGTERM)
        assert running.wait(timeout=60) == 130, running.stderr.read() if running.stderr else ""
    finally:
        if running.poll() is None:
            running.kill()
    first, second = _read(out / "transfer.json")["points"]
    assert first["error"] is None and [lv["workload"] for lv in first["levels"]] == ["c1", "c4", "long-c1"]
    # the max-load search on the same boot: alone a request meets the bound; at 4 in flight on a stack that serves
    # one at a time, the last waits three requests' service, over it
    assert first["max_load"]["concurrency"] == 1
    assert [(v["concurrency"], v["holds"]) for v in first["max_load"]["verdicts"]] == [(1, True), (4, False)]
    assert second["error"] == "interrupted" and second["max_load"] is None

    # the same command goes on: the finished point kept as it was measured, not booted again; the other measured
    assert transfer.main(argv) == 0
    printed = capsys.readouterr().out
    assert "1 kept from the earlier run there" in printed
    assert f"{first['label']}: kept from the earlier run in this folder, not booted again" in printed
    kept, measured = json.loads((out / "transfer.json").read_text())["points"]
    assert kept["levels"] == first["levels"] and kept["boot_s"] == first["boot_s"]
    assert kept["max_load"] == first["max_load"] and measured["max_load"]["concurrency"] == 1
    assert measured["error"] is None and [lv["workload"] for lv in measured["levels"]] == ["c1", "c4", "long-c1"]
    assert {kept["challenge_rank"], measured["challenge_rank"]} == {1, 2}  # ranked together

    # a rerun of another plan into that folder would not compare: refused before anything boots
    assert transfer.main([*argv[:5], "1", *argv[6:]]) == 2  # --levels 1
    assert "differs from this one's" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--levels", "1,4,4"], "--levels: each concurrency once"),
        (["--levels", "1,x"], "--levels must be comma-separated concurrencies"),
        (["--levels", "1,8", "--num-prompts", "4"], "never puts 8 requests in flight"),
        (["--max-load", "2"], "--max-load needs --slo-ttft-ms"),
        (["--max-load", "1", "--slo-ttft-ms", "100"], "at least 2 runs a level"),
        (["--study", "no-such-study"], "study 'no-such-study' not found"),
    ],
)
def test_bad_input_is_refused_before_anything_boots(tmp_path, capsys, extra, message):
    argv = ["--study", "ctk", "--storage", f"sqlite:///{tmp_path / 'none.db'}", "--out", str(tmp_path / "out"), *extra]
    assert transfer.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_study_with_no_front_is_refused(tmp_path, capsys):
    import optuna

    from sweep.store import open_storage

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    storage = open_storage(url)
    try:  # the study's file is the project's own ctk; its rows here: none measured
        optuna.create_study(study_name="ctk", storage=storage.optuna, directions=["maximize", "minimize"])
    finally:
        storage.close()
    assert transfer.main(["--study", "ctk", "--storage", url, "--out", str(tmp_path / "out")]) == 2
    assert "study 'ctk' has no front" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_dry_run_of_the_ctk_study_prints_what_it_would_boot(tmp_path):
    """``python -m sweep.transfer --study ctk --dry-run`` on a small database of the project's own ctk study: the
    baseline and its front point, each with the command line it would boot; nothing booted, nothing written."""
    import optuna

    from sweep.store import open_storage
    from tests.sweep.kit import measured_record

    url = f"sqlite:///{tmp_path / 'ctk.db'}"
    storage = open_storage(url)
    try:
        optuna.create_study(study_name="ctk", storage=storage.optuna, directions=["maximize", "minimize"])
        for number, tps, ppl, ctk in ((0, 100.0, 2.30, 32), (1, 120.0, 2.35, 16)):
            record = measured_record(
                number, tps, ppl, study="ctk", knobs={"centroid_top_k": ctk}, gate=2.415, feasible=True
            )
            storage.insert_record(replace(record, is_baseline=number == 0))
    finally:
        storage.close()
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "sweep.transfer", "--study", "ctk", "--storage", url, "--out", str(out), "--dry-run"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "dry run of the transfer of study ctk" in done.stdout and "2 of 2 configuration(s) to boot" in done.stdout
    assert "trial 0 (baseline): centroid_top_k=32: would boot" in done.stdout
    assert "trial 1: centroid_top_k=16: would boot" in done.stdout and done.stdout.count("  argv: ") == 2
    assert "levels on each boot, in order: c1 (1 in flight, 16 public prompts" in done.stdout
    assert not out.exists()
