"""The real reference stack end to end: a ctk sweep, its promotion, a point re-run held-out by ``sweep.verify``,
then its submission folder booted from an empty folder and timed with the organisers' own client."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from engine.config import STUDIES_DIR, get_profile
from engine.reference.prepare import prepare_model
from sweep.claims import confirm, load_evidence, promote
from sweep.search import load_study
from sweep.store import open_storage
from sweep.submit import main as submit
from sweep.verify import main
from tests.sweep.kit import run_in_process, write_study

pytestmark = pytest.mark.slow

TEXT = STUDIES_DIR.parent / "tests" / "reference" / "data" / "ppl_text.txt"


def _refs(path, paragraphs: list[str]) -> str:
    """PPL records from real prose: a chat-templated request for the paragraph's first half,
    the second half as the target (the shape of the challenge's reference set)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(prepare_model().checkpoint_dir)
    lines = []
    for i, paragraph in enumerate(paragraphs):
        words = paragraph.split()
        head, tail = " ".join(words[: len(words) // 2]), " " + " ".join(words[len(words) // 2 :])
        templated = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Continue: {head}"}], add_generation_prompt=True, tokenize=False
        )
        context = tokenizer(templated, add_special_tokens=False)["input_ids"]  # the template holds <bos>
        target = tokenizer(tail, add_special_tokens=False)["input_ids"][:48]
        lines.append(json.dumps({"id": f"t{i}", "context_token_ids": list(context), "target_token_ids": target}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_ctk_point_re_run_on_held_out_data_keeps_the_baselines_ppl(ray_connected, tmp_path, monkeypatch, capsys):
    paragraphs = [p for p in TEXT.read_text().split("\n\n") if len(p.split()) > 40]
    assert len(paragraphs) >= 4
    public, held_out = _refs(tmp_path / "public.jsonl", paragraphs[:2]), _refs(tmp_path / "held.jsonl", paragraphs[2:4])
    profile = get_profile("quick").with_overrides(
        {
            "prompts": str(STUDIES_DIR / "data" / "prompts_public.json"),
            "refs": public,
            "num_prompts": 2,
            "output_len": 24,
            "ppl_records": 2,
            "warmup_requests": 1,
        },
        source="test",
    )
    study = write_study(
        tmp_path,
        manifest=STUDIES_DIR / "manifests" / "reference.json",
        profile=profile,
        name="refctk",
        space={"centroid_top_k": {"choices": [8, 32]}},
        sampler="grid",
        n_trials=2,
        seed=1,
        identity_required=True,
        promotion={"candidates": 2, "boots": 2, "confirm_boots": 2, "confirm_max_boots": 2},
    )
    # n_trials=2, seed=1: the grid runs K=8 after the baseline (K=32); four boots in all
    url = f"sqlite:///{tmp_path / 's.db'}"
    result, log = run_in_process(study, url, tmp_path / "runs")
    assert all(r.status == "complete" for r in result.records), log
    baseline = next(r for r in result.records if r.is_baseline)
    other = next(r for r in result.records if r.knobs["centroid_top_k"] == 8)
    assert other.identity_diff_prompts == 0 and other.ppl == pytest.approx(baseline.ppl, rel=1e-6)

    monkeypatch.chdir(tmp_path)
    held_prompts = str(STUDIES_DIR / "data" / "prompts_heldout.json")
    rc = main(
        [
            "--study",
            str(study),
            "--storage",
            url,
            "--prompts",
            held_prompts,
            "--refs",
            held_out,
            "--trials",
            str(other.trial_number),
            "--repeats",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1, out  # one boot of each: no TPS verdict, so not every trial VERIFIED
    storage = open_storage(url)
    try:
        reruns = storage.boots("verification", "refctk")
        verdicts = load_evidence(storage, "refctk").verdicts
    finally:
        storage.close()
    assert [r.trial_number for r in reruns] == [baseline.trial_number, other.trial_number]  # baseline first
    assert all(r.status == "complete" and r.refs == held_out for r in reruns), [r.reason for r in reruns]
    base_run, other_run = reruns
    # other text, other PPL; the drafter knob still leaves it equal to the baseline's, under the gate
    assert base_run.ppl != pytest.approx(baseline.ppl, rel=1e-3)
    assert other_run.ppl == pytest.approx(base_run.ppl, rel=1e-6)
    assert other_run.gate == pytest.approx(1.05 * base_run.ppl)
    # one boot is one draw of a re-run: UNDECIDED on TPS whatever it read, the PPL judged and under the gate
    for v in verdicts.values():
        assert v.verdict == "UNDECIDED" and "one measured boot" in v.undecided and v.reasons == (), v
        assert f"trial {v.trial_number} UNDECIDED: one measured boot" in " ".join(out.split())

    # the promotion: both configurations, two fresh boots each, on this real stack; then the confirmation's own
    # run of boots, which makes the claim a submission carries
    storage = open_storage(url)
    try:
        spec, quiet = load_study(study), Console(quiet=True)
        view = promote(spec, storage, out=quiet, run_dir=tmp_path / "runs")
        confirmed = confirm(spec, storage, out=quiet, run_dir=tmp_path / "runs")
    finally:
        storage.close()
    assert (
        view.complete
        and not view.failed
        and {c.trial_number for c in view.claims} == {baseline.trial_number, other.trial_number}
    )
    assert all(b.provenance["stack"] == "gemma-sweep reference" and b.provenance["torch"] for b in view.boots)
    assert confirmed is not None and confirmed.confirmation is not None and confirmed.confirmation.complete
    # its submission, booted from a copy in an empty folder as the organisers' harness would
    assert submit(["--study", str(study), "--storage", url, "--allow-unverified", "--out", str(tmp_path / "sub")]) == 0
    manifest = json.loads((tmp_path / "sub" / "manifest.json").read_text())
    assert manifest["model_id"] == "google/gemma-3-270m" and any(
        d.startswith("torch==") for d in manifest["dependencies"]
    )
    assert {"CENTROID_TOP_K", "SPECULATIVE_CONFIG", "HF_OVERRIDES"} <= set(manifest["env"])
    capsys.readouterr()
    code = submit(["--check", str(tmp_path / "sub"), "--port", "18923"])
    printed = capsys.readouterr().out
    assert "TPS, held-out prompts (the organisers' bench_serving" in printed and "audit (/v1/completions" in printed
    # it boots from the code it carries (stack/), under the gate; one boot is one draw, no verdict
    assert ("this draw lands" in printed or "this draw misses" in printed) and code == 0, printed
