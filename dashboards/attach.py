"""Attach the Pareto chart and a study note to a study, for optuna-dashboard to show.

Both live in the study's system attrs (optuna-dashboard's own format: ``save_plotly_graph_object``
and ``save_note``), never in its trials, so attaching never touches what the driver writes (SQLite's WAL and busy
timeout, set by ``sweep.store``, let it share the file with a running sweep). The note is
rewritten only when it changed, and keeps whatever a user wrote outside the block between
``NOTE_BEGIN`` and ``NOTE_END``.
"""

from __future__ import annotations

import warnings

import optuna
from optuna_dashboard import get_note, save_note, save_plotly_graph_object

from dashboards.claims import claims_lines
from dashboards.data import StudyData, TrialRow, load_study_data
from dashboards.figures import pareto_figure
from sweep.claims import Verdict
from sweep.store import Storage

__all__ = ["GRAPH_ID", "NOTE_BEGIN", "NOTE_END", "attach_all", "attach_to_study", "study_note"]

GRAPH_ID = "pareto"
METRIC_NAMES = ["TPS (tokens/s)", "PPL"]
# Markdown link definitions: markers the note keeps but its renderer does not show.
NOTE_BEGIN = "[//]: # (gemma-sweep begin)"
NOTE_END = "[//]: # (gemma-sweep end)"


def attach_to_study(storage: Storage, study_name: str) -> bool:
    """Save the chart and the note into the study; False when there was nothing to show yet."""
    data = load_study_data(storage, study_name)
    if not data.measured:
        return False
    study = optuna.load_study(study_name=study_name, storage=storage.optuna)
    save_plotly_graph_object(study, pareto_figure(data), graph_object_id=GRAPH_ID)
    if study.metric_names != METRIC_NAMES:  # the dashboard's axis names instead of "Objective 0/1"
        with warnings.catch_warnings():
            # experimental since Optuna 3.2 and pinned here; optuna-dashboard's own setter is deprecated for it
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(METRIC_NAMES)
    old_note = get_note(study)
    new_note = _merge_note(old_note, study_note(data))
    if new_note != old_note:
        save_note(study, new_note)
    return True


def attach_all(storage: Storage) -> list[str]:
    """Attach to every study with a measured trial; returns their names."""
    names = [s.study_name for s in optuna.get_all_study_summaries(storage.optuna, include_best_trial=False)]
    return [name for name in names if attach_to_study(storage, name)]


def study_note(data: StudyData) -> str:
    """Markdown: manifest, gate, profile, then the front as a table."""
    profile = data.stored.profile or {}
    sizes = ", ".join(f"{k} {profile[k]}" for k in ("num_prompts", "output_len", "ppl_records") if k in profile)
    gate = data.stored.gate or "?"
    resolved = "" if data.gate is None else f" = {data.gate:.4f}"
    lines = [
        f"## {data.study_name}: TPS vs PPL under the gate",
        "",
        f"- **manifest**: `{data.stored.manifest or '?'}`",
        f"- **gate**: {gate}{resolved}",
        f"- **profile**: {profile.get('name', '?')}" + (f" ({sizes})" if sizes else ""),
        f"- **trials**: {len(data.measured)} measured, {len(data.failed)} failed, {len(data.front)} on the feasible front",
        "",
    ]
    if data.front:
        knobs = list(data.knob_names)
        head = ["trial", *knobs, "TPS", "PPL", "acceptance", "identity diffs", "verification"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for t in sorted(data.front, key=_fastest_first):
            cells = [
                f"{t.number}{' (baseline)' if t.is_baseline else ''}",
                *(str(t.knobs.get(k, "")) for k in knobs),
                f"{t.tps:.2f}",
                f"{t.ppl:.4f}",
                "-" if t.metric("acceptance_rate") is None else f"{t.metric('acceptance_rate'):.1%}",
                "-" if t.identity_diff_prompts is None else str(t.identity_diff_prompts),
                _verdict_cell(t.verdict),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    else:
        lines.append("No feasible measured trial yet.")
    if data.claims is not None and data.claims.claims:
        lines += claims_lines(data.claims)
    lines += [
        "",
        f"Export: `python -m dashboards.export --study {data.study_name}`. "
        "_This section is rewritten by gemma-sweep; write your own notes below it._",
    ]
    return "\n".join(lines)


def _fastest_first(t: TrialRow) -> float:
    assert t.tps is not None  # a front point was measured
    return -t.tps


def _verdict_cell(verdict: Verdict | None) -> str:
    if verdict is None:
        return "not verified"
    gap = "" if verdict.tps_gap_pct is None else f" (TPS gap {verdict.tps_gap_pct:+.1f}%)"
    return f"{verdict.verdict}{gap}"


def _merge_note(old: str, block: str) -> str:
    ours = f"{NOTE_BEGIN}\n\n{block}\n\n{NOTE_END}"  # a definition cannot interrupt a paragraph
    if NOTE_BEGIN in old and NOTE_END in old:
        before, rest = old.split(NOTE_BEGIN, 1)
        after = rest.split(NOTE_END, 1)[1]
        return before + ours + after
    return ours + ("\n\n" + old if old.strip() else "\n\n")
