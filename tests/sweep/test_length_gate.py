"""A study that gates on a length bucket: read from its [gate], judged by the one feasibility rule, told to Optuna as a
constraint, stored with the trial, and printed per point by the console."""

import io
import math
import re

import pytest
from rich.console import Console

from engine.measurement import LengthBucket
from errors import StudySpecError
from sweep.judgement import Gate
from sweep.search import SweepConsole, load_study
from sweep.store import Judge, open_storage
from sweep.store._trial import LENGTH_CONSTRAINT
from tests.stacks import stub_profile, write_ppl_refs
from tests.sweep.kit import measured_record, write_manifest, write_study

GATE = Gate(ppl_max_ratio=1.05, length_bucket=32, length_ratio=1.10)


def buckets(*ppls: float) -> list[LengthBucket]:
    """Buckets (0, 16], (16, 32], ... of 16 tokens each at these PPLs."""
    return [LengthBucket(start=16 * i, end=16 * (i + 1), tokens=16, nll=16 * math.log(p)) for i, p in enumerate(ppls)]


def record(number, ppl, *lengths, baseline=False, tps=100.0):
    return measured_record(number, tps, ppl, is_baseline=baseline, ppl_lengths=buckets(*lengths))


def test_a_long_context_over_its_bucket_gate_is_infeasible_though_the_gates_ppl_passes():
    base = Judge(GATE, False, None).judge(record(0, 2.0, 10.0, 8.0, baseline=True))
    assert base.feasible and base.length_gate == pytest.approx(8.8)  # the first baseline: held to its own
    judge = Judge(GATE, False, base)
    short_only = judge.judge(record(1, 2.05, 10.5, 9.0))  # the gate's PPL within 5%, 2k-like bucket 12.5% over
    kept = judge.judge(record(2, 2.05, 11.5, 8.7))  # its short bucket worse, the gated one within 10%
    unscored = judge.judge(record(3, 2.0))  # no long texts scored: not known to be under the bucket's gate
    assert (short_only.feasible, kept.feasible, unscored.feasible) == (False, True, False)
    told = {
        r.trial_number: r.constraints(identity_required=False, length_bucket=32)[LENGTH_CONSTRAINT]
        for r in (short_only, kept, unscored)
    }
    assert told[1] == pytest.approx(9.0 - 8.8) and told[2] == pytest.approx(8.7 - 8.8) and told[3] == math.inf
    assert LENGTH_CONSTRAINT not in kept.constraints(identity_required=False)  # a study without a bucket gate


def test_a_study_reads_its_bucket_gate_and_refuses_one_its_profile_does_not_score(tmp_path):
    manifest = write_manifest(tmp_path)
    refs = write_ppl_refs(tmp_path / "long.jsonl", 2, context_len=1, target_len=40)
    scored = stub_profile(tmp_path, length_refs=str(refs), length_buckets=[16, 32])

    def study(profile, **gate):
        return write_study(
            tmp_path,
            manifest=manifest,
            profile=profile,
            space={"centroid_top_k": {"choices": [16, 32]}},
            gate={"ppl_max_ratio": 1.05, **gate},
            n_trials=2,
        )

    spec = load_study(study(scored, length_bucket=32, length_ratio=1.1))
    assert (spec.gate.length_bucket, spec.gate.length_ratio) == (32, 1.1)
    assert "up to 32 tokens" in spec.gate.describe()
    for profile, gate, fragment in (
        (scored, {"length_bucket": 24, "length_ratio": 1.1}, "the length buckets ending at [16, 32]"),
        (stub_profile(tmp_path), {"length_bucket": 32, "length_ratio": 1.1}, "scores no long texts"),
        (scored, {"length_bucket": 32}, "both 'length_bucket'"),
        (scored, {"length_bucket": 32, "length_ratio": 0.9}, "'gate.length_ratio' must be a number >= 1"),
    ):
        with pytest.raises(StudySpecError, match=re.escape(fragment)):
            load_study(study(profile, **gate))


def test_the_bucket_gate_and_the_buckets_are_stored_with_the_trial(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        judged = Judge(GATE, False, None).judge(record(0, 2.0, 10.0, 8.0, baseline=True))
        storage.insert_record(judged)
        (back,) = storage.records("s")
    finally:
        storage.close()
    assert back.length_gate == judged.length_gate and back.figures.ppl_lengths == buckets(10.0, 8.0)


def test_the_console_prints_each_points_ppl_by_context_length():
    out = io.StringIO()
    console = SweepConsole(Console(file=out, width=250))
    base = Judge(GATE, False, None).judge(record(0, 2.0, 10.0, 8.0, baseline=True))
    other = Judge(GATE, False, base).judge(record(1, 2.02, 10.2, 8.5, tps=120.0))  # faster: both on the front
    console.finished(other, requeued=False)
    console.front([base, other], knobs=["centroid_top_k"], title="front")
    text = out.getvalue()
    assert "PPL by context length: 0-16 10.2000 (16 tokens)  16-32 8.5000 (16 tokens)  length gate 8.8000" in text
    assert "PPL 0-16" in text and "PPL 16-32" in text and "10.2000" in text.split("PPL 16-32")[1]
