"""A run's step distribution from a step-time histogram: stalls told from slow steps, and never overstated."""

from __future__ import annotations

import bisect
import math
import random

import pytest

from engine.bench._metrics import parse_counters, stack_figures
from engine.bench._steps import STALL_FACTOR, StepTimes, bucket_key
from engine.stacks import ADAPTERS, STEP_BUCKETS
from engine.stacks._vllm import VLLM_METRICS
from tests.stacks import stub_server

NAME = "vllm:inter_token_latency_seconds"
VLLM_DEFAULT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0)


def _counts(steps: list[float], bounds=STEP_BUCKETS) -> dict[float, float]:
    """Cumulative counts, as a Prometheus histogram holds them."""
    per = [0] * (len(bounds) + 1)
    for s in steps:
        per[bisect.bisect_left(bounds, s)] += 1
    cumulative, out = 0, {}
    for bound, n in zip([*bounds, math.inf], per):
        cumulative += n
        out[bound] = float(cumulative)
    return out


def _times(steps, bounds=STEP_BUCKETS):
    times = StepTimes.from_counts(_counts(steps, bounds), total_s=sum(steps))
    assert times is not None
    return times


def test_steady_steps_have_no_stall_and_their_median_where_they_are():
    steps = [random.Random(1).uniform(0.0040, 0.0044) for _ in range(1000)]
    t = _times(steps)
    assert t.steps == 1000
    assert t.p50_bucket[0] <= 0.0042 <= t.p50_bucket[1]
    assert 0.0035 < t.p50 < 0.005
    assert (t.stall_steps, t.stall_s, t.stalled) == (0, 0.0, False)


def test_a_few_long_steps_are_stalls_and_their_time_is_counted_at_most_as_it_was():
    steps = [0.004] * 1150 + [0.7, 1.2]  # two frozen steps, 1.9 s of a 6.5 s run
    t = _times(steps)
    assert t.stall_steps == 2
    assert 0.8 * 1.9 < t.stall_s <= 1.9
    assert t.stalled and t.stall_share > 0.2
    assert t.max_bucket[0] < 1.2 <= t.max_bucket[1]
    assert t.p99 < 0.01  # the tail percentile a mean hides it in does not show them: 2 of 1,152 steps


def test_every_step_slower_is_a_slower_median_and_no_stall():
    fast, slow = _times([0.0035] * 1000), _times([0.0047] * 1000)
    assert slow.p50 > 1.2 * fast.p50
    assert not slow.stalled and slow.stall_steps == 0


def test_vllm_default_buckets_count_only_what_is_certainly_a_stall():
    # a 4 ms median sits in vLLM's first bucket (0, 10 ms]: only steps from 30 ms up are certainly 3x slower
    steps = [0.004] * 1000 + [0.028] * 5 + [0.6] * 3
    t = _times(steps, VLLM_DEFAULT)
    assert t.p50_bucket == (0.0, 0.01)
    assert t.stall_steps == 3  # the 28 ms steps' bucket (25, 50] begins below 3 x 10 ms
    assert 3 * 0.5 <= t.stall_s <= 3 * 0.6


@pytest.mark.parametrize("seed", range(20))
def test_the_stall_time_is_a_lower_bound_of_the_truth(seed):
    rng = random.Random(seed)
    median = rng.uniform(0.002, 0.05)
    steps = [median * math.exp(rng.gauss(0, 0.1)) for _ in range(800)]
    steps += [median * rng.uniform(1, 200) for _ in range(rng.randrange(0, 20))]
    true_median = sorted(steps)[len(steps) // 2]
    true_stall = sum(s for s in steps if s > STALL_FACTOR * true_median)
    for bounds in (STEP_BUCKETS, VLLM_DEFAULT):
        t = _times(steps, bounds)
        assert t.stall_s <= true_stall + 1e-12
        assert t.steps == len(steps)


def test_a_run_with_no_step_has_no_distribution():
    assert StepTimes.from_counts({0.01: 0.0, math.inf: 0.0}, total_s=0.0) is None


def test_the_histogram_is_read_over_its_label_sets_and_a_run_keeps_its_figures():
    def text(steps):
        counts = _counts(steps)
        lines = [f"# TYPE {NAME} histogram"]
        for engine in ("0", "1"):
            lines += [
                f'{NAME}_bucket{{engine="{engine}",le="{"+Inf" if math.isinf(b) else repr(b)}"}} {n / 2}'
                for b, n in counts.items()
            ]
            lines.append(f'{NAME}_sum{{engine="{engine}"}} {sum(steps) / 2}')
        lines.append('vllm:iteration_tokens_total_count{engine="0"} 4')
        return "\n".join(lines)

    run = [0.004] * 400 + [0.5]
    names = VLLM_METRICS.counters
    before = parse_counters(text([]), names, buckets=NAME)
    after = parse_counters(text(run), names, buckets=NAME)
    assert after[bucket_key(NAME, math.inf)] == 401
    deltas = {k: after[k] - before.get(k, 0.0) for k in after}
    figures = stack_figures(deltas, VLLM_METRICS, wall_s=2.2, tokens=401)
    assert figures["step_times"]["steps"] == 401 and figures["step_times"]["stall_steps"] == 1
    assert figures["step_times"]["stalled"] is True
    assert sum(n for _, n in figures["step_buckets"]) == 401
    assert not any("_bucket|" in k for k in figures["counters"])  # the buckets are kept once, compactly
    assert stack_figures(deltas, ADAPTERS["openai"].metrics, wall_s=2.2, tokens=401)["step_times"] is None


def test_the_stub_stack_buckets_as_the_project_asks():
    assert stub_server.STEP_BUCKETS == STEP_BUCKETS
