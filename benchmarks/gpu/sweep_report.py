"""What a GPU sweep did, read back from its database: where each trial ran, overlap, efficiency, front.

    python -m benchmarks.gpu.sweep_report --storage sqlite:///joint-gpu-2w.db --study joint-gpu \\
        [--single sqlite:///joint-gpu-1w.db]

- per trial: node, GPU ids, CUDA_VISIBLE_DEVICES (as the worker recorded them), the driver's
  ask and tell (seconds from the first ask), TPS, PPL, feasibility, knobs;
- overlap: pairs of trials whose ask..tell intervals intersect while on different GPUs, and the
  seconds during which two engines ran at once;
- with ``--single`` (the same study run by one worker): parallel efficiency as
  benchmarks/scaling.py defines it, ``E = T1 / (2 x T2)`` over the part after the baseline (the
  driver runs the baseline alone), and over the whole loop (first ask to last tell);
- the feasible Pareto front (sweep.judgement) of the 2-worker run.
"""

from __future__ import annotations

import argparse
import sys
from itertools import combinations

from benchmarks._timeline import TrialTiming, load_timeline
from sweep.judgement import FrontPoint, pareto_front
from sweep.store import open_existing


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu.sweep_report", description=__doc__.splitlines()[0])
    p.add_argument("--storage", required=True, help="database URL of the multi-worker run")
    p.add_argument("--study", required=True)
    p.add_argument("--single", help="database URL of the same study run by one worker")
    return p.parse_args(argv)


def _spans(timeline: list[TrialTiming]) -> tuple[float, float]:
    """(baseline's tell -> last tell, first ask -> last tell) in seconds."""
    baseline = next((t for t in timeline if t.is_baseline), min(timeline, key=lambda t: t.told))
    last = max(t.told for t in timeline)
    return (last - baseline.told).total_seconds(), (last - min(t.asked for t in timeline)).total_seconds()


def main(argv: list[str] | None = None) -> int:
    args = _args(sys.argv[1:] if argv is None else argv)
    timeline = load_timeline(args.storage, args.study)
    storage = open_existing(args.storage)
    try:
        rows = {r.trial_number: r for r in storage.records(args.study, token_ids=False)}
    finally:
        storage.close()
    origin = min(t.asked for t in timeline)
    gpu = {t.number: ",".join(rows[t.number].node.get("gpu_ids") or []) or "-" for t in timeline}

    print(f"study {args.study}: {len(timeline)} trials in {args.storage}")
    print(
        f"{'trial':>5} {'host':<14} {'gpu':>4} {'CVD':>4} {'ask s':>7} {'tell s':>7} {'TPS':>9} {'PPL':>8} {'feas':>5}  knobs"
    )
    for t in timeline:
        r = rows[t.number]
        tps = f"{r.tps:9.1f}" if r.tps is not None else f"{'-':>9}"
        ppl = f"{r.ppl:8.3f}" if r.ppl is not None else f"{'-':>8}"
        knobs = " ".join(f"{k}={v}" for k, v in sorted(r.knobs.items()))
        print(
            f"{t.number:5d} {str(r.node.get('hostname', '-'))[:14]:<14} {gpu[t.number]:>4} "
            f"{str(r.node.get('cuda_visible_devices', '-')):>4} {(t.asked - origin).total_seconds():7.1f} "
            f"{(t.told - origin).total_seconds():7.1f} {tps} {ppl} {'yes' if r.feasible else 'no':>5}  "
            f"{knobs}{'  (baseline)' if t.is_baseline else ''}{'  FAILED: ' + (r.reason or '') if r.status != 'complete' else ''}"
        )

    pairs, together = [], 0.0
    for a, b in combinations(timeline, 2):
        shared = (min(a.told, b.told) - max(a.asked, b.asked)).total_seconds()
        if shared > 0 and gpu[a.number] != gpu[b.number]:
            pairs.append((a.number, b.number, shared))
            together += shared
    gpus = sorted(set(gpu.values()))
    print(
        f"\nGPUs used: {gpus}; overlapping pairs on different GPUs: {len(pairs)}; "
        f"seconds with two engines at once: {together:.1f}"
    )
    for first, second, shared in pairs[:12]:
        print(f"  trials {first} (GPU {gpu[first]}) and {second} (GPU {gpu[second]}) overlapped {shared:.1f} s")

    parallel, loop = _spans(timeline)
    print(f"\n{args.study}, this run: after-baseline span {parallel:.1f} s, loop {loop:.1f} s")
    if args.single:
        single = load_timeline(args.single, args.study)
        parallel1, loop1 = _spans(single)
        workers = max(2, len(gpus))
        print(
            f"{args.study}, 1 worker:  after-baseline span {parallel1:.1f} s, loop {loop1:.1f} s ({len(single)} trials)"
        )
        if len(single) == len(timeline):
            print(
                f"parallel efficiency ({workers} workers vs 1, same budget): after the baseline "
                f"{parallel1 / (workers * parallel):.1%}, whole loop {loop1 / (workers * loop):.1%}"
            )
        else:
            per1 = parallel1 / max(len(single) - 1, 1)
            per2 = parallel / max(len(timeline) - 1, 1)
            print(
                f"the 1-worker run finished {len(single)} of {len(timeline)} trials: efficiency from the "
                f"after-baseline time per trial, {per1 / (workers * per2):.1%}"
            )

    points = [
        FrontPoint(number=n, tps=r.tps, ppl=r.ppl, feasible=bool(r.feasible))
        for n, r in rows.items()
        if r.tps is not None and r.ppl is not None
    ]
    print("\nfeasible Pareto front (TPS max, PPL min):")
    for p in pareto_front(points):
        knobs = " ".join(f"{k}={v}" for k, v in sorted(rows[p.number].knobs.items()))
        print(f"  trial {p.number:3d}: TPS {p.tps:9.1f}  PPL {p.ppl:.4f}  {knobs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
