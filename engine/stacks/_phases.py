"""Where a stack's boot went, read from its own log: seconds per phase, for stacks that say; and what it resolved.

The phases and the timestamp of a log line are the stack's adapter's (``engine.stacks``: vLLM's
format strings, say). Each found phase becomes a ``boot_<phase>`` timing of the trial beside the
whole ``boot`` (process start to ``/v1/models`` answering), so a sweep shows what its boots cost
and whether a shared compile cache was used. A stack whose adapter names no phases (the reference
stack, a generic server) simply has none.

``resolved_settings`` reads what the stack says it settled on, which may not be what it was asked for (vLLM
can fall back to another CUDA-graph mode with speculative decoding, vLLM issue 49547): each setting its
adapter names, every distinct value its log gives, in order.
"""

from __future__ import annotations

from datetime import datetime

from engine.stacks._adapter import StackAdapter

__all__ = ["boot_phases", "resolved_settings"]


def boot_phases(log: str, stack: StackAdapter, *, started: datetime | None = None) -> dict[str, float]:
    """``{"boot_weights": 1.2, ...}`` from a boot's log; phases logged more than once are summed.

    With ``started`` (the wall-clock start of the process), ``boot_first_log`` is the time until the
    stack's first timestamped line: Python and its imports, before the stack itself starts work.
    """
    found: dict[str, float] = {}
    first_stamp: str | None = None
    for line in log.splitlines():
        if first_stamp is None and stack.stamp is not None and (stamp := stack.stamp.match(line)):
            first_stamp = stamp.group(1)
        for phase, pattern in stack.phases.items():
            if match := pattern.search(line):
                found[f"boot_{phase}"] = found.get(f"boot_{phase}", 0.0) + float(match.group(1))
    if started is not None and first_stamp is not None:
        logged = datetime.strptime(f"{started.year}-{first_stamp}", "%Y-%m-%d %H:%M:%S")
        # a log stamp has whole seconds: the start is rounded down to meet it
        found["boot_first_log"] = max(0.0, (logged - started.replace(microsecond=0, tzinfo=None)).total_seconds())
    return found


def resolved_settings(log: str, stack: StackAdapter) -> dict[str, list[str]]:
    """``{"cudagraph_mode": ["FULL_AND_PIECEWISE"], "cudagraphs_captured": ["PIECEWISE", "FULL"]}`` from a boot's
    log: each of the adapter's ``settings`` found, its distinct values in the order the log gives them."""
    found: dict[str, list[str]] = {}
    for line in log.splitlines():
        for name, pattern in stack.settings.items():
            for match in pattern.finditer(line):
                values = found.setdefault(name, [])
                if match.group(1) not in values:
                    values.append(match.group(1))
    return found
