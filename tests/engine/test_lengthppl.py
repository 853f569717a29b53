"""PPL by context length: the buckets' arithmetic, the profile's long texts, and the pass against the stub stack
(real process, real HTTP), whose every prompt token's logprob is known."""

import json
import math

import pytest

from engine.measurement import LengthBucket, Measurement, by_length
from errors import StudySpecError
from tests.stacks import measure_on_stub, write_ppl_refs
from tests.stacks.stub_server import DEFAULT_WINDOW, token_logprob


def test_each_token_falls_in_the_bucket_of_the_tokens_before_it():
    # a text whose first scored token had 1 token before it, NLL = its position: 1..6
    buckets = by_length([(1, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])], [2, 4, 8])
    assert [(b.start, b.end, b.tokens, b.nll) for b in buckets] == [(0, 2, 2, 3.0), (2, 4, 2, 7.0), (4, 8, 2, 11.0)]
    assert buckets[1].ppl == pytest.approx(math.exp(3.5))
    assert [b.label for b in by_length([(1, [0.0] * 2048)], [512, 1024, 2048])] == ["0-512", "512-1k", "1k-2k"]


def test_tokens_past_the_last_end_are_left_out_and_an_unreached_bucket_is_absent():
    # positions 3-4, and 1-18 of which 17 and 18 lie past the last end
    buckets = by_length([(3, [1.0, 1.0]), (1, [2.0] * 18)], [4, 8, 16])
    assert [(b.end, b.tokens, b.nll) for b in buckets] == [(4, 6, 10.0), (8, 4, 8.0), (16, 8, 16.0)]
    assert [b.end for b in by_length([(1, [1.0] * 3)], [4, 8])] == [4]


def test_a_measurement_keeps_its_buckets_through_its_stored_shape():
    bucket = LengthBucket(start=0, end=512, tokens=511, nll=900.5)
    m = Measurement(
        tps=1.0,
        ppl=2.0,
        ppl_mean_record=2.0,
        completion_tokens=1,
        tps_wall_s=1.0,
        ppl_target_tokens=1,
        num_prompts=1,
        num_ppl_records=1,
        ppl_lengths=[bucket],
    )
    again = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again.ppl_lengths == [bucket] and again.length_bucket(512) == bucket and again.length_bucket(1024) is None


def test_the_profile_cuts_each_text_after_its_last_bucket(tmp_path, stub_profile):
    refs = write_ppl_refs(tmp_path / "long.jsonl", 3, context_len=1, target_len=40)
    profile = stub_profile.with_overrides(
        {"length_refs": str(refs), "length_records": 2, "length_buckets": [8, 16]}, source="test"
    )
    texts = profile.load_lengths()
    assert [len(t.context_token_ids) + len(t.target_token_ids) for t in texts] == [17, 17]  # positions 0..16
    assert stub_profile.load_lengths() == []


@pytest.mark.parametrize("buckets", [[], [16, 8], [8, 8], [0, 8], ["8"]])
def test_bad_buckets_are_refused(stub_profile, buckets):
    with pytest.raises(StudySpecError, match="length_buckets"):
        stub_profile.with_overrides({"length_buckets": buckets}, source="test")


def test_the_length_pass_scores_each_text_once_and_buckets_the_stacks_own_logprobs(tmp_path, stub_profile):
    refs = write_ppl_refs(tmp_path / "long.jsonl", 2, context_len=1, target_len=60)
    profile = stub_profile.with_overrides({"length_refs": str(refs), "length_buckets": [16, 32, 64]}, source="test")
    m, log, _, _, _ = measure_on_stub(tmp_path, profile)
    texts = profile.load_lengths()
    # one request a text, after the challenge's PPL records, as those are asked for
    asked = [r for r in log if r["path"] == "/v1/completions"][-len(texts) :]
    assert [r["body"]["prompt"] for r in asked] == [[*t.context_token_ids, *t.target_token_ids] for t in texts]
    for bucket in m.ppl_lengths:
        nlls = [
            -token_logprob(ids[p], p, DEFAULT_WINDOW)
            for t in texts
            for ids in [[*t.context_token_ids, *t.target_token_ids]]
            for p in range(len(t.context_token_ids), len(ids))
            if bucket.start < p <= bucket.end
        ]
        assert (bucket.tokens, bucket.nll) == (len(nlls), pytest.approx(sum(nlls)))
    assert [b.end for b in m.ppl_lengths] == [16, 32, 64]
