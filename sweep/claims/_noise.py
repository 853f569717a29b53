"""Where a configuration's noise comes from: ``decompose(boots) -> list[NoiseParts]``, one per configuration.

A claim's odds rest on two figures (``sweep.claims``' model): how far a boot's TPS moves and how far
one run of a boot moves. To remove noise one must know which part it is, so each configuration's boots
are taken apart further, from what every boot records (``Measurement.telemetry``: each timed run's
requests as ``[start, seconds, tokens]``, the stack's own step figures, the machine's):

- **boot** and **run**: the configuration's own fit (its boots alone, its own degrees of freedom). Where every
  boot timed the same runs in the same order (``benchmarks.noise``: slices of prompts, two or more), the
  fit's model with the order fixed: each run's log TPS is a level for its position, plus the boot, plus the
  run's own noise (two-way, no interaction; with two runs it is the fit's figures);
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
- where the stack has a step-time histogram (``engine.bench._steps``): the median and 99th percentile step,
  the share of a run's step time in **stalls** (steps slower than three times the median, counted as a
  lower bound), and the run part again with each run's stall time taken out of its wall time
  (``run_without_stalls``): a run noise that falls there came from stalls; one that stays, from every
  step running slower;
- the stack's thread **migrations** a run and the CPUs' **steal** share, where telemetry has them.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
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
    step_p50_ms: float | None  # means over the runs whose histogram places them (a first bucket does not)
    step_p99_ms: float | None
    stall_share: float | None
    stalled_runs: int | None  # of those runs, how many stalled (engine.bench._steps.STALLED_SHARE)
    run_without_stalls: float | None
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


def _fixed_order(bs: Sequence[BootRecord], value: Any) -> tuple[float, float, float] | None:
    """(boot, run, df) where every boot timed the same runs in the same order (at least two boots of two runs):
    log ``value(run)`` = position + boot + run, two-way without interaction; None where the orders differ or a
    run has no value."""
    table = [[value(run) for run in b.telemetry.get("runs", [])] for b in bs]
    labels = {tuple(run.get("label") for run in b.telemetry.get("runs", [])) for b in bs}
    n_boots, n_runs = len(table), len(table[0]) if table else 0
    if len(labels) != 1 or n_boots < 2 or n_runs < 2 or any(v is None or v <= 0 for row in table for v in row):
        return None
    logs = [[math.log(v) for v in row] for row in table]
    grand = statistics.fmean(v for row in logs for v in row)
    boot_means = [statistics.fmean(row) for row in logs]
    position_means = [statistics.fmean(row[j] for row in logs) for j in range(n_runs)]
    residual = sum(
        (logs[i][j] - boot_means[i] - position_means[j] + grand) ** 2 for i in range(n_boots) for j in range(n_runs)
    )
    run_var = residual / ((n_boots - 1) * (n_runs - 1))
    boot_var = statistics.variance(boot_means) - run_var / n_runs
    return math.sqrt(max(boot_var, 0.0)), math.sqrt(run_var), float(n_boots - 1)


def _tps(run: dict[str, Any]) -> float | None:
    return run.get("tps")


def _tps_without_stalls(run: dict[str, Any]) -> float | None:
    """The run's TPS with its stalls' time taken out of its wall time; None without a step distribution."""
    times = (run.get("stack") or {}).get("step_times")
    wall, tps = run.get("wall_s"), run.get("tps")
    if not times or not wall or not tps or times["stall_s"] >= wall:
        return None
    return float(tps * wall / (wall - times["stall_s"]))


def _split(bs: Sequence[BootRecord], trial: int, value: Any) -> tuple[float, float, float] | None:
    """(boot, run, df) of the runs' ``value``: fixed-order boots two-way, else the claims' fit of the boots'
    public and held-out runs (``value`` of each, where the runs are labelled so)."""
    fixed = _fixed_order(bs, value)
    if fixed is not None:
        return fixed
    if value is _tps:
        spread = fit(bs, floor=0.0).spreads[trial]
    else:
        adjusted = []
        for b in bs:
            by_label = {run.get("label"): value(run) for run in b.telemetry.get("runs", [])}
            if by_label.get("public") is None or by_label.get("heldout") is None:
                return None
            adjusted.append(replace(b, public_tps=by_label["public"], tps=by_label["heldout"]))
        spread = fit(adjusted, floor=0.0).spreads[trial]
    return spread.sigma_boot, spread.sigma_run, spread.df


def decompose(boots: Iterable[BootRecord]) -> list[NoiseParts]:
    """Each configuration's noise, taken apart, from its measured boots (by trial number)."""
    by_trial: dict[int, list[BootRecord]] = defaultdict(list)
    for b in boots:
        if b.measured:
            by_trial[b.trial_number].append(b)
    parts = []
    for trial, bs in sorted(by_trial.items()):
        split = _split(bs, trial, _tps)
        assert split is not None  # measured boots have both runs' TPS
        boot, run, df = split
        without = _split(bs, trial, _tps_without_stalls)
        runs = [run for b in bs for run in b.telemetry.get("runs", [])]
        times = [t for run in runs if (t := (run.get("stack") or {}).get("step_times"))]
        steps = [s for run in runs if (s := (run.get("stack") or {}).get("step_ms"))]
        accepted = [a for run in runs if (a := (run.get("stack") or {}).get("acceptance")) is not None]
        hosts = [run.get("host") or {} for run in runs]
        migrations = [h["stack_migrations"] for h in hosts if h.get("stack_migrations") is not None]
        parts.append(
            NoiseParts(
                trial_number=trial,
                boots=len(bs),
                runs=len(runs),
                boot=boot,
                run=run,
                df=df,
                **_requests(bs),
                step_ms=_mean(steps),
                step_cv=_cv(steps),
                step_p50_ms=_mean([t["p50_ms"] for t in times if t["p50_ms"] is not None]),
                step_p99_ms=_mean([t["p99_ms"] for t in times if t["p99_ms"] is not None]),
                stall_share=_mean([t["stall_share"] for t in times]),
                stalled_runs=sum(bool(t["stalled"]) for t in times) if times else None,
                run_without_stalls=None if without is None else without[1],
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
