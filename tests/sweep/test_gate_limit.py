"""One rule for a ratio gate's PPL limit: the search's baseline on the sweep's references, its boots elsewhere."""

from dataclasses import asdict, replace

import pytest

from sweep.claims import claims_of
from sweep.claims._promotion import _gate
from sweep.search import load_study
from sweep.store import BootRecord, Judge, PromotionPlan, ppl_limit, scores_sweep_references
from tests.stacks import stub_profile
from tests.sweep.kit import measured_record, write_manifest, write_study

RATIO = 1.05


def _boot(trial: int, ppl: float, repeat: int, *, run: str, refs: str) -> BootRecord:
    return BootRecord(
        study_name="s",
        trial_number=trial,
        run_id=run,
        repeat=repeat,
        order=repeat,
        status="complete",
        claimed_tps=100.0,
        claimed_ppl=ppl,
        gate=None,
        public_tps=100.0 + repeat,
        tps=100.0 + repeat,
        ppl=ppl,
        prompts="p",
        refs=refs,
        profile="quick",
    )


def _spec(tmp_path, name, promotion_profile=None):
    profile = stub_profile(tmp_path)
    # a table of its own: write_study writes a nested one so
    other = {"promotion.profile": promotion_profile} if promotion_profile else {}
    study = write_study(
        tmp_path,
        manifest=write_manifest(tmp_path),
        profile=profile,
        name=name,
        space={"centroid_top_k": {"choices": [16, 32]}},
        gate={"ppl_max_ratio": RATIO},
        sampler="grid",
        promotion={"candidates": 2, "boots": 3},
        **other,
    )
    return load_study(study), profile


def test_a_ratio_gate_has_one_limit_on_each_set_of_references_wherever_it_is_taken(tmp_path):
    # the baseline reads a PPL of 2.00 in the search, of 2.10..2.14 booted on other references by a promotion,
    # and 2.20..2.24 on the held-out references a verification scores: three limits, each taken one way everywhere
    spec, profile = _spec(tmp_path, "same")
    held_out = replace(profile, refs=profile.heldout_refs)
    first = measured_record(0, 100.0, 2.00, study="s", is_baseline=True, profile=asdict(profile))
    baseline = Judge(spec.gate, False, None).judge(first)
    candidate = Judge(spec.gate, False, baseline).judge(measured_record(1, 120.0, 2.05, profile=asdict(profile)))
    searched = RATIO * 2.00
    assert baseline.gate == candidate.gate == Judge(spec.gate, False, baseline).gate_ppl == pytest.approx(searched)
    assert ppl_limit(spec.gate, baseline=baseline) == ppl_limit(spec.gate, profile, baseline=baseline) == baseline.gate

    promoted = [_boot(n, ppl, i, run="p", refs="b") for i, ppl in enumerate((2.10, 2.14, 2.12)) for n in (0,)]
    promoted += [_boot(1, 2.16, i, run="p", refs="b") for i in range(3)]
    # a promotion scoring the sweep's own references: the search's baseline, whatever its boots there read
    same_gate = _gate(spec, [baseline, candidate])
    assert same_gate.baseline_ppl == baseline.ppl
    plan = PromotionPlan(
        run_id="p", trials=(1, 0), boots=3, profile=profile, target=0.9, noise_floor=0.02, gate=same_gate
    )
    assert claims_of(plan, promoted).gate == ppl_limit(spec.gate, profile, baseline=baseline, boots=promoted)
    assert claims_of(plan, promoted).gate == pytest.approx(searched)

    # a promotion scoring other references: the baseline promoted with the candidates, the median of its boots
    other_spec, _ = _spec(tmp_path, "other", promotion_profile={"name": "quick", "refs": profile.heldout_refs})
    assert other_spec.promotion.profile is not None
    other = other_spec.promotion.profile
    assert scores_sweep_references(baseline, profile) and not scores_sweep_references(baseline, other)
    other_gate = _gate(other_spec, [baseline, candidate])
    assert other_gate.baseline_ppl is None and other_gate.baseline_trial == 0
    plan = replace(plan, profile=other, gate=other_gate)
    promoted_limit = claims_of(plan, promoted).gate
    assert promoted_limit == ppl_limit(spec.gate, other, baseline=baseline, boots=promoted)
    assert promoted_limit == pytest.approx(RATIO * 2.12)

    # a verification on the held-out references: its baseline's boots, booted first, never the search's PPL
    verifying = [_boot(0, ppl, i, run="v", refs="h") for i, ppl in enumerate((2.20, 2.24))]
    assert ppl_limit(spec.gate, held_out, baseline=baseline, boots=[*promoted, *verifying]) != pytest.approx(searched)
    assert ppl_limit(spec.gate, held_out, baseline=baseline, boots=verifying) == pytest.approx(RATIO * 2.22)
    # an absolute gate is its number on any references
    absolute = replace(spec.gate, ppl_max=2.5, ppl_max_ratio=None)
    assert {ppl_limit(absolute, p, baseline=baseline, boots=verifying) for p in (profile, other, held_out)} == {2.5}
