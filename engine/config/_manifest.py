"""Serving-stack manifests: the challenge's ``manifest.json`` format, validated.

Fields as the challenge defines them: ``name``, ``model_id``, ``served_model_name``, ``port``,
``serve`` (argv), ``env`` (string values only) and ``dependencies``. Unknown fields are kept,
not refused, so a participant's manifest loads as it is. This project reads three optional fields
more: ``cwd``, the folder ``serve`` runs in (without it, the manifest's own folder, because the
challenge runs ``serve`` from the submission folder that holds ``manifest.json``),
``prefix_caching`` (default true): false says the stack never serves a request from another's KV
cache, which lets multi-fidelity run the PPL pass before the rest of the timed run
(``sweep.search``), and ``stack``: which stack's own knob limits in the registry apply
(``[<knob>.stacks.<stack>]`` in ``studies/knobs.toml``; ``reference`` for the reference server;
without it, or for a stack the registry gives no limits, each knob's full range).

Placeholders in ``serve`` items, ``env`` values and ``cwd``, filled by ``engine.launch`` when a
trial starts (anything else in braces, such as JSON, is left alone):

    {port}                  a free TCP port for this trial (see engine.launch for the port rule)
    {host}                  the address the stack must bind (127.0.0.1 unless told otherwise)
    {python}                the Python interpreter of the process that starts the trial
    {repo}                  this repository's root folder
    {reference_checkpoint}  the reference model prepared by engine.reference.prepare (only
                            resolved when a manifest uses it, since preparing takes a while)
    {workdir}               this trial's own folder (its log lives there), for a stack's
                            caches and temporary files; a dry run shows it unfilled
    {tmpdir}                a short private folder under the system's temp folder, created
                            for this trial and removed when it ends: the place for UNIX
                            sockets, whose paths may not exceed 107 bytes ({workdir} may be
                            deeper: vLLM puts its ZMQ sockets in TMPDIR); unfilled in a dry run
    {cache}                 a folder beside the trial's own, shared by the trials of one study
                            (and of one engine.bench folder): where a stack keeps caches it can
                            reuse from trial to trial, such as vLLM's compile cache
                            (VLLM_CACHE_ROOT); unfilled in a dry run

A bare name (``reference``) means ``studies/manifests/<name>.json``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from engine.files import load_json
from errors import ManifestError
from studies import STUDIES_DIR

__all__ = ["MANIFESTS_DIR", "NAME_RULE", "PLACEHOLDERS", "Manifest", "is_plain_name", "load_manifest", "parse_manifest"]

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout, or the folder an install put the packages in
MANIFESTS_DIR = STUDIES_DIR / "manifests"
PLACEHOLDERS = ("port", "host", "python", "repo", "reference_checkpoint", "workdir", "tmpdir", "cache")
# Study and manifest names become folder names (runs/<study>/, runs/bench/<manifest>-...): one
# rule, so that no name writes outside its folder.
NAME_RULE = "letters, digits, '.', '_' and '-' only, starting with a letter or digit: no path separator, no '..'"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def is_plain_name(name: str) -> bool:
    return bool(_PLAIN_NAME.fullmatch(name)) and ".." not in name


# Only lower-case words in braces are placeholders; JSON objects in env values never match.
_PLACEHOLDER_RE = re.compile(r"\{([a-z_]+)\}")


class Manifest(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1)
    model_id: str = Field(min_length=1)
    served_model_name: str = Field(min_length=1)
    port: int = Field(default=8000, ge=1, le=65535)
    serve: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    dependencies: list[str] = Field(default_factory=list)
    cwd: str | None = None
    # Whether the stack may serve a request's prompt prefix from an earlier request's KV (vLLM's
    # prefix caching, on by default there): then a request made before a timed one may speed it up.
    prefix_caching: bool = True
    # The stack whose knob limits apply (engine.config: a study may not ask a stack for more than it accepts).
    stack: str | None = Field(default=None, min_length=1)
    # Absolute paths the stack makes itself at boot (a cache it fills, a socket): the only ones outside the system's
    # that a submission folder may name (sweep.submission's write-time rule)
    creates: list[str] = Field(default_factory=list)

    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        """The file this manifest was loaded from, if any."""
        return self._source

    @property
    def label(self) -> str:
        """How error messages name this manifest: its file, else its name."""
        return str(self._source) if self._source else f"manifest {self.name!r}"

    def uses_placeholder(self, name: str) -> bool:
        token = "{" + name + "}"
        return any(token in text for text in self.texts())

    def texts(self) -> list[str]:
        """Every string that placeholders may appear in."""
        return [*self.serve, *self.env.values(), *([self.cwd] if self.cwd else [])]

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    @model_validator(mode="after")
    def _passable_to_a_process(self) -> Manifest:
        # What the OS refuses to start a process with: caught here, not as a crash at boot.
        for key in self.env:
            if not key or "=" in key:
                raise ValueError(f"env name {key!r} is not a variable name (empty, or holds '=')")
        for text in [*self.env, *self.texts()]:
            if "\x00" in text:
                raise ValueError(f"{text!r} holds a NUL character, which no argument or env value can carry")
            try:
                os.fsencode(text)
            except UnicodeEncodeError:
                raise ValueError(f"{text!r} holds a lone surrogate, which cannot be encoded for the OS") from None
        return self

    @model_validator(mode="after")
    def _absolute_creates(self) -> Manifest:
        for path in self.creates:
            if not path.startswith("/") or path.rstrip("/") == "":
                raise ValueError(f"creates: {path!r} is not an absolute path below / (a path the stack makes at boot)")
        return self

    @model_validator(mode="after")
    def _plain_name(self) -> Manifest:
        if not is_plain_name(self.name):
            raise ValueError(f"name {self.name!r} is not a plain name ({NAME_RULE}): it names folders the sweep writes")
        return self

    @model_validator(mode="after")
    def _known_placeholders(self) -> Manifest:
        for text in self.texts():
            for word in _PLACEHOLDER_RE.findall(text):
                if word not in PLACEHOLDERS:
                    raise ValueError(
                        f"unknown placeholder {{{word}}} in {text!r}; valid: "
                        + ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                    )
        return self


def parse_manifest(data: Any, *, source: Path | str | None = None) -> Manifest:
    """Validate a manifest given as a dict (the parsed ``manifest.json``)."""
    where = str(source) if source else "manifest"
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: a manifest must be a JSON object, got {type(data).__name__}")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"field {'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise ManifestError(f"{where}: {problems}") from None
    if source is not None:
        manifest._source = Path(source)
    return manifest


def _resolve(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    path = Path(text).expanduser()
    is_path = path.suffix == ".json" or len(path.parts) > 1 or path.exists()
    if not is_path:
        path = MANIFESTS_DIR / f"{text}.json"
    if not path.is_file():
        known = sorted(p.stem for p in MANIFESTS_DIR.glob("*.json"))
        raise ManifestError(f"manifest {text!r} not found (no file {path}); known names: {known}")
    return path


def load_manifest(name_or_path: str | Path) -> Manifest:
    """Load and validate a manifest file, or ``studies/manifests/<name>.json`` for a bare name."""
    path = _resolve(name_or_path)
    data = load_json(path, ManifestError)
    return parse_manifest(data, source=path)
