"""``python -m dashboards.serve`` on a study a real sweep wrote, browsed in headless Chromium."""

from __future__ import annotations

import json

import optuna
import pandas as pd
from optuna_dashboard import get_note
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from dashboards.attach import GRAPH_ID
from dashboards.export import export_study
from sweep.store import open_storage
from tests.dashboards.browser import offline_chromium
from tests.dashboards.kit import python_m, serving

PLOT_PREFIX = f"dashboard:plot_data:{GRAPH_ID}:"  # optuna-dashboard's storage layout of saved figures


def _body(browser) -> str:
    return browser.find_element(By.TAG_NAME, "body").text


def test_dashboard_shows_the_study_its_trials_and_the_attached_chart(swept):
    with serving(swept.url, "--refresh", "0", cwd=swept.folder) as served:
        with offline_chromium() as browser:
            wait = WebDriverWait(browser, 60)
            browser.get(f"{served.url}/dashboard/")
            wait.until(lambda b: swept.name in _body(b))
            storage = open_storage(swept.url)
            try:
                study = optuna.load_study(study_name=swept.name, storage=storage.optuna)
                study_id = storage.optuna.get_study_id_from_name(swept.name)
                numbers = [t.number for t in study.get_trials()]
                attrs = storage.optuna.get_study_system_attrs(study_id)
                note = get_note(study)
            finally:
                storage.close()
            browser.get(f"{served.url}/dashboard/studies/{study_id}/trials")
            wait.until(lambda b: all(f"Trial {n}" in _body(b) for n in numbers))
            browser.get(f"{served.url}/dashboard/studies/{study_id}")
            # the attached Pareto chart renders on the study's page, beside the built-in plots
            wait.until(lambda b: "on the feasible front" in _body(b))
        assert served.lines[0].startswith(f"attached the Pareto chart and note to: {swept.name}")
    assert served.process.returncode == 0  # SIGTERM stops it cleanly

    chunks = sorted((k for k in attrs if k.startswith(PLOT_PREFIX)), key=lambda k: int(k.rsplit(":", 1)[1]))
    figure = json.loads("".join(attrs[k] for k in chunks))
    plotted = {round(y, 6) for trace in figure["data"] for y in trace["y"]}
    measured = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    assert {round(t.values[0], 6) for t in measured} <= plotted
    assert f"## {swept.name}: TPS vs PPL under the gate" in note and "PPL <= 1.05 x the baseline trial's PPL" in note
    assert "| trial | centroid_top_k | sliding_window | TPS | PPL |" in note


def test_serve_without_a_database_is_a_clear_error(tmp_path):
    result = python_m("dashboards.serve", "--storage", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert not (tmp_path / "none.db").exists()


def test_the_dashboards_own_pareto_view_draws_a_trial_over_the_gate_as_infeasible(swept):
    storage = open_storage(swept.url)
    try:
        study = optuna.load_study(study_name=swept.name, storage=storage.optuna)
        study_id = storage.optuna.get_study_id_from_name(swept.name)
        records = {r.trial_number: r for r in storage.records(swept.name, token_ids=False)}
    finally:
        storage.close()
    over = [t for t in study.get_trials() if t.state.name == "COMPLETE" and not records[t.number].feasible]
    assert over, "the swept study has trials over the gate (window 128)"
    assert all(t.system_attrs["constraints"][0] > 0 for t in over)  # the attribute optuna-dashboard reads
    with serving(swept.url, "--refresh", "0", "--no-attach", cwd=swept.folder) as served, offline_chromium() as browser:
        browser.get(f"{served.url}/dashboard/studies/{study_id}")
        script = """return [...document.querySelectorAll('.js-plotly-plot')].flatMap(div => (div.data || [])
            .map(t => ({template: String(t.hovertemplate || ''), x: t.x || [], y: t.y || []})))"""
        WebDriverWait(browser, 90).until(
            lambda b: any("Infeasible Trial" in t["template"] for t in b.execute_script(script))
        )
        traces = browser.execute_script(script)
    infeasible = [t for t in traces if "Infeasible Trial" in t["template"]]
    drawn = {round(v, 4) for t in infeasible for v in (*t["x"], *t["y"])}
    assert {round(t.values[0], 4) for t in over} <= drawn  # each trial over the gate, drawn as infeasible
    feasible = [t for t in traces if "Feasible Trial" in t["template"]]
    assert not {round(t.values[0], 4) for t in over} & {round(v, 4) for t in feasible for v in (*t["x"], *t["y"])}
    # the same trials are infeasible in our own exports
    written = export_study(swept.name, swept.url, swept.folder / "exports-infeasible")
    frame = pd.read_csv(next(p for p in written if p.name == "trials.csv")).set_index("number")
    assert not frame.loc[[t.number for t in over], "feasible"].any()
