"""One configuration benchmarked as the organisers benchmark it: ``run_trial`` boots it (``engine.launch``),
measures it and stops it, and never raises for a stack that misbehaves (a failed ``TrialOutcome``).

The client measures a running stack on its own too: ``measure`` (warm-up, the timed TPS runs, the PPL, the
optional streaming pass and serving load, the PPL by context length), its parts (``warm_up``, ``measure_tps``,
``measure_ppl``, ``measure_lengths``,
``measure_load``, ``stream_pass``), the stack's counters (``read_counters``), and the organisers' own client
(``bench_serving``) and audit request (``audit``). ``python -m engine.bench`` is the command-line front end.
"""

from engine.bench._load import Workload, level_prompts, long_prompts, measure_load, percentiles
from engine.bench._measure import harness_warm_up, measure, open_client, tps_rule
from engine.bench._metrics import parse_counters, read_counters
from engine.bench._organisers import audit, bench_serving
from engine.bench._ppl import PplResult, measure_lengths, measure_ppl
from engine.bench._stats import coefficient_of_variation, summarize
from engine.bench._tps import (
    StreamTiming,
    TpsResult,
    TpsRuns,
    chat_payload,
    measure_tps,
    parse_chat,
    stream_pass,
    warm_up,
)
from engine.bench._trial import node_info, run_trial

__all__ = [
    "PplResult",
    "StreamTiming",
    "TpsResult",
    "TpsRuns",
    "Workload",
    "audit",
    "bench_serving",
    "chat_payload",
    "coefficient_of_variation",
    "harness_warm_up",
    "level_prompts",
    "long_prompts",
    "measure",
    "measure_lengths",
    "measure_load",
    "measure_ppl",
    "measure_tps",
    "node_info",
    "open_client",
    "parse_chat",
    "parse_counters",
    "percentiles",
    "read_counters",
    "run_trial",
    "stream_pass",
    "summarize",
    "tps_rule",
    "warm_up",
]
