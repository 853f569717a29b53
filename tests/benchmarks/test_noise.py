"""``python -m benchmarks.noise`` on the stub stack (real processes, real HTTP): arms interleaved round by round
behind an anchor, every boot's runs and telemetry written out as it ends, a time limit that stops between
boots and the same command going on after them, and the arm that moves from boot to boot read as the noisy
one."""

from __future__ import annotations

import json

from benchmarks.noise import main
from tests.sweep.kit import write_manifest


def test_arms_are_interleaved_behind_the_anchor_and_the_noisy_one_is_found(tmp_path, capsys):
    # the noisy arm's boots 50% apart (log sd): beside two busy cores the steady arm's boots read 3.1% apart, and five
    # boots at 25% once read 8.5%, under the 3x the test asks (at 50%, five boots read under 9% about once in 500)
    manifest = write_manifest(
        tmp_path, STUB_DECODE_STEP_S="0.004", STUB_BOOT_NOISE="0.002", STUB_BOOT_NOISE_IF="CENTROID_TOP_K=64:0.5"
    )
    out = tmp_path / "noise"
    argv = ["--manifest", str(manifest), "--arm", "steady", "--arm", "noisy:centroid_top_k=64", "--boots", "5"]
    argv += ["--anchor", str(manifest), "--profile", "quick", "--prompts", "3", "--runs", "3", "--out", str(out)]
    # stopped after a few boots by its time limit, each boot stored as it ended ...
    assert main([*argv, "--time-limit", "6"]) == 3
    first = json.loads((out / "boots.json").read_text())["boots"]
    assert 0 < len(first) < 15 and "time limit" in capsys.readouterr().err
    # ... and the same command goes on after them, booting none of them again
    code = main(argv)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    boots = json.loads((out / "boots.json").read_text())["boots"]
    assert boots[: len(first)] == first
    # anchor, steady, noisy in every round, five rounds; every boot timed its three slices and kept its telemetry
    assert [(b["repeat"], b["trial_number"]) for b in boots] == [(r, n) for r in range(5) for n in range(3)]
    assert all(b["status"] == "complete" and len(b["telemetry"]["runs"]) == 3 for b in boots)
    assert (out / "noise.txt").read_text().startswith("python -m benchmarks.noise")
    # the decomposition's rows: arm, knobs, boots x runs (three words), TPS, vs anchor, one boot, ...
    # ... then "one boot, anchored" (each round divided by its anchor's reading); then the steps table
    noise_part, steps_part = printed.out.split("each arm's noise taken apart")[1].split("each arm's steps")
    arms = ("steady ", "noisy ")
    rows = [line.split() for line in noise_part.splitlines() if line.startswith(arms)]
    boot_part = {row[0]: float(row[7].rstrip("%")) for row in rows}
    anchored = {row[0]: float(row[8].rstrip("%")) for row in rows}
    assert set(boot_part) == {"steady", "noisy"} and boot_part["noisy"] > 3 * boot_part["steady"], printed.out
    assert anchored["noisy"] > 3 * anchored["steady"], printed.out
    # a steady stub never stalls: no run of either arm stalled
    steps = {line.split()[0]: line for line in steps_part.splitlines() if line.startswith(arms)}
    assert set(steps) == {"steady", "noisy"} and all(" 0/15 " in row for row in steps.values()), printed.out
    assert "load average" in printed.out  # the machine that booted them
    # once every boot is stored, the command only reports, and says whose load it cannot give
    assert main(argv) == 0 and json.loads((out / "boots.json").read_text())["boots"] == boots
    again = capsys.readouterr().out
    assert "made from the 15 boots stored in" in again and "load average" not in again


def test_a_knob_the_manifest_does_not_take_is_refused_before_anything_boots(tmp_path, capsys):
    manifest = write_manifest(tmp_path)
    assert main(["--manifest", str(manifest), "--arm", "x:no_such_knob=1", "--anchor", "none"]) == 2
    assert "unknown knob 'no_such_knob'" in capsys.readouterr().err
    assert main(["--manifest", str(manifest), "--arm", "anchor", "--anchor", "none"]) == 2
