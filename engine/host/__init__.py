"""The machine a stack runs on, read and never changed: the CPU time its host took (steal) and how fast its host
side is, its GPUs, a process group and its threads from ``/proc``, where the timing client runs, what the machine
and the stack did over each timed run (``Telemetry``, with the stack's garbage collections), and what a
measurement ran on (``provenance``).

``python -m engine.host`` prints the machine's CPU model and its host-speed probe.
"""

from engine.host._affinity import client_cpus, pinned
from engine.host._cpu import CpuTimes, cpu_model, cpu_times, host_probe, per_cpu_times, stolen_share
from engine.host._gclog import GcLog
from engine.host._gpu import (
    FREE_FLOOR_MIB,
    GpuState,
    gpu_identity,
    gpu_states,
    gpu_uuids,
    held_after_stop,
    visible_gpus,
    wait_until_free,
)
from engine.host._proc import group_members, thread_cpus_allowed
from engine.host._provenance import KEYS, pins, provenance
from engine.host._telemetry import INTERVAL_S, Telemetry

__all__ = [
    "FREE_FLOOR_MIB",
    "INTERVAL_S",
    "KEYS",
    "CpuTimes",
    "GcLog",
    "GpuState",
    "Telemetry",
    "client_cpus",
    "cpu_model",
    "cpu_times",
    "gpu_identity",
    "gpu_states",
    "gpu_uuids",
    "group_members",
    "held_after_stop",
    "host_probe",
    "per_cpu_times",
    "pinned",
    "pins",
    "provenance",
    "stolen_share",
    "thread_cpus_allowed",
    "visible_gpus",
    "wait_until_free",
]
