"""Where a configuration's noise comes from: ``decompose(boots) -> list[NoiseParts]``, one per configuration.

A claim's odds rest on two figures (``sweep.claims``' model): how far a boot's TPS moves and how far
one run of a boot moves. To remove noise one must know which part it is, so each configuration's boots
are taken apart further, from what every boot records (``Measurement.telemetry``: each timed run's
requests as ``[start, seconds, tokens]``, the stack's own step figures, the machine's):

- **boot** and **run**: the configuration's own fit (its boots alone, its own degrees of freedom);
- **prompt**: how far one prompt's request rate sits from another's (log tokens a second). Every boot
  times the same prompts in the same order, so this part cancels between boots; it is the scale
  against which the rest reads;
- **request**: what is left of one request's rate once its run's level and its prompt's are taken out;
- **streaks** (``lag1``): the autocorrelation of consecutive requests' left-overs within a run. Noise
  fixed at boot shows in ``boot``; noise that wanders within a run (a host that is slow for a few
  seconds at a time) shows here and in **window**: the coefficient of variation of a run's rate over
  consecutive 10-second windows;
- the stack's **step** time (ms a step, from its ``/metrics``) and **acceptance** over the runs, each
  as mean and coefficient of variation: a drafter whose acceptance holds still while the step time
  moves puts the noise on the host side;
- the stack's thread **migrations** a run and the CPUs' **steal** share, where telemetry has them.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sweep.claims._fit import fit
from sweep.judgement import Noise, pooled_log_sd
from sweep.store import BootRecord

__all__ = ["WINDOW_S", "NoiseParts", "decompose", "study_noise"]

WINDOW_S = 10.0  # the windows a run's rate is read over, for what drifts inside a run


@dataclass(frozen=True, kw_only=True)
class NoiseParts:
    """One configuration's noise, taken apart (log scale unless named otherwise); None: not recorded."""

    trial_number: int
    boots: int
    runs: int
    boot: float
    run: float
    df: float  # of the boot's and run's parts (the fewer)
    prompt: float | None
    request: float | None
    lag1: float | None
    window_cv: float | None
    step_ms: float | None  # mean over the runs
    step_cv: float | None
    acceptance: float | None
    acceptance_cv: float | None
    migrations: float | None  # the stack's thread migrations a run, mean
    steal: float | None  # the CPUs' stolen share over the runs, mean


def _cv(values: Sequence[float]) -> float | None:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 and statistics.fmean(values) else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _lag1(series: Iterable[Sequence[float]]) -> float | None:
    """The pooled lag-1 autocorrelation of several series of centred values."""
    num = den = 0.0
    for s in series:
        num += sum(a * b for a, b in zip(s, s[1:]))
        den += sum(a * a for a in s)
    return num / den if den > 0 else None


