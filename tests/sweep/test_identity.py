from hypothesis import given
from hypothesis import strategies as st

from engine.config import KNOBS
from sweep.store._identity import differing_prompts, pack_token_ids, unpack_token_ids
from sweep.store._trial import identity_comparable

token_lists = st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=40), max_size=12)


@given(token_lists)
def test_packing_round_trips(ids):
    assert unpack_token_ids(pack_token_ids(ids)) == ids


def test_differing_prompts_counts_prompts_not_tokens():
    base = [[1, 2, 3], [4, 5], [6]]
    assert differing_prompts(base, base) == 0
    assert differing_prompts([[1, 2, 9], [4, 5], [7]], base) == 2
    assert differing_prompts([[1, 2, 3]], base) == 2  # missing prompts differ


def test_only_drafter_knobs_keep_a_trial_comparable():
    baseline = {"sliding_window": 512, "centroid_top_k": 32, "num_speculative_tokens": 3}
    assert KNOBS["centroid_top_k"].lossless and KNOBS["num_speculative_tokens"].lossless  # the registry says so
    assert not KNOBS["sliding_window"].lossless
    assert identity_comparable({"centroid_top_k": 8, "num_speculative_tokens": 6}, baseline)
    assert identity_comparable({"sliding_window": 512}, baseline)  # same value as the baseline
    assert not identity_comparable({"sliding_window": 256, "centroid_top_k": 8}, baseline)
