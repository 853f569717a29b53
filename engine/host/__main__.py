"""``python -m engine.host``: the lease's reading, first thing on a lent machine (benchmarks/gpu/run_sweep.sh)."""

from engine.host._cpu import PROBE_REPEATS, cpu_model, host_probe

print(f"host: {cpu_model()}; probe {host_probe():.2f} ms (median of {PROBE_REPEATS}; lower is faster)")
