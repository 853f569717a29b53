"""The boot-overlap benchmark: a second stack boots while the first is timed, rounds alternate."""

from __future__ import annotations

import re

import pytest

from benchmarks import boot_overlap
from benchmarks.boot_overlap import Round, verdict
from tests.sweep.kit import stub_processes, write_manifest


def rounds(alone, overlapped):
    """ABAB: each overlapped run right after an alone one."""
    out = []
    for a, b in zip(alone, overlapped):
        out += [
            Round(number=len(out) + 1, overlapped=False, tps=a, run_s=1.0),
            Round(number=len(out) + 2, overlapped=True, tps=b, run_s=1.0, boot_s=0.5),
        ]
    return out


def test_a_slowdown_beyond_the_runs_noise_is_called_so_and_one_within_it_is_not():
    slowed = verdict(rounds([100, 102, 98, 101], [90, 91.8, 88.2, 90.9]))  # 10% slower each time
    assert slowed.alone == pytest.approx(100.5) and slowed.overlapped == pytest.approx(90.45)
    assert slowed.difference == pytest.approx(-0.10) and slowed.exceeds
    same = verdict(rounds([100, 102, 98, 101], [101, 99, 100, 102]))
    assert abs(same.difference) < 0.02 and not same.exceeds


def test_the_second_stack_boots_during_the_timed_run_and_is_stopped_after_it(tmp_path, capsys):
    # a 0.2 s boot against runs of about 3 s: B is up before every overlapped run ends, also beside another
    # test process (B's interpreter start took over a second there; runs of 1 s ended before it)
    manifest = write_manifest(
        tmp_path, STUB_BOOT_DELAY_S="0.2", STUB_DECODE_STEP_S="0.05", GS_TEST_MARKER=str(tmp_path)
    )
    assert (
        boot_overlap.main(["--manifest", str(manifest), "--rounds", "2", "--num-prompts", "2", "--output-len", "32"])
        == 0
    )
    out = capsys.readouterr().out
    assert len(re.findall(r"^\d+\s+alone\s", out, re.M)) == 2
    assert len(re.findall(r"^\d+\s+with a boot\s+\S+\s+\S+\s+\d+\.\d", out, re.M)) == 2  # B's boot time, in the run
    assert "B booted during 2 of 2 overlapped runs" in out and "run-to-run noise:" in out
    assert re.search(r"the difference (EXCEEDS|does not exceed) the noise", out)
    assert not stub_processes(str(tmp_path))  # A and every B stopped
