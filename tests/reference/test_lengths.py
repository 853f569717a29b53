"""PPL by context length on the real reference stack: a small window loses the long context.

Two boots of the embedded reference server (CPU), at a small sliding window and at the model's own, score the
project's long texts (``studies/data/ppl_refs_long.jsonl``) as every trial's length pass does: one teacher-forced
``/v1/completions`` a text with ``prompt_logprobs``, its tokens placed in buckets of context length
(``engine.measurement``). The small window's PPL over the large one's grows from the short bucket to the long one.

The tolerance is the measurement's own: a bucket's log PPL ratio is the mean of its tokens' NLL differences, and
its standard error is taken over blocks of ``BLOCK`` consecutive tokens (a phrase is easy or hard as a whole, so
neighbouring tokens' differences are not independent; block means are); the rise must exceed ``Z`` of those
errors, the project's rule for a difference beyond the noise.
"""

from __future__ import annotations

import json
import math
import statistics

import pytest

from engine.bench import open_client
from engine.config import get_profile
from engine.http import post_json
from engine.measurement import LengthBucket, by_length
from engine.stacks import ppl_payload, target_nlls
from sweep.judgement import Z
from tests.reference.conftest import reference_server

pytestmark = pytest.mark.slow

SMALL, LARGE = 16, 512  # the window study's smallest and the model's own
# a short bucket just past the small window and a long one to the large window's own reach: past it the large
# window's sliding layers forget too, and the gap stops growing (3.5x at 512-1k tokens as at 256-512, measured)
ENDS = (64, 512)
TEXTS = 4
BLOCK = 32
MODEL = "gemma-3-270m"


def _score(window: int, texts, log_dir) -> list[tuple[int, list[float]]]:
    env = {"HF_OVERRIDES": json.dumps({"text_config": {"sliding_window": window}})}
    with reference_server(env, log_dir) as engine, open_client(engine.base_url, timeout_s=600) as client:
        return [
            (
                len(t.context_token_ids),
                target_nlls(post_json(client, "/v1/completions", ppl_payload(t, model=MODEL), what=t.id), t),
            )
            for t in texts
        ]


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    profile = get_profile("quick").with_overrides(
        {"length_refs": "data/ppl_refs_long.jsonl", "length_records": TEXTS, "length_buckets": list(ENDS)},
        source="test",
    )
    texts = profile.load_lengths()
    return {w: _score(w, texts, tmp_path_factory.mktemp(f"window-{w}")) for w in (SMALL, LARGE)}


def _block_error(small, large, bucket: LengthBucket) -> float:
    """The standard error of the bucket's mean NLL difference, over blocks of BLOCK consecutive tokens."""
    means = []
    for (first, a), (_, b) in zip(small, large):
        diffs = [x - y for p, (x, y) in enumerate(zip(a, b), start=first) if bucket.start < p <= bucket.end]
        means += [statistics.fmean(diffs[i : i + BLOCK]) for i in range(0, len(diffs) - BLOCK + 1, BLOCK)]
    return statistics.stdev(means) / math.sqrt(len(means))


def test_a_small_windows_ppl_rises_with_context_length_against_the_models_own(scored):
    small, large = (by_length(scored[w], ENDS) for w in (SMALL, LARGE))
    assert [b.end for b in small] == [b.end for b in large] == list(ENDS)
    # a bucket's log PPL ratio: the mean NLL difference of its tokens (the same tokens at both windows)
    gaps = [math.log(s.ppl / b.ppl) for s, b in zip(small, large)]
    errors = [_block_error(scored[SMALL], scored[LARGE], b) for b in small]
    rise = gaps[1] - gaps[0]
    figures = {b.label: (round(s.ppl, 3), round(b_.ppl, 3)) for s, b_, b in zip(small, large, small)}
    assert rise > Z * math.hypot(*errors), (figures, gaps, errors)
