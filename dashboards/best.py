"""What a user came for: the manifest to submit, with the best point's knobs applied (``best/``).

``best_point`` picks the fastest feasible trial whose latest verification is VERIFIED; when none
is, the fastest feasible trial, labelled unverified. ``write_best`` writes ``best/manifest.json``
(the study's manifest as the sweep stored it, its knobs set to that trial's, and a
``gemma_sweep`` field saying where the values came from and whether they were verified) and
``best/README.md`` (the front as a table, and the command that verifies it). The stored manifest's
secret-looking env values were redacted when the sweep stored it: fill them in before submitting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dashboards.data import StudyData, TrialRow
from engine.knobs import apply_knobs, consumed_knobs, parse_knobs
from engine.manifest import parse_manifest
from engine.secrets import REDACTED

__all__ = ["BestPoint", "best_point", "write_best"]


@dataclass(frozen=True)
class BestPoint:
    trial: TrialRow
    verified: bool


def best_point(data: StudyData) -> BestPoint | None:
    feasible = sorted((t for t in data.measured if t.full and t.feasible), key=lambda t: (-t.tps, t.number))
    verified = [t for t in feasible if t.verdict is not None and t.verdict.verdict == "VERIFIED"]
    if verified:
        return BestPoint(verified[0], True)
    return BestPoint(feasible[0], False) if feasible else None


def _state(t: TrialRow) -> str:
    if t.verdict is None:
        return "not verified"
    gap = "" if t.verdict.tps_gap_pct is None else f", re-run TPS {t.verdict.tps_gap_pct:+.1f}%"
    return f"{t.verdict.verdict}{gap}"


def _manifest(stored: dict[str, Any], best: BestPoint, study: str) -> dict[str, Any]:
    manifest = parse_manifest(stored)
    consumed = consumed_knobs(manifest)
    knobs = parse_knobs(manifest, {k: v for k, v in best.trial.knobs.items() if k in consumed})
    out = apply_knobs(manifest, knobs).to_json_dict()
    t = best.trial
    out["gemma_sweep"] = {
        "study": study,
        "trial": t.number,
        "knobs": dict(knobs),
        "tps": t.tps,
        "ppl": t.ppl,
        "gate": t.record.gate if t.record else None,
        "verification": _state(t) if best.verified else f"UNVERIFIED: {_state(t)}; run the command in README.md",
    }
    return out


def _readme(data: StudyData, best: BestPoint, *, storage: str, redacted: list[str]) -> str:
    t = best.trial
    knobs = list(data.knob_names)
    lines = [
        f"# {data.study_name}: the manifest to submit",
        "",
        f"`manifest.json` is the study's manifest with trial {t.number}'s knobs applied: "
        f"TPS {t.tps:.2f}, PPL {t.ppl:.4f}" + (f" (gate {data.gate:.4f})" if data.gate is not None else "") + ".",
        "",
        f"Verification: **{'VERIFIED' if best.verified else 'UNVERIFIED'}** ({_state(t)}).",
        "",
    ]
    if redacted:
        lines += [f"Fill in the env values stored as `{REDACTED}` before submitting: {', '.join(redacted)}.", ""]
    lines += ["## The feasible front", "", "| trial | " + " | ".join(knobs) + " | TPS | PPL | verification |",
              "|" + "---|" * (len(knobs) + 4)]  # fmt: skip
    for row in sorted(data.front, key=lambda r: -r.tps):
        cells = [str(row.number), *(str(row.knobs.get(k, "")) for k in knobs), f"{row.tps:.2f}", f"{row.ppl:.4f}", _state(row)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Verify it as the organisers' private re-run would (fresh boots, held-out prompts):",
        "",
        "```",
        f"python -m sweep.verify --study {data.study_name} --storage {storage} --trials {t.number} --repeats 3",
        "```",
        "",
    ]
    return "\n".join(lines)


def write_best(data: StudyData, out_dir: Path, *, storage: str) -> list[Path]:
    """``best/manifest.json`` and ``best/README.md``; nothing when the study has no feasible trial or
    stored no manifest (a study of an older version of this tool)."""
    best, stored = best_point(data), data.user_attrs.get("manifest_json")
    if best is None or not isinstance(stored, dict):
        return []
    folder = out_dir / "best"
    folder.mkdir(parents=True, exist_ok=True)
    manifest = _manifest(stored, best, data.study_name)
    redacted = sorted(k for k, v in manifest.get("env", {}).items() if v == REDACTED)
    paths = [folder / "manifest.json", folder / "README.md"]
    paths[0].write_text(json.dumps(manifest, indent=2) + "\n")
    paths[1].write_text(_readme(data, best, storage=storage, redacted=redacted))
    return paths
