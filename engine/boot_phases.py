"""Where a stack's boot went, read from its own log: seconds per phase, for stacks that say.

vLLM 0.24 logs its phases as INFO lines (``INFO MM-DD HH:MM:SS [file.py:line] message``); the
patterns below are its format strings. Each found phase becomes a ``boot_<phase>`` timing of the
trial beside the whole ``boot`` (process start to ``/v1/models`` answering), so a sweep shows what
its boots cost and whether the shared compile cache was used (``boot_compile_cache_load``: the
compiled graphs came from the cache; ``boot_compile``: they were compiled). A stack whose log
says none of this (the reference stack, the test stacks) simply has no phases.
"""

from __future__ import annotations

import re
from datetime import datetime

__all__ = ["boot_phases"]

_PHASES: dict[str, re.Pattern[str]] = {
    "weights": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "model_load": re.compile(r"Model loading took [\d.]+ GiB (?:memory )?and ([\d.]+) seconds"),
    "dynamo": re.compile(r"Dynamo bytecode transform time: ([\d.]+) s"),
    "compile": re.compile(r"Compiling a graph for (?:compile range|dynamic shape) .* takes ([\d.]+) s"),
    "compile_cache_load": re.compile(r"Directly load the compiled graph\(s\) for .* from the cache, took ([\d.]+) s"),
    "torch_compile": re.compile(
        r"torch\.compile (?:and initial profiling/warmup run together )?(?:took|takes) ([\d.]+) s in total"
    ),
    "cuda_graphs": re.compile(r"Graph capturing finished in ([\d.]+) secs"),
    "engine_init": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
}
_STAMP = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d)")


def boot_phases(log: str, *, started: datetime | None = None) -> dict[str, float]:
    """``{"boot_weights": 1.2, ...}`` from a boot's log; phases logged more than once are summed.

    With ``started`` (the wall-clock start of the process), ``boot_first_log`` is the time until the
    stack's first timestamped line: Python and its imports, before the stack itself starts work.
    """
    found: dict[str, float] = {}
    first_stamp: str | None = None
    for line in log.splitlines():
        if first_stamp is None and (stamp := _STAMP.match(line)):
            first_stamp = stamp.group(1)
        for phase, pattern in _PHASES.items():
            if match := pattern.search(line):
                found[f"boot_{phase}"] = found.get(f"boot_{phase}", 0.0) + float(match.group(1))
    if started is not None and first_stamp is not None:
        logged = datetime.strptime(f"{started.year}-{first_stamp}", "%Y-%m-%d %H:%M:%S")
        # a log stamp has whole seconds: the start is rounded down to meet it
        found["boot_first_log"] = max(0.0, (logged - started.replace(microsecond=0, tzinfo=None)).total_seconds())
    return found
