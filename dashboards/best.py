"""What a user came for: the point to submit, VERIFIED or nothing (``best/``).

``best_point`` picks, among the feasible trials whose latest verification is VERIFIED, the one of the
highest claim (its promotion's, ``sweep.claims``; a trial never promoted, its sweep TPS). A point
found INVALID or UNDECIDED is never offered. ``write_best`` writes ``best/README.md`` always: the
front (ties marked), the promotion's claims and every verdict, and the commands that verify and
submit; and ``best/manifest.json`` only for a VERIFIED point (the study's manifest as the sweep stored
it, its knobs set to that trial's, and a ``gemma_sweep`` field saying where the values came from).
The stored manifest's secret-looking env values were redacted when the sweep stored it: fill them in
before submitting. ``python -m sweep.submit`` writes the folder in the organisers' own format.
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
from sweep.store import password_note, shown_url

__all__ = ["BestPoint", "best_point", "write_best"]


@dataclass(frozen=True)
class BestPoint:
    trial: TrialRow
    claim: float  # the TPS to report: its promotion's claim, or its sweep TPS


def _claim(t: TrialRow) -> float:
    return t.claim.claim if t.claim is not None else t.tps  # type: ignore[return-value]


def best_point(data: StudyData) -> BestPoint | None:
    """The feasible trial VERIFIED against the highest claim (``Verdict.verifies``); None when none is."""
    verified = [t for t in data.measured if t.full and t.feasible and t.verdict and t.verdict.verifies(_claim(t))]
    best = max(verified, key=lambda t: (_claim(t), -t.number), default=None)
    return None if best is None else BestPoint(best, _claim(best))


def _state(t: TrialRow) -> str:
    if t.verdict is None:
        return "not verified"
    v = t.verdict
    gap = "" if v.tps_gap_pct is None else f", held-out TPS {v.tps_gap_pct:+.1f}%"
    if v.gap_low_pct is not None:
        gap += f" ({v.gap_low_pct:+.1f}..{v.gap_high_pct:+.1f})"
    return f"{v.verdict}{gap}"


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
        "claim_tps": best.claim,
        "p_verified": t.claim.p_verified if t.claim else None,
        "ppl": t.ppl,
        "gate": t.record.gate if t.record else None,
        "verification": _state(t),
    }
    return out


def _readme(data: StudyData, best: BestPoint | None, *, storage: str, redacted: list[str]) -> str:
    knobs = list(data.knob_names)
    store = shown_url(storage)
    if best is not None:
        t = best.trial
        lines = [
            f"# {data.study_name}: the manifest to submit",
            "",
            f"`manifest.json` is the study's manifest with trial {t.number}'s knobs applied: claim {best.claim:.2f} "
            f"tok/s, PPL {t.ppl:.4f}" + (f" (gate {data.gate:.4f})" if data.gate is not None else "") + ".",
            "",
            f"Verification: **VERIFIED** ({_state(t)}).",
            "",
        ]
    else:
        lines = [
            f"# {data.study_name}: no point to submit yet",
            "",
            "No point of this study is VERIFIED, so no `manifest.json` is written: a point found INVALID or "
            "UNDECIDED is never offered. Verify the recommended point (or the best claims) with the command below.",
            "",
        ]
    if redacted:
        lines += [f"Fill in the env values stored as `{REDACTED}` before submitting: {', '.join(redacted)}.", ""]
    lines += [
        "## The feasible front (one boot per trial; ties: points the noise cannot tell apart)",
        "",
        "| trial | " + " | ".join(knobs) + " | TPS | PPL | tie | verification |",
        "|" + "---|" * (len(knobs) + 5),
    ]
    for row in sorted(data.front, key=lambda r: -r.tps):  # type: ignore[operator]
        cells = [
            str(row.number),
            *(str(row.knobs.get(k, "")) for k in knobs),
            f"{row.tps:.2f}",
            f"{row.ppl:.4f}",
            "" if row.tie is None else str(row.tie),
            _state(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if data.claims is not None and data.claims.claims:
        c = data.claims
        lines += [
            "",
            f"## Claims (promotion {c.run_id}: {len(c.boots)} of {c.planned} boots at profile {c.profile})",
            "",
            *([f"**Unfinished**: {c.unfinished()}; nothing is recommended until it is.", ""] if c.unfinished() else []),
            "| trial | boots | claim | private re-run 90% | P(VERIFIED) | PPL | verification |",
            "|---|---|---|---|---|---|---|",
        ]
        rows = {t.number: t for t in data.trials}
        for claim in c.claims:
            mark = " (recommended)" if c.recommended is claim else ""
            lines.append(
                f"| {claim.trial_number}{mark} | {claim.boots} | {claim.claim:.2f} | {claim.rerun_text()} "
                f"| {claim.odds_text()} | {claim.ppl:.4f} ± {claim.ppl_tol:.4f} | {_state(rows[claim.trial_number])} |"
            )
    target = (
        best.trial.number
        if best is not None
        else (data.claims.recommended.trial_number if data.claims and data.claims.recommended else None)
    )
    verify = f"--trials {target}" if target is not None else "--top 1"
    lines += [
        "",
        "Verify as the organisers' private re-run would (fresh boots, held-out prompts), then write the submission:",
        "",
        "```",
        f"python -m sweep.verify --study {data.study_name} --storage {store} {verify} --repeats 3",
        f"python -m sweep.submit --study {data.study_name} --storage {store}",
        "```",
        "",
    ]
    note = password_note(storage)
    return "\n".join([*lines, *([note, ""] if note else [])])


def write_best(data: StudyData, out_dir: Path, *, storage: str) -> list[Path]:
    """``best/README.md`` and, for a VERIFIED point, ``best/manifest.json``; nothing when the study
    has no feasible trial or stored no manifest (a study of an older version of this tool)."""
    stored = data.user_attrs.get("manifest_json")
    if not any(t.full and t.feasible for t in data.measured) or not isinstance(stored, dict):
        return []
    folder = out_dir / "best"
    folder.mkdir(parents=True, exist_ok=True)
    best = best_point(data)
    paths = [folder / "README.md"]
    stale = folder / "manifest.json"
    redacted: list[str] = []
    if best is not None:
        manifest = _manifest(stored, best, data.study_name)
        redacted = sorted(k for k, v in manifest.get("env", {}).items() if v == REDACTED)
        stale.write_text(json.dumps(manifest, indent=2) + "\n")
        paths.insert(0, stale)
    elif stale.exists():
        stale.unlink()  # an earlier export's point is no longer the one to submit
    paths[-1].write_text(_readme(data, best, storage=storage, redacted=redacted))
    return paths
