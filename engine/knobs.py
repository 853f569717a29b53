"""Knobs as data: one registry maps each knob onto the places a manifest sets it.

A target is one of four kinds:

    env        an env var holding the value            CENTROID_TOP_K=49
    env_json   a JSON path inside an env var's value   HF_OVERRIDES={"text_config": {"sliding_window": 188}}
    flag       a CLI flag of ``serve``                 --max-model-len 4096
    flag_json  a JSON path inside a CLI flag's value   --speculative-config '{"num_speculative_tokens": 3}'

A manifest *consumes* a knob when its env or argv already carries one of the knob's targets.
Applying a knob writes every target the manifest carries, and also creates the env targets
marked ``create`` when the manifest sets the knob through its env (``HF_OVERRIDES`` is what vLLM
applies, so a manifest that only sets the ``SLIDING_WINDOW`` label still gets the override). A JSON target lists alternative paths: the
first one present in the manifest's JSON is patched, else the first one is created (Gemma-4
nests the window under ``text_config``, a text-only Gemma-3 config has it at the top level).

The knob's *baseline* is the value its first carried target holds, so list the target that
takes effect first. Adding a knob is one ``Knob(...)`` entry in ``_REGISTRY``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from engine.errors import KnobError, ManifestError
from engine.manifest import Manifest

__all__ = [
    "KNOBS",
    "Knob",
    "Target",
    "apply_knobs",
    "baseline_knobs",
    "consumed_knobs",
    "parse_assignments",
    "validate_knob_values",
]

JsonPath = tuple[str, ...]


@dataclass(frozen=True)
class Target:
    kind: Literal["env", "env_json", "flag", "flag_json"]
    name: str  # env var, or CLI flag spelled with dashes
    paths: tuple[JsonPath, ...] = ()  # JSON kinds only
    create: bool = False  # env kinds only: set it even when the manifest lacks it

    def describe(self) -> str:
        if self.kind in ("env", "flag"):
            return self.name
        return " or ".join(f"{self.name}.{'.'.join(path)}" for path in self.paths)


@dataclass(frozen=True)
class Knob:
    name: str
    minimum: int
    maximum: int
    targets: tuple[Target, ...]
    doc: str  # what it moves, and why its range is what it is

    @property
    def range_text(self) -> str:
        return f"{self.minimum}..{self.maximum}"


_WINDOW_PATHS: tuple[JsonPath, ...] = (("text_config", "sliding_window"), ("sliding_window",))
_SPEC_PATHS: tuple[JsonPath, ...] = (("num_speculative_tokens",),)

_REGISTRY = (
    Knob(
        name="sliding_window",
        minimum=1,
        maximum=131072,
        targets=(
            Target("env_json", "HF_OVERRIDES", _WINDOW_PATHS, create=True),
            Target("flag_json", "--hf-overrides", _WINDOW_PATHS),
            Target("env", "SLIDING_WINDOW"),
        ),
        doc="Window of the sliding-attention layers; moves PPL and decode speed. A window needs "
        "at least one token; 131072 is the Gemma-4 family's longest context, so a larger "
        "window cannot differ from it.",
    ),
    Knob(
        name="centroid_top_k",
        minimum=1,
        maximum=2048,
        targets=(Target("env", "CENTROID_TOP_K"),),
        doc="Vocabulary clusters the drafter's head keeps; moves speed only. The head has "
        "2,048 clusters, so K above that cannot keep more.",
    ),
    Knob(
        name="num_speculative_tokens",
        minimum=1,
        maximum=64,
        targets=(
            Target("env_json", "SPECULATIVE_CONFIG", _SPEC_PATHS),
            Target("flag_json", "--speculative-config", _SPEC_PATHS),
        ),
        doc="Tokens the drafter proposes per step; moves speed only. Zero would switch "
        "speculation off (a different manifest, not a value); 64 is the most query rows the "
        "challenge stacks' verify kernel scores at once (SPLITKV_VERIFY_MAX_Q=64).",
    ),
)
KNOBS: dict[str, Knob] = {knob.name: knob for knob in _REGISTRY}


# --- reading and writing one target -------------------------------------------------------


def _flag_index(argv: list[str], flag: str) -> tuple[int, bool] | None:
    """Where ``flag`` sits in argv, and whether its value is inline (``--flag=value``)."""
    spellings = {flag, flag.replace("-", "_").replace("__", "--", 1)}
    for i, item in enumerate(argv):
        name, eq, _ = item.partition("=")
        if name in spellings:
            if eq:
                return i, True
            if i + 1 < len(argv):
                return i, False
    return None


def _raw(argv: list[str], env: dict[str, str], target: Target) -> str | None:
    if target.kind.startswith("env"):
        return env.get(target.name)
    found = _flag_index(argv, target.name)
    if found is None:
        return None
    i, inline = found
    return argv[i].partition("=")[2] if inline else argv[i + 1]


def _json(manifest: Manifest, target: Target, raw: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, or a number too long for int()
        raise ManifestError(f"{manifest.label}: {target.name} is not valid JSON ({exc}): {raw[:200]!r}") from None
    except RecursionError:
        raise ManifestError(f"{manifest.label}: {target.name} is not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{manifest.label}: {target.name} must hold a JSON object, got {raw!r}")
    return data


def _get_path(data: dict[str, Any], path: JsonPath) -> tuple[bool, Any]:
    node: Any = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


def _set_path(data: dict[str, Any], path: JsonPath, value: Any, *, where: str) -> None:
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ManifestError(f"{where}: {key!r} must be a JSON object to hold {'.'.join(path)}")
    node[path[-1]] = value


def _dump_like(original: str | None, data: dict[str, Any]) -> str:
    # Keep the author's spacing, so a patched manifest differs from its source only in values.
    compact = original is not None and ": " not in original and ", " not in original
    return json.dumps(data, separators=(",", ":")) if compact else json.dumps(data)


def _read(manifest: Manifest, target: Target) -> tuple[bool, Any]:
    raw = _raw(manifest.serve, manifest.env, target)
    if raw is None:
        return False, None
    if target.kind in ("env", "flag"):
        return True, raw
    data = _json(manifest, target, raw)
    for path in target.paths:
        found, value = _get_path(data, path)
        if found:
            return True, value
    return False, None


def _write(manifest: Manifest, argv: list[str], env: dict[str, str], target: Target, value: int) -> None:
    raw = _raw(argv, env, target)
    if target.kind in ("env", "flag"):
        new = str(value)
    else:
        data = _json(manifest, target, raw) if raw is not None else {}
        path = next((p for p in target.paths if _get_path(data, p)[0]), target.paths[0])
        _set_path(data, path, value, where=f"{manifest.label}: {target.name}")
        new = _dump_like(raw, data)
    if target.kind.startswith("env"):
        env[target.name] = new
        return
    i, inline = _flag_index(argv, target.name)  # type: ignore[misc]  # carried, so present
    if inline:
        argv[i] = f"{argv[i].partition('=')[0]}={new}"
    else:
        argv[i + 1] = new


# --- the public functions ----------------------------------------------------------------


def consumed_knobs(manifest: Manifest, *, registry: Mapping[str, Knob] = KNOBS) -> list[str]:
    """Names of the knobs whose targets the manifest carries, in registry order."""
    return [name for name, knob in registry.items() if any(_read(manifest, t)[0] for t in knob.targets)]


def _check_value(knob: Knob, value: Any, *, where: str) -> int:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        if len(value.strip()) > 30:  # int() refuses 4,300+ digits; this long is out of every range
            raise KnobError(
                f"{where}knob {knob.name!r}: value {value.strip()[:12]}... ({len(value.strip())} characters) "
                f"is out of range {knob.range_text}"
            )
        number = int(value)
    if number is None:
        raise KnobError(
            f"{where}knob {knob.name!r}: value {value!r} is not an integer; valid range {knob.range_text}"
        )
    if not knob.minimum <= number <= knob.maximum:
        raise KnobError(
            f"{where}knob {knob.name!r}: value {number} is out of range {knob.range_text} ({knob.doc})"
        )
    return number


def validate_knob_values(
    manifest: Manifest, values: Mapping[str, Any], *, registry: Mapping[str, Knob] = KNOBS
) -> dict[str, int]:
    """Check names, consumption and ranges; return the values as integers. Raises KnobError."""
    consumed = consumed_knobs(manifest, registry=registry)
    checked = {}
    for name, value in values.items():
        if name not in registry:
            raise KnobError(f"unknown knob {name!r}; valid knobs: {sorted(registry)}")
        if name not in consumed:
            targets = ", ".join(t.describe() for t in registry[name].targets)
            raise KnobError(
                f"{manifest.label} does not consume knob {name!r}: it sets none of {targets} "
                f"(knobs it consumes: {consumed})"
            )
        checked[name] = _check_value(registry[name], value, where="")
    return checked


def baseline_knobs(manifest: Manifest, *, registry: Mapping[str, Knob] = KNOBS) -> dict[str, int]:
    """The manifest's own value of each knob it consumes: a sweep's trial 0."""
    values = {}
    for name in consumed_knobs(manifest, registry=registry):
        knob = registry[name]
        value = next(v for found, v in (_read(manifest, t) for t in knob.targets) if found)
        try:
            values[name] = _check_value(knob, value, where=f"{manifest.label}: ")
        except KnobError as exc:
            raise ManifestError(str(exc)) from None
    return values


def apply_knobs(
    manifest: Manifest, values: Mapping[str, Any], *, registry: Mapping[str, Knob] = KNOBS
) -> Manifest:
    """A copy of the manifest with each knob's targets set to the given value."""
    checked = validate_knob_values(manifest, values, registry=registry)
    argv, env = list(manifest.serve), dict(manifest.env)
    for name, value in checked.items():
        targets = registry[name].targets
        carried = [_read(manifest, t)[0] for t in targets]
        # Create a missing env target only for a stack configured through env: a plain
        # `vllm serve --hf-overrides ...` has no use for an HF_OVERRIDES variable.
        via_env = any(c for c, t in zip(carried, targets) if t.kind.startswith("env"))
        for target, is_carried in zip(targets, carried):
            if is_carried or (target.create and via_env and target.kind.startswith("env")):
                _write(manifest, argv, env, target, value)
    return manifest.model_copy(update={"serve": argv, "env": env})


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """``["sliding_window=32", ...]`` from a command line into a dict (values still text)."""
    values = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip() or not value.strip():
            raise KnobError(f"--set {item!r}: expected knob=value, e.g. sliding_window=188")
        values[name.strip()] = value.strip()
    return values
