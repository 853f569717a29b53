"""``python -m dashboards.export`` on a study a real sweep wrote, checked in offline Chromium."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys

import optuna
import pandas as pd
import pytest

from sweep.store import open_storage
from tests.dashboards.browser import offline_chromium
from tests.dashboards.kit import child_env, python_m

# No best/manifest.json: the sweep promoted its candidates, but nothing verified them yet
FILES = [
    "pareto.html",
    "pareto.png",
    "pareto.svg",
    "trials.csv",
    "importances.csv",
    "best/README.md",
    "lengths.csv",
    "lengths.html",
    "lengths.png",
]


def _trials(url: str, study: str) -> list[optuna.trial.FrozenTrial]:
    storage = open_storage(url)
    try:
        return optuna.load_study(study_name=study, storage=storage.optuna).get_trials()
    finally:
        storage.close()


def test_the_sweep_itself_wrote_the_exports(swept):
    folder = swept.folder / "runs" / "exports" / swept.name
    written = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert written == sorted(FILES)


def test_export_writes_its_files_and_the_html_works_offline(swept, tmp_path):
    out = tmp_path / "out"
    result = python_m(
        "dashboards.export",
        "--study",
        swept.name,
        "--storage",
        swept.url,
        "--out",
        str(out),
        cwd=swept.folder,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(out / name) for name in FILES]
    trials = _trials(swept.url, swept.name)
    measured = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(measured) >= 5 and len(failed) == 2  # K=8 fails at boot at both windows

    png = (out / "pareto.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1200, 700)
    svg = (out / "pareto.svg").read_text()
    assert svg.startswith("<svg") and "Perplexity, PPL" in svg and "Failed trials (2)" in svg

    frame = pd.read_csv(out / "trials.csv")
    assert sorted(frame["number"]) == sorted(t.number for t in trials)
    for column in (
        "knob.centroid_top_k",
        "knob.sliding_window",
        "tps",
        "ppl",
        "acceptance_rate",
        "identity_diff_prompts",
        "feasible",
        "on_front",
        "verify_verdict",
        "fail_reason",
    ):
        assert column in frame.columns
    # each measured trial's profile timed it 3 times, and their spread is kept
    assert frame[frame["state"] == "COMPLETE"]["tps_cv"].notna().all()
    assert frame[frame["state"] == "COMPLETE"]["tps_cv"].between(0, 1).all()
    differing = frame[frame["knob.centroid_top_k"] == 16]
    assert (differing[differing["knob.sliding_window"] == 512]["identity_diff_prompts"] > 0).all()

    with offline_chromium() as browser:
        browser.get((out / "pareto.html").as_uri())
        assert browser.execute_script("return typeof Plotly") == "object"  # inlined: no CDN reachable
        assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
        points = browser.execute_script(
            "return document.getElementById('figure-0').data"
            ".filter(t => !['greedy', 'baseline', 'claim'].some(n => t.name.startsWith(n)))"
            ".flatMap(t => t.x.map((x, i) => [x, t.y[i]]))"
        )
        n_figures = browser.execute_script("return document.querySelectorAll('.plotly-graph-div').length")
    expected = sorted((round(t.values[1], 6), round(t.values[0], 6)) for t in measured)
    assert sorted((round(x, 6), round(y, 6)) for x, y in points) == expected
    # the Pareto chart, one knob view per swept knob, the history, the importances, a slice plot per objective
    assert n_figures == 1 + 2 + 1 + 1 + 2

    # PPL against context length: one line per front point through its buckets, as its trial stored them
    lengths = pd.read_csv(out / "lengths.csv")
    front = frame[frame["on_front"] == True]  # noqa: E712 - a column of booleans read back from the CSV
    assert len(front) >= 1 and set(lengths["end"]) == {16, 32}
    png = (out / "lengths.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1200, 700)
    with offline_chromium() as browser:
        browser.get((out / "lengths.html").as_uri())
        lines = browser.execute_script(
            "return document.querySelector('.plotly-graph-div').data.map(t => [t.name, t.x, t.y])"
        )
    drawn = {name.split(":")[0]: (list(x), list(y)) for name, x, y in lines}
    assert sorted(drawn) == sorted(f"trial {n}" for n in front["number"])
    for number in front["number"]:
        rows = lengths[lengths["number"] == number].sort_values("end")
        x, y = drawn[f"trial {number}"]
        assert x == list(rows["end"]) and y == pytest.approx(list(rows["ppl"]))


@pytest.mark.parametrize("case", ["missing study", "empty study", "missing database"])
def test_export_of_nothing_is_a_clear_error_with_exit_2(case, tmp_path):
    url = f"sqlite:///{tmp_path / 'sweep.db'}"
    if case != "missing database":
        storage = open_storage(url)
        optuna.create_study(study_name="empty", storage=storage.optuna, directions=["maximize", "minimize"])
        storage.close()
    study = "nope" if case == "missing study" else "empty"
    result = python_m("dashboards.export", "--study", study, "--storage", url, cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    expected = {
        "missing study": "study 'nope' not found in",
        "empty study": "study 'empty' has no completed trials to chart",
        "missing database": "no database file there",
    }[case]
    assert result.stderr.startswith("error: ") and expected in result.stderr
    assert not (tmp_path / "runs").exists()


def test_images_render_with_no_network_at_all(swept, tmp_path):
    """kaleido drives the system Chromium over a pipe, with plotly.js from disk and MathJax off:
    in a network namespace with no interface up at all, the export still writes every file."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare -n (root, or user namespaces) to cut the network off")
    out = tmp_path / "offline"
    result = subprocess.run(
        [
            unshare,
            "-n",
            sys.executable,
            "-m",
            "dashboards.export",
            "--study",
            swept.name,
            "--storage",
            swept.url,
            "--out",
            str(out),
        ],
        cwd=swept.folder,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert (out / "pareto.png").stat().st_size > 10_000 and (out / "pareto.svg").read_text().startswith("<svg")


@pytest.mark.parametrize(
    ("browser", "code", "message"),
    [
        ("/nonexistent/chromium", 2, "BROWSER_PATH='/nonexistent/chromium' is not an executable file"),
        ("/bin/false", 1, "/bin/false failed to render pareto.png, pareto.svg: BrowserFailedError"),
    ],
)
def test_a_missing_or_broken_browser_is_one_clear_line(swept, tmp_path, browser, code, message):
    out = tmp_path / "out"
    env = {**child_env(), "BROWSER_PATH": browser}
    result = subprocess.run(
        [sys.executable, "-m", "dashboards.export", "--study", swept.name, "--storage", swept.url, "--out", str(out)],
        cwd=swept.folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == code and "Traceback" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and message in error[0]
    assert (out / "pareto.html").is_file() and (out / "trials.csv").is_file()  # written before the images


def test_best_offers_no_unverified_point_and_lists_the_promotions_claims(swept, tmp_path):
    out = tmp_path / "out"
    assert (
        python_m(
            "dashboards.export",
            "--study",
            swept.name,
            "--storage",
            swept.url,
            "--out",
            str(out),
            cwd=swept.folder,
            timeout=180,
        ).returncode
        == 0
    )
    storage = open_storage(swept.url)
    try:
        promoted = storage.boots("promotion", swept.name)
    finally:
        storage.close()
    assert len(promoted) == 4 and all(b.measured for b in promoted)  # 2 candidates x 2 boots
    assert not (out / "best" / "manifest.json").exists()
    readme = (out / "best" / "README.md").read_text()
    assert "no point to submit yet" in readme and "### Screening: promotion" in readme
    # the run ends with the confirmation of the promotion's choice beside its control: the claims to act on
    assert "### Confirmation: run" in readme and "(chosen)" in readme
    # its table shows the P where the organisers' machine reads 1-8% from yours and the P ceiling, as sweep.claims does
    assert "| P, machine 1% | P, machine 2% | P, machine 4% | P, machine 8% | P ceiling |" in readme
    assert f"python -m sweep.verify --study {swept.name} --storage {swept.url}" in readme
    frame = pd.read_csv(out / "trials.csv").set_index("number")
    promoted_trials = sorted({b.trial_number for b in promoted})
    assert (
        frame.loc[promoted_trials, "claim_tps"].notna().all() and frame.loc[promoted_trials, "claim_boots"].eq(4).all()
    )
    assert frame["provenance.stack"].dropna().eq("stub").all()
    # the confirmed trials' P falls as the organisers' machine reads further from yours; the screening's have none
    at = frame[[f"claim_p_machine_{pct}pct" for pct in (1, 2, 4, 8)]].dropna()
    assert len(at) == 2 and (at.diff(axis=1).iloc[:, 1:] <= 0).all().all()
    assert frame.loc[at.index, "claim_p_ceiling"].between(0, 1).all()


def test_the_importances_say_which_knob_moved_ppl(swept, tmp_path):
    out = tmp_path / "out"
    assert (
        python_m(
            "dashboards.export",
            "--study",
            swept.name,
            "--storage",
            swept.url,
            "--out",
            str(out),
            cwd=swept.folder,
            timeout=180,
        ).returncode
        == 0
    )
    shares = pd.read_csv(out / "importances.csv")
    ppl = shares[shares["objective"] == "PPL"].set_index("knob")["importance"]
    assert ppl.idxmax() == "sliding_window"  # the stub's window moves PPL; its centroid count never does
    html = (out / "pareto.html").read_text()
    assert "which knob moved TPS, which moved PPL" in html and "against each knob (slice)" in html
