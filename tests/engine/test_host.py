"""engine.host: the share of CPU time a hypervisor took, from two readings of /proc/stat."""

from __future__ import annotations

import pytest

from engine.host import CpuTimes, cpu_model, cpu_times, host_probe, per_cpu_times, stolen_share


def _stat(tmp_path, *ticks: int):
    path = tmp_path / "stat"
    path.write_text("cpu  " + " ".join(map(str, ticks)) + " 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 0\n")
    return path


def test_the_share_counts_steal_against_every_state(tmp_path):
    before = cpu_times(_stat(tmp_path, 100, 0, 50, 800, 10, 0, 5, 35))
    after = cpu_times(_stat(tmp_path, 160, 0, 70, 900, 10, 0, 5, 55))
    assert before == CpuTimes(total=1000, steal=35, idle=810) and after == CpuTimes(total=1200, steal=55, idle=910)
    assert stolen_share(before, after) == pytest.approx(20 / 200)
    assert after.busy - before.busy == 80  # user and system moved; idle, I/O wait and steal are not busy


def test_each_cpu_reads_on_its_own_line(tmp_path):
    path = _stat(tmp_path, 100, 0, 50, 800, 10, 0, 5, 35)
    path.write_text(path.read_text().replace("intr", "cpu1 10 0 10 60 0 0 0 20 0 0\nintr"))
    assert per_cpu_times(path) == {
        0: CpuTimes(total=36, steal=8, idle=9),
        1: CpuTimes(total=100, steal=20, idle=60),
    }
    assert per_cpu_times(tmp_path / "missing") == {}
    assert per_cpu_times() and all(t.total > 0 for t in per_cpu_times().values())  # this machine's


def test_no_reading_no_share(tmp_path):
    assert cpu_times(tmp_path / "missing") is None
    (tmp_path / "odd").write_text("intr 0\n")
    assert cpu_times(tmp_path / "odd") is None
    one = CpuTimes(total=10, steal=0)
    assert stolen_share(None, one) is None and stolen_share(one, None) is None and stolen_share(one, one) is None


def test_this_machine_reports_its_cpu_times():
    # Linux, where the tests run: the kernel's own line parses, and two readings a moment apart give a share
    first, second = cpu_times(), cpu_times()
    assert first is not None and second is not None and second.total >= first.total
    share = stolen_share(first, CpuTimes(total=second.total + 1, steal=second.steal))
    assert share is not None and 0.0 <= share <= 1.0


def test_the_lease_is_read_by_its_cpu_model_and_a_probe_of_its_single_thread_speed(tmp_path):
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Some CPU @ 2.00GHz\n\n")
    assert cpu_model(tmp_path / "cpuinfo") == "Some CPU @ 2.00GHz"
    assert cpu_model(tmp_path / "missing") is None
    # the probe is a time of fixed work: positive, and the median of its repeats (one repeat's reading is one of them)
    assert host_probe(repeats=1) > 0 and host_probe(repeats=3) > 0
