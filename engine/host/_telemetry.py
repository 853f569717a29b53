"""What the machine did while a boot's timed runs ran: ``Telemetry``, sampled in the background.

A boot's TPS follows the host side of each engine step as much as the GPU (issue 36: the same prompts
took the same number of steps in four H200 boots at 2.84-4.32 ms a step), so every boot records, over
its timed runs only (``window``: engine.bench opens one around each timed run):

- each CPU's busy and stolen share of its time (``/proc/stat``'s ``cpuN`` lines, ``per_cpu_times``);
- every thread of the stack's process group: the CPU time it used, how often the kernel moved it to
  another CPU (``se.nr_migrations`` of ``/proc/<pid>/task/<tid>/sched``, where the kernel has it) and
  which CPUs it ran on (field 39 of its ``stat``, counted at the samples it had run since the last);
- the CPUs the stack's threads may use (their ``Cpus_allowed_list``, the union) and those of the
  timing client (the measuring thread's own mask);
- the resident memory of the stack's processes (``statm``), its peak over the timed runs;
- the GPU's SM clock, power, utilisation and memory in use, from one ``nvidia-smi --loop-ms`` process that only reads
  (never a setting changed); where there is no nvidia-smi or no visible GPU, recorded as not available;
- with ``gc_log`` (``GcLog``): the garbage collections of the stack's Python processes that began in a
  run, and each process's collector as it was set (policy, enabled, frozen objects); and the stack's
  processes by name (its layout: an engine core of its own, or none).

A sample costs a few file reads per thread and is taken every ``INTERVAL_S`` by a background thread,
and at each window's start and end by the measuring thread, outside the timed requests. Its own CPU
time is recorded with it (``sampler.cpu_s``), so what the telemetry cost is part of what it says.
``summary()`` is compact JSON (shares and totals, never the raw samples); ``run_figures(i)`` is one
timed run's share of it. engine.bench merges both into ``Measurement.telemetry``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from engine.host._cpu import CpuTimes, per_cpu_times
from engine.host._gclog import GcLog
from engine.host._gpu import visible_gpus
from engine.host._proc import group_members, read_proc, thread_cpus_allowed, thread_folders
from engine.stackside import format_cpus

__all__ = ["INTERVAL_S", "Telemetry"]

INTERVAL_S = 0.5
_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
_REFRESH_EVERY = 10  # samples between two scans of /proc for the group's processes
_GPU_QUERY = "index,clocks.sm,power.draw,utilization.gpu,memory.used"
_GPU_FIELDS = ("sm_clock_mhz", "power_w", "utilization", "memory_used_mib")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class _Thread:
    pid: int
    name: str
    cpu: int  # the CPU it last ran on
    run_ns: int  # CPU time so far
    migrations: int | None  # read at a window's first and last sample only; None elsewhere, or without sched


@dataclass(frozen=True)
class _Sample:
    at: float  # time.perf_counter()
    cpus: dict[int, CpuTimes]
    threads: dict[int, _Thread]
    rss_bytes: int = 0  # the resident memory of the stack's processes, summed


@dataclass
class _Window:
    run: int
    samples: list[_Sample] = field(default_factory=list)
    start: float = 0.0
    end: float | None = None


def _resident(proc: Path, pid: int) -> int:
    """A process's resident memory in bytes (``statm``'s second field); 0 for one gone."""
    fields = (read_proc(f"{proc}/{pid}/statm") or "").split()
    return int(fields[1]) * _PAGE if len(fields) > 1 and fields[1].isdigit() else 0


def _thread(task: str, pid: int, *, migrations: bool) -> _Thread | None:
    """One thread now: its stat (name, last CPU), its CPU time (``schedstat``, to the nanosecond; else the
    stat's ticks) and, where asked (a window's first and last sample), ``se.nr_migrations`` from ``sched``."""
    stat = read_proc(f"{task}/stat")
    if stat is None:
        return None
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat[stat.rfind(")") + 2 :].split()  # from field 3 (state) on
    if len(fields) < 37:
        return None
    schedstat = (read_proc(f"{task}/schedstat") or "").split()
    run_ns = int(schedstat[0]) if schedstat else (int(fields[11]) + int(fields[12])) * _TICK_NS
    moved = None
    if migrations:
        for line in (read_proc(f"{task}/sched") or "").splitlines():
            if line.startswith("se.nr_migrations"):
                moved = int(line.partition(":")[2])
                break
    return _Thread(pid=pid, name=name, cpu=int(fields[36]), run_ns=run_ns, migrations=moved)


def _entry(threads: dict[int, dict[str, Any]], tid: int, seen: _Thread) -> dict[str, Any]:
    return threads.setdefault(
        tid, {"pid": seen.pid, "tid": tid, "name": seen.name, "ns": 0, "migrations": 0, "on": Counter()}
    )


def _share(counts: Counter[int]) -> dict[str, float]:
    total = sum(counts.values())
    return {str(cpu): round(n / total, 4) for cpu, n in sorted(counts.items())} if total else {}


class _GpuReader:
    """One ``nvidia-smi --loop-ms`` process, its lines timestamped as they arrive."""

    def __init__(self, interval_s: float) -> None:
        self.readings: list[tuple[float, str, tuple[float | None, ...]]] = []
        self.reason: str | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        smi = shutil.which("nvidia-smi")
        gpus = visible_gpus()
        if smi is None:
            self.reason = "no nvidia-smi on PATH"
            return
        if "CUDA_VISIBLE_DEVICES" in os.environ and not gpus:
            self.reason = "no GPU visible (CUDA_VISIBLE_DEVICES is empty)"
            return
        argv = [
            smi,
            f"--query-gpu={_GPU_QUERY}",
            "--format=csv,noheader,nounits",
            f"--loop-ms={int(interval_s * 1000)}",
        ]
        if gpus:
            argv.append(f"--id={','.join(gpus)}")
        try:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
        except OSError as exc:
            self.reason = f"nvidia-smi did not start: {exc.strerror or exc}"
            return
        self._thread = threading.Thread(target=self._read, name="telemetry-gpu", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            cells = [c.strip() for c in line.split(",")]
            if len(cells) != 1 + len(_GPU_FIELDS):
                continue
            values = tuple(_number(c) for c in cells[1:])
            self.readings.append((time.perf_counter(), cells[0], values))

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


class Telemetry:
    """Samples the machine and the stack's process group ``pgid`` while a window is open.

    Use as a context manager (``start``/``stop``) around a measurement, and ``window(run)`` around each
    timed run; ``summary()`` and ``run_figures(run)`` once the runs are done."""

    def __init__(
        self,
        pgid: int | None,
        *,
        interval_s: float = INTERVAL_S,
        proc: Path = Path("/proc"),
        gc_log: Path | None = None,
    ) -> None:
        self.pgid = pgid
        self.gc = GcLog(gc_log) if gc_log is not None else None
        self.interval_s = interval_s
        self.proc = proc
        self._windows: list[_Window] = []
        self._open: _Window | None = None
        self._members: list[int] = []
        self._since_refresh = 0
        self._cost_s = 0.0
        self._samples = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpu: _GpuReader | None = None
        self._allowed: dict[int, set[int]] = {}
        self._client: set[int] = set()

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._gpu = _GpuReader(self.interval_s)
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._gpu is not None:
            self._gpu.stop()

    def __enter__(self) -> Telemetry:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval_s):
            with self._lock:
                if self._open is not None:
                    self._sample(self._open)

    @contextmanager
    def window(self, run: int) -> Iterator[None]:
        """Sample from here to the block's end as part of timed run ``run`` (a run timed in stages opens
        one window per stage)."""
        with self._lock:
            began = time.thread_time()
            self._members = group_members(self.pgid) if self.pgid is not None else []
            self._since_refresh = 0
            self._allowed |= thread_cpus_allowed(self._members, proc=self.proc)
            self._client |= os.sched_getaffinity(0)
            self._cost_s += time.thread_time() - began
            window = self._open = _Window(run=run, start=time.perf_counter())
            self._sample(window, boundary=True)
        try:
            yield
        finally:
            with self._lock:
                self._sample(window, boundary=True)
                window.end = time.perf_counter()
                self._windows.append(window)
                self._open = None

    def _sample(self, window: _Window, *, boundary: bool = False) -> None:
        began = time.thread_time()
        if self.pgid is not None and self._since_refresh >= _REFRESH_EVERY:
            self._members, self._since_refresh = group_members(self.pgid), 0
        self._since_refresh += 1
        threads = {
            tid: t
            for pid, tid, task in thread_folders(self.proc, self._members)
            if (t := _thread(task, pid, migrations=boundary))
        }
        rss = sum(_resident(self.proc, pid) for pid in self._members)
        window.samples.append(
            _Sample(at=time.perf_counter(), cpus=per_cpu_times(self.proc / "stat"), threads=threads, rss_bytes=rss)
        )
        self._samples += 1
        self._cost_s += time.thread_time() - began

    # --- what the samples say -----------------------------------------------------------------

    def _host(self, windows: list[_Window]) -> dict[str, Any]:
        """CPU shares and the stack's threads over these windows."""
        busy: Counter[int] = Counter()
        steal: Counter[int] = Counter()
        total: Counter[int] = Counter()
        threads: dict[int, dict[str, Any]] = {}
        for w in windows:
            first, last = w.samples[0], w.samples[-1]
            for cpu, end in last.cpus.items():
                start = first.cpus.get(cpu)
                if start is not None:
                    busy[cpu] += end.busy - start.busy
                    steal[cpu] += end.steal - start.steal
                    total[cpu] += end.total - start.total
            for a, b in zip(w.samples, w.samples[1:]):
                for tid, now in b.threads.items():
                    before = a.threads.get(tid)
                    if before is None:
                        continue
                    t = _entry(threads, tid, now)
                    t["ns"] += now.run_ns - before.run_ns
                    if now.run_ns > before.run_ns:
                        t["on"][now.cpu] += 1
            # moves between the window's first and last sample (a thread born meanwhile: all of its own)
            for tid, closing in last.threads.items():
                opening = first.threads.get(tid)
                t = _entry(threads, tid, closing)
                moved_before = 0 if opening is None else opening.migrations
                if closing.migrations is None or moved_before is None:
                    t["migrations"] = None
                elif t["migrations"] is not None:
                    t["migrations"] += closing.migrations - moved_before
        return {"busy": busy, "steal": steal, "total": total, "threads": threads}

    def run_figures(self, run: int) -> dict[str, Any]:
        """One timed run's machine figures: the CPUs' busy and stolen shares, the stack's CPU time and
        migrations, the GPU's means."""
        windows = [w for w in self._windows if w.run == run and w.samples]
        if not windows:
            return {}
        host = self._host(windows)
        total = sum(host["total"].values())
        threads = host["threads"].values()
        migrations = [t["migrations"] for t in threads]
        out: dict[str, Any] = {
            "cpu_busy": round(sum(host["busy"].values()) / total, 4) if total else None,
            "cpu_steal": round(sum(host["steal"].values()) / total, 4) if total else None,
            "stack_cpu_s": round(sum(t["ns"] for t in threads) / 1e9, 4),
            "stack_migrations": None if None in migrations else sum(migrations),
            "samples": sum(len(w.samples) for w in windows),
        }
        gpu = self._gpu_stats(windows)
        if gpu:
            out["gpu"] = {name: stats["mean"] for name, stats in _merged(gpu).items()}
        if self.gc is not None:
            out |= self.gc.figures([(w.start, w.end if w.end is not None else time.perf_counter()) for w in windows])
        return out

    def _gpu_stats(self, windows: list[_Window]) -> dict[str, dict[str, dict[str, float]]]:
        """Per GPU, per field: mean, min, max over the readings inside these windows."""
        if self._gpu is None:
            return {}
        spans = [(w.start, w.end if w.end is not None else time.perf_counter()) for w in windows]
        values: dict[str, dict[str, list[float]]] = {}
        for at, gpu, reading in list(self._gpu.readings):
            if any(a <= at <= b for a, b in spans):
                for name, value in zip(_GPU_FIELDS, reading):
                    if value is not None:
                        values.setdefault(gpu, {}).setdefault(name, []).append(value)
        return {
            gpu: {
                name: {"mean": round(sum(v) / len(v), 2), "min": min(v), "max": max(v), "n": len(v)}
                for name, v in fields.items()
            }
            for gpu, fields in values.items()
        }

    def summary(self) -> dict[str, Any]:
        """The boot's figures over every timed run: see the module's docstring; JSON-friendly."""
        windows = [w for w in self._windows if w.samples]
        host = self._host(windows)
        threads = sorted(host["threads"].values(), key=lambda t: -t["ns"])
        ran = [t for t in threads if t["ns"] > 0]
        migrations = [t["migrations"] for t in threads]
        on: Counter[int] = Counter()
        for t in ran:
            on.update(t["on"])
        allowed = set().union(*self._allowed.values()) if self._allowed else set()
        gpu = self._gpu_stats(windows)
        reason = self._gpu.reason if self._gpu is not None else "not sampled"
        return {
            "sampler": {
                "interval_s": self.interval_s,
                "samples": self._samples,
                "window_s": round(sum((w.end or w.start) - w.start for w in windows), 3),
                "cpu_s": round(self._cost_s, 4),
                "ms_per_sample": round(1000 * self._cost_s / self._samples, 3) if self._samples else None,
            },
            "cpus": {
                str(cpu): {
                    "busy": round(host["busy"][cpu] / n, 4),
                    "steal": round(host["steal"][cpu] / n, 4),
                }
                for cpu, n in sorted(host["total"].items())
                if n
            },
            "stack": {
                "pgid": self.pgid,
                "processes": len(self._members),
                "process_names": sorted(
                    n for pid in self._members if (n := (read_proc(f"{self.proc}/{pid}/comm") or "").strip())
                ),
                "threads": len(threads),
                "threads_ran": len(ran),
                "cpu_s": round(sum(t["ns"] for t in threads) / 1e9, 4),
                # its processes' resident memory at its highest sample during the timed runs (on a GPU the
                # device's memory is the gpu section's memory_used_mib)
                "rss_peak_mib": round(max((x.rss_bytes for w in windows for x in w.samples), default=0) / 2**20, 1),
                "migrations": None if None in migrations else sum(migrations),
                "ran_on": _share(on),
            },
            "threads": [
                {
                    "pid": t["pid"],
                    "tid": t["tid"],
                    "name": t["name"],
                    "cpu_s": round(t["ns"] / 1e9, 4),
                    "migrations": t["migrations"],
                    "ran_on": _share(t["on"]),
                }
                for t in ran
            ],
            "affinity": {
                "stack": format_cpus(allowed) if allowed else None,
                "client": format_cpus(self._client) if self._client else None,
            },
            "gpu": {"available": True, "gpus": gpu}
            if gpu
            else {"available": False, "reason": reason or "nvidia-smi gave no reading during the timed runs"},
            **({"gc": self.gc.states()} if self.gc is not None else {}),
        }


def _merged(gpus: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Several GPUs' stats as one (the mean of their means), for a run's one-line figures."""
    means: dict[str, list[float]] = {}
    for fields in gpus.values():
        for name, stats in fields.items():
            means.setdefault(name, []).append(stats["mean"])
    return {name: {"mean": round(sum(v) / len(v), 2)} for name, v in means.items()}
