"""``trials.csv``: one row per trial, every figure of its record and its verification.

Columns follow the record, not a list kept here: the measurement's summary fields by name
(``tps``, ``ppl``, ...), every other scalar figure as ``metric.<name>``, so a new measurement
field reaches the CSV by itself.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pandas as pd

from dashboards.data import StudyData, TrialRow
from engine.measurement import Measurement

__all__ = ["trials_frame"]

_SUMMARY = [f.name for f in fields(Measurement) if f.metadata.get("summary")]


def trials_frame(data: StudyData) -> pd.DataFrame:
    # convert_dtypes: integer columns with gaps stay integers (Int64), not floats with NaN
    return pd.DataFrame([_row(t) for t in data.trials]).convert_dtypes()


def _row(t: TrialRow) -> dict[str, Any]:
    r = t.record
    duration = (t.finished - t.started).total_seconds() if t.started and t.finished else None
    scalars = r.measurement.scalars() if r is not None and r.measurement is not None else {}
    row: dict[str, Any] = {
        "number": t.number,
        "state": t.state,
        "stopped": t.stopped,  # multi-fidelity: "gate" (TPS a probe), "front" (PRUNED), empty: measured to the end
        "is_baseline": t.is_baseline,
        "on_front": t.on_front,
        "feasible": t.feasible,
        **{f"knob.{k}": v for k, v in t.knobs.items()},
        **{name: scalars.get(name) for name in _SUMMARY},
        "identity_diff_prompts": t.identity_diff_prompts,
        "gate": r.gate if r else None,
        "fail_kind": r.fail_kind if r else None,
        "fail_reason": t.fail_reason if t.state == "FAIL" else None,
        "stop_reason": t.fail_reason if t.stopped else None,
        "node_id": r.node.get("node_id") if r else None,
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
    row.update({f"metric.{k}": value for k, value in scalars.items() if k not in _SUMMARY})
    return row
