"""How much of the machine a measurement had: the CPU time the host gave to others while it ran.

On a virtual machine the hypervisor can take a share of the vCPUs' time for other guests ("steal",
the eighth figure of ``/proc/stat``'s ``cpu`` line). A reference stack decoding on the CPU of a shared
2-core machine slowed by a third while its host took 10-30% of the time (``benchmarks/results/ctk-claims``):
the share taken during a measurement is part of what its TPS means, so ``engine.bench`` records it.
``per_cpu_times`` reads each CPU's own line, for the telemetry's per-CPU busy and stolen shares.

``host_probe`` times one fixed single-thread Python workload: vLLM at batch 1 on a small model spends most of
a step in its host-side Python (scheduling, n-gram drafting, detokenising), so two leases of one GPU kind ran
its fastest configuration 30% apart while a GPU-bound stack moved 3%. The probe is the cheap reading of that
host speed that every boot records beside the lease's CPU model (the provenance's ``host``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuTimes", "cpu_model", "cpu_times", "host_probe", "per_cpu_times", "stolen_share"]

_STAT = Path("/proc/stat")
_CPUINFO = Path("/proc/cpuinfo")
PROBE_REPEATS = 7  # the median of these: one repeat caught by a context switch moves it little


@dataclass(frozen=True)
class CpuTimes:
    total: int  # clock ticks over every state (all CPUs, or one)
    steal: int
    idle: int = 0  # idle and waiting for I/O: the rest, less steal, is busy

    @property
    def busy(self) -> int:
        return self.total - self.idle - self.steal


def _times(fields: list[str]) -> CpuTimes | None:
    if len(fields) < 9:
        return None
    ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal (guest is in user)
    return CpuTimes(total=sum(ticks), steal=ticks[7], idle=ticks[3] + ticks[4])


def cpu_times(stat: Path = _STAT) -> CpuTimes | None:
    """The machine's CPU time so far; None where the kernel reports none (not Linux)."""
    try:
        first = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    return _times(first) if first[:1] == ["cpu"] else None


def per_cpu_times(stat: Path = _STAT) -> dict[int, CpuTimes]:
    """Each CPU's time so far, by its number (the ``cpuN`` lines); empty where the kernel reports none."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        fields = line.split()
        if fields and fields[0].startswith("cpu") and fields[0][3:].isdigit() and (times := _times(fields)):
            out[int(fields[0][3:])] = times
    return out


def stolen_share(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    """The share of the CPU time between two readings that the host took; None without both."""
    if before is None or after is None or after.total <= before.total:
        return None
    return (after.steal - before.steal) / (after.total - before.total)


def cpu_model(cpuinfo: Path = _CPUINFO) -> str | None:
    """The host CPU's model name (``/proc/cpuinfo``); None where the kernel does not say."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)


def _probe_work() -> int:
    # dict and list churn over small ints and short strings: the kind of work a serving loop's host side does
    table: dict[int, list[str]] = {}
    for i in range(40_000):
        table.setdefault(i % 1_021, []).append(str(i))
    return sum(len(v) for v in sorted(table.values(), key=len))


def host_probe(repeats: int = PROBE_REPEATS) -> float:
    """Milliseconds one fixed single-thread Python workload takes here, the median of ``repeats`` (a faster host
    reads lower)."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        _probe_work()
        times.append((time.perf_counter() - began) * 1000.0)
    return statistics.median(times)
