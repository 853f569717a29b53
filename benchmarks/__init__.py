"""Benchmarks of the sweep service itself (not tests: speed targets live here, never in tests).

    python -m benchmarks.overhead            share of each trial in boot, warm-up, TPS, PPL, the rest
    python -m benchmarks.scaling             one short study with 1, 2, 4 Ray workers on a sleeping stack
    python -m benchmarks.record_grid         measure the joint study's response surface once (a CSV)
    python -m benchmarks.sample_efficiency   replay every sampler on that surface, 20 seeds each
    python -m benchmarks.time_to_optimum     time to the best configuration, the sweep before and after its rules
    python -m benchmarks.boot_overlap        one timed run alone and beside a second stack's boot, alternated

Results, each under the command that made it, are in ``benchmarks/results/``.
"""
