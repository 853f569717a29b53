"""How much of the machine a measurement had: the CPU time the host gave to others while it ran.

On a virtual machine the hypervisor can take a share of the vCPUs' time for other guests ("steal",
the eighth figure of ``/proc/stat``'s ``cpu`` line). A reference stack decoding on the CPU of a shared
2-core machine slowed by a third while its host took 10-30% of the time (``benchmarks/results/ctk-claims``):
the share taken during a measurement is part of what its TPS means, so ``engine.bench`` records it.
``per_cpu_times`` reads each CPU's own line, for ``engine.telemetry``'s per-CPU busy and stolen shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuTimes", "cpu_times", "per_cpu_times", "stolen_share"]

_STAT = Path("/proc/stat")


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
