"""``python -m sweep.submit``: the folder in the organisers' format, only for a VERIFIED point unless asked,
and ``--check``, which boots a copy of it as their harness would and times it with their own client."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.manifest import REPO_ROOT
from engine.reference.prepare import prepare_model
from sweep.storage import open_storage
from sweep.submit import main
from sweep.verify import main as verify_main
from tests.sweep.kit import promoted_stub_study, write_manifest

ORGANISERS_FORMAT = ["name", "description", "dependencies", "model_id", "served_model_name", "port", "serve", "env"]


@pytest.fixture
def promoted(ray_connected, tmp_path, monkeypatch):
    """A stub study searched, promoted (2 candidates x 2 boots) and not yet verified."""
    study, url, view = promoted_stub_study(
        tmp_path, manifest=write_manifest(tmp_path, STUB_DECODE_STEP_S="0.01"), name="sub", choices=[32, 64]
    )
    monkeypatch.chdir(tmp_path)
    return study, url, view


def test_nothing_unverified_is_written_unless_asked_and_then_it_says_so(promoted, tmp_path, capsys):
    study, url, view = promoted
    assert main(["--study", str(study), "--storage", url]) == 1
    assert "nothing to submit: no point of the study is VERIFIED (no verification run yet)" in capsys.readouterr().out
    assert not (tmp_path / "runs" / "exports" / "sub" / "submission").exists()

    assert main(["--study", str(study), "--storage", url, "--allow-unverified", "--out", str(tmp_path / "unv")]) == 0
    best = max(view.claims, key=lambda c: (c.p_verified, c.claim))
    manifest = json.loads((tmp_path / "unv" / "manifest.json").read_text())
    assert (
        list(manifest) == ORGANISERS_FORMAT and manifest["serve"] == ["python", "serve.py"] and manifest["port"] == 8000
    )
    assert f"trial{best.trial_number}" in manifest["name"] and "UNVERIFIED (never verified)" in manifest["description"]
    assert not any("{" + p + "}" in json.dumps(manifest) for p in ("port", "host", "python", "repo", "cache", "tmpdir"))
    readme = (tmp_path / "unv" / "README.md").read_text()
    assert readme.startswith("# ") and "**UNVERIFIED.**" in readme and f"**{best.claim:.2f}** tok/s" in readme
    claim = json.loads((tmp_path / "unv" / "claim.json").read_text())
    assert claim["claim_tps"] == pytest.approx(best.claim) and claim["verified"] is False
    # no later run of boots: the odds of a re-run on another day or machine are not measured, and it says so
    assert claim["p_later"] is None and "| P(VERIFIED), a later run | not measured" in readme


def test_a_verified_point_is_written_and_its_copy_boots_from_an_empty_folder(promoted, tmp_path, capsys):
    study, url, view = promoted
    assert verify_main(["--study", str(study), "--storage", url, "--top", "1", "--repeats", "2"]) in (0, 1)
    capsys.readouterr()
    code = main(["--study", str(study), "--storage", url])
    printed = capsys.readouterr().out
    folder = tmp_path / "runs" / "exports" / "sub" / "submission"
    if code == 1:  # the verification was UNDECIDED on a busy machine: asked for, it is written all the same
        assert "no point of the study is VERIFIED" in printed
        assert main(["--study", str(study), "--storage", url, "--allow-unverified"]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "claim.json", "manifest.json", "serve.py"]
    # the verification is a later run of the promotion's measure: the folder gives the odds of a later re-run too
    claim = json.loads((folder / "claim.json").read_text())
    # the configurations both runs measured: the top one, and the baseline the relative gate boots first unless the
    # top one is the baseline itself (which of the two ranks first is up to the noise)
    storage = open_storage(url)
    try:
        both = {b.trial_number for b in storage.boots("verification", "sub")} & set(view.fit.levels)
    finally:
        storage.close()
    assert 0.0 <= claim["p_later"] <= 1.0 and f"{len(both)} configuration(s) over 2 runs" in claim["between_runs"]
    assert f"| P(VERIFIED), a later run | {claim['p_later']:.2f} (between runs" in (folder / "README.md").read_text()
    # serve.py refuses clearly what the folder lacks: here, the checkout that holds the stub's script
    missing = subprocess.run(
        [sys.executable, "serve.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "GEMMA_SWEEP_REPO": str(tmp_path / "nowhere")},
    )
    assert missing.returncode == 2 and "serve.py: the stack's script" in missing.stderr
    # --check: a copy in an empty folder, the organisers' client on the held-out and the public prompts
    code = main(["--check", str(folder), "--port", "18911", "--tokenizer", str(prepare_model().checkpoint_dir)])
    printed = capsys.readouterr().out
    assert "`python serve.py`, the manifest's env over a clean one, port 18911" in printed
    assert "TPS, held-out prompts (the organisers' bench_serving" in printed and "TPS, public prompts" in printed
    assert (
        "PPL (as their ppl_endpoint.py" in printed
        and "audit (/v1/completions, return_token_ids): 8 token ids back" in printed
    )
    assert ("expected verdict: VERIFIED" in printed) == (code == 0) and "expected verdict:" in printed
    assert f"for a later run {claim['p_later']:.2f}" in printed


def test_bad_input_is_refused_before_anything_boots(tmp_path, capsys):
    for argv, message in (
        (["--study", "ctk", "--check", str(tmp_path)], "one of the two"),
        (["--check", str(tmp_path), "--bench-python", "python"], "go together"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert main(["--check", str(tmp_path)]) == 2
    assert "not a submission folder of this tool" in capsys.readouterr().err
    assert (
        main(["--study", str(REPO_ROOT / "studies" / "ctk.toml"), "--storage", f"sqlite:///{tmp_path / 'no.db'}"]) == 2
    )
