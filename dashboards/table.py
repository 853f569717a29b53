"""``trials.csv``: one row per trial, every metric and knob value, and its verification."""

from __future__ import annotations

from typing import Any

import pandas as pd

from dashboards.data import StudyData, TrialRow

__all__ = ["trials_frame"]


def trials_frame(data: StudyData) -> pd.DataFrame:
    # convert_dtypes: integer columns with gaps stay integers (Int64), not floats with NaN
    return pd.DataFrame([_row(t) for t in data.trials]).convert_dtypes()


def _row(t: TrialRow) -> dict[str, Any]:
    duration = (t.finished - t.started).total_seconds() if t.started and t.finished else None
    row: dict[str, Any] = {
        "number": t.number,
        "state": t.state,
        "is_baseline": t.is_baseline,
        "on_front": t.on_front,
        "feasible": t.feasible,
        **{f"knob.{k}": v for k, v in t.knobs.items()},
        "tps": t.tps,
        "ppl": t.ppl,
        "ppl_mean_record": t.ppl_mean_record,
        "acceptance_rate": t.acceptance_rate,
        "tps_cv": t.tps_cv,
        "identity_diff_prompts": t.identity_diff_prompts,
        "fail_reason": t.fail_reason,
        "node_id": t.node_id,
        "started": t.started,
        "finished": t.finished,
        "duration_s": duration,
    }
    v = t.verdict
    row.update({
        "verify_verdict": v.verdict if v else None,
        "verify_reason": v.reason if v else None,
        "verify_repeats": v.repeats if v else None,
        "verify_failed": v.failed if v else None,
        "verify_claimed_tps": v.claimed_tps if v else None,
        "verify_tps_median": v.tps_median if v else None,
        "verify_tps_min": v.tps_min if v else None,
        "verify_tps_max": v.tps_max if v else None,
        "verify_tps_cv": v.tps_cv if v else None,
        "verify_tps_gap_pct": v.tps_gap_pct if v else None,
        "verify_ppl_median": v.ppl_median if v else None,
        "verify_gate": v.gate if v else None,
        "verify_run_id": v.run_id if v else None,
    })  # fmt: skip
    row.update({f"metric.{k}": value for k, value in t.metrics.items()})
    return row
