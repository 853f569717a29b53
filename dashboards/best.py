"""What a user came for: the point to submit, VERIFIED or nothing (``best/README.md``).

``best_point`` is the submission's own choice (``sweep.submission.choose``): among the feasible trials
measured to the end, the one VERIFIED against the highest claim; a point found INVALID or UNDECIDED is never
offered. ``write_best`` writes ``best/README.md``: that point's claim as its submission folder's README shows
it (``sweep.submission.ClaimFile``), or that there is none yet; the front (ties marked), the promotion's claims
and every verdict; and the commands that verify it and write its folder. The folder itself, in the organisers'
format, is ``python -m sweep.submit``'s to write: nothing here writes a manifest.
"""

from __future__ import annotations

from pathlib import Path

from dashboards.claims import claims_lines
from dashboards.data import StudyData, TrialRow
from sweep.store import password_note, shown_url
from sweep.submission import ClaimFile, NothingToSubmit, choose
from sweep.submission._choose import Choice

__all__ = ["best_point", "write_best"]


def best_point(data: StudyData) -> Choice | None:
    """The submission's choice of a VERIFIED point (``sweep.submission.choose``); None when none is."""
    records = [t.record for t in data.trials if t.record is not None]
    verdicts = {t.number: t.verdict for t in data.trials if t.verdict is not None}
    claims = {t.number: t.claim for t in data.trials if t.claim is not None}
    try:
        return choose(records, verdicts=verdicts, claims=claims)
    except NothingToSubmit:
        return None


def _state(t: TrialRow) -> str:
    if t.verdict is None:
        return "not verified"
    v = t.verdict
    gap = "" if v.tps_gap_pct is None else f", held-out TPS {v.tps_gap_pct:+.1f}%"
    if v.gap_low_pct is not None:
        gap += f" ({v.gap_low_pct:+.1f}..{v.gap_high_pct:+.1f})"
    return f"{v.verdict}{gap}"


def _readme(data: StudyData, best: Choice | None, *, storage: str) -> str:
    knobs = list(data.knob_names)
    store = shown_url(storage)
    if best is not None:
        claim = ClaimFile.of(best, study=data.study_name, view=data.claims)
        lines = [
            f"# {data.study_name}: the point to submit",
            "",
            f"Trial {claim.trial} is VERIFIED against its claim: `python -m sweep.submit` (below) writes its folder in "
            "the organisers' format, whose README and `claim.json` say what this table says.",
            "",
            *claim.rows(),
            "",
        ]
    else:
        lines = [
            f"# {data.study_name}: no point to submit yet",
            "",
            "No point of this study is VERIFIED: a point found INVALID or UNDECIDED is never offered. Verify the "
            "recommended point (or the best claims) with the command below.",
            "",
        ]
    lines += [
        "## The feasible front (one boot per trial; ties: points the noise cannot tell apart)",
        "",
        "| trial | " + " | ".join(knobs) + " | TPS | PPL | tie | verification |",
        "|" + "---|" * (len(knobs) + 5),
    ]
    for row in sorted(data.front, key=lambda r: -(r.tps or 0.0)):
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
        rows = {t.number: t for t in data.trials}
        lines += claims_lines(data.claims, state=lambda n: _state(rows[n]))
    target = (
        best.record.trial_number
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
    """``best/README.md``; nothing when the study has no feasible trial measured to the end."""
    if not any(t.full and t.feasible for t in data.measured):
        return []
    folder = out_dir / "best"
    folder.mkdir(parents=True, exist_ok=True)
    # an export of an earlier version wrote a manifest here: the folder to submit is sweep.submit's now
    (folder / "manifest.json").unlink(missing_ok=True)
    readme = folder / "README.md"
    readme.write_text(_readme(data, best_point(data), storage=storage))
    return [readme]