def _windows(requests: Sequence[Sequence[float]]) -> list[float]:
    """A run's rate (tokens a second of requests' time) over consecutive WINDOW_S windows of its start offsets."""
    tokens: dict[int, float] = defaultdict(float)
    seconds: dict[int, float] = defaultdict(float)
    for start, latency, count in requests:
        tokens[int(start // WINDOW_S)] += count
        seconds[int(start // WINDOW_S)] += latency
    return [tokens[w] / seconds[w] for w in sorted(tokens) if seconds[w] > 0]


def _requests(boots: Sequence[BootRecord]) -> dict[str, Any]:
    """The request-level parts over the boots' runs: prompt, request, lag1, window_cv."""
    # a run's prompts: its set (label) and which run of that set in its boot; every boot times the same ones
    keyed, runs = [], []
    for b in boots:
        seen: dict[str, int] = defaultdict(int)
        for run in b.telemetry.get("runs", []):
            label = run.get("label", "")
            seen[label] += 1
            if run.get("requests") and all(latency > 0 for _, latency, _ in run["requests"]):
                keyed.append((label, seen[label]))
                runs.append(run)
    if not runs:
        return {"prompt": None, "request": None, "lag1": None, "window_cv": None}
    rates = [[math.log(tokens / latency) for _, latency, tokens in run["requests"]] for run in runs]
    centred = [[r - statistics.fmean(rs) for r in rs] for rs in rates]
    by_prompt: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for key, cs in zip(keyed, centred):
        for i, c in enumerate(cs):
            by_prompt[(*key, i)].append(c)
    prompt = {key: statistics.fmean(v) for key, v in by_prompt.items()}
    left = [[c - prompt[(*key, i)] for i, c in enumerate(cs)] for key, cs in zip(keyed, centred)]
    squares = sum(x * x for xs in left for x in xs)
    # each run's mean and each prompt's mean were taken out
    df = sum(len(xs) for xs in left) - len(left) - (len(prompt) - len({k[:2] for k in prompt}))
    cvs = [cv for run in runs if (cv := _cv(_windows(run["requests"]))) is not None]
    return {
        "prompt": statistics.pstdev(prompt.values()) if len(prompt) > 1 else None,
        "request": math.sqrt(squares / df) if df > 0 else None,
        "lag1": _lag1(left),
        "window_cv": _mean(cvs),
    }


def decompose(boots: Iterable[BootRecord]) -> list[NoiseParts]:
    """Each configuration's noise, taken apart, from its measured boots (by trial number)."""
    by_trial: dict[int, list[BootRecord]] = defaultdict(list)
    for b in boots:
        if b.measured:
            by_trial[b.trial_number].append(b)
    parts = []
    for trial, bs in sorted(by_trial.items()):
        spread = fit(bs, floor=0.0).spreads[trial]
        runs = [run for b in bs for run in b.telemetry.get("runs", [])]
        steps = [s for run in runs if (s := (run.get("stack") or {}).get("step_ms"))]
        accepted = [a for run in runs if (a := (run.get("stack") or {}).get("acceptance")) is not None]
        hosts = [run.get("host") or {} for run in runs]
        migrations = [h["stack_migrations"] for h in hosts if h.get("stack_migrations") is not None]
        parts.append(
            NoiseParts(
                trial_number=trial,
                boots=len(bs),
                runs=len(runs),
                boot=spread.sigma_boot,
                run=spread.sigma_run,
                df=spread.df,
                **_requests(bs),
                step_ms=_mean(steps),
                step_cv=_cv(steps),
                acceptance=_mean(accepted),
                acceptance_cv=_cv(accepted),
                migrations=_mean(migrations),
                steal=_mean([h["cpu_steal"] for h in hosts if h.get("cpu_steal") is not None]),
            )
        )
    return parts


def study_noise(records: Iterable[Any], boots: Iterable[BootRecord], *, floor: float) -> Noise:
    """How much one boot of one configuration moves, from what the study measured more than once:
    trials of the same knobs (``records``, measured to the end), and promoted candidates' boots
    (their public runs). The TPS's is never below ``floor``; with nothing measured twice the floor
    stands in alone, and the PPL is taken as exact."""
    tps: dict[str, list[float]] = {}
    ppl: dict[str, list[float]] = {}
    for r in records:
        if r.full:
            key = repr(sorted(r.knobs.items()))
            tps.setdefault(key, []).append(r.tps)
            ppl.setdefault(key, []).append(r.ppl)
    repeated = sum(1 for v in tps.values() if len(v) > 1)
    promoted: dict[tuple[str, int], list[BootRecord]] = {}
    for b in boots:
        if b.measured:
            promoted.setdefault((b.run_id, b.trial_number), []).append(b)
    # the boots are measured: the filters keep every one, and tell the type checker so
    public = [[b.public_tps for b in bs if b.public_tps is not None] for bs in promoted.values()]
    tps_sd, df = pooled_log_sd([*tps.values(), *public])
    ppl_sd, _ = pooled_log_sd([*ppl.values(), *([b.ppl for b in bs if b.ppl is not None] for bs in promoted.values())])
    if not df:
        return Noise(tps_sd=floor, ppl_sd=0.0, basis=f"no configuration measured twice: the noise floor {floor:.0%}")
    basis = (
        f"pooled over {repeated} configuration(s) measured twice and {len(promoted)} promoted candidate(s)' boots "
        f"({df} degrees of freedom)" + (f", floored at {floor:.0%}" if tps_sd < floor else "")
    )
    return Noise(tps_sd=max(tps_sd, floor), ppl_sd=ppl_sd, basis=basis)
