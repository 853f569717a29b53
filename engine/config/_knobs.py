"""Knobs as data: the registry (``studies/knobs.toml``) maps each knob onto the places a manifest
sets it, and ``KnobValues`` carries values checked once against one manifest.

A target is one of five kinds:

    env        an env var holding the value            CENTROID_TOP_K=49
    env_json   a JSON path inside an env var's value   HF_OVERRIDES={"text_config": {"sliding_window": 188}}
    flag       a CLI flag of ``serve``                 --kv-cache-dtype fp8
    flag_json  a JSON path inside a CLI flag's value   --speculative-config '{"num_speculative_tokens": 3}'
    switch     a boolean CLI flag                      --async-scheduling / --no-async-scheduling

A manifest *consumes* a knob when its env or argv already carries one of the knob's targets, so a
manifest declares its knobs by carrying them (a switch by either spelling). Applying a knob writes
every target the manifest carries, and also creates the env targets marked ``create`` when the
manifest sets the knob through its env (``HF_OVERRIDES`` is what vLLM applies, so a manifest that
only sets the ``SLIDING_WINDOW`` label still gets the override). A JSON target lists alternative
paths: the first one present in the manifest's JSON is patched, else the first one is created
(Gemma-4 nests the window under ``text_config``, a text-only Gemma-3 config has it at the top).

Values are ``int`` (a range), ``str`` (one of a list of choices, or any text matching the knob's
``pattern`` where it has one: ``cpu_affinity`` takes ``none``, ``numa`` or a CPU list) or ``bool``. Raw values (a study
file, ``--set``, a stored row) become ``KnobValues`` in ``parse_knobs``, the one place that checks
them; ``apply_knobs`` and everything after it takes ``KnobValues`` and checks nothing again.

A knob's range is what any stack may be given; a stack that accepts less has a limit of its own in
the registry (``[<knob>.stacks.<stack>]``), which applies to the manifests that name that
``stack``: the registry is the one source of every limit, and a stack (the reference server) reads
its own from it rather than keeping a copy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from engine.config._manifest import Manifest
from engine.files import load_toml
from errors import KnobError, ManifestError
from studies import STUDIES_DIR

__all__ = [
    "KNOBS",
    "KNOBS_FILE",
    "Knob",
    "KnobValue",
    "KnobValues",
    "StackLimit",
    "Target",
    "apply_knobs",
    "baseline_knobs",
    "consumed_knobs",
    "load_registry",
    "parse_assignments",
    "parse_knobs",
]

KNOBS_FILE = STUDIES_DIR / "knobs.toml"
KnobValue = int | str | bool
JsonPath = tuple[str, ...]
TargetKind = Literal["env", "env_json", "flag", "flag_json", "switch"]
_TARGET_KINDS: tuple[TargetKind, ...] = ("env", "env_json", "flag", "flag_json", "switch")
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    name: str  # env var, or CLI flag spelled with dashes
    paths: tuple[JsonPath, ...] = ()  # JSON kinds only
    create: bool = False  # env kinds only: set it even when the manifest lacks it

    def describe(self) -> str:
        if self.kind == "switch":
            return f"{self.name} / --no-{self.name[2:]}"
        if self.kind in ("env", "flag"):
            return self.name
        return " or ".join(f"{self.name}.{'.'.join(path)}" for path in self.paths)


@dataclass(frozen=True)
class StackLimit:
    """The narrower range of an int knob that one stack accepts: ``[<knob>.stacks.<stack>]``."""

    stack: str  # as a manifest's ``stack`` field names it
    minimum: int
    maximum: int
    doc: str  # why the stack accepts no more
    source: str  # the registry table that says so, for messages


@dataclass(frozen=True)
class Knob:
    name: str
    type: Literal["int", "choice", "bool"]
    targets: tuple[Target, ...]
    doc: str  # what it moves, and why its range is what it is
    minimum: int | None = None  # int knobs
    maximum: int | None = None
    choices: tuple[str, ...] = ()  # choice knobs
    pattern: str | None = None  # choice knobs: a regular expression other valid values match in full
    lossless: bool = False  # moves speed only: greedy output must not change
    stack_limits: tuple[StackLimit, ...] = ()  # int knobs: stacks that accept less than minimum..maximum
    limited_by: StackLimit | None = None  # on the copy ``for_stack`` returns: the limit it applies

    def for_stack(self, stack: str | None) -> Knob:
        """This knob as ``stack`` (a manifest's ``stack`` field) accepts it: the registry's range, or
        the stack's own where the registry gives it a narrower one."""
        limit = next((s for s in self.stack_limits if s.stack == stack), None)
        if limit is None:
            return self
        return replace(self, minimum=limit.minimum, maximum=limit.maximum, limited_by=limit)

    @property
    def bounds(self) -> tuple[int, int]:
        """An int knob's range, ``(minimum, maximum)``."""
        if self.minimum is None or self.maximum is None:
            raise ValueError(f"knob {self.name!r} is of type {self.type}: it has choices, not a range")
        return self.minimum, self.maximum

    @property
    def range_text(self) -> str:
        if self.type == "int":
            limit = self.limited_by
            stack = f", the limit of stack {limit.stack!r} ({limit.source})" if limit else ""
            return f"{self.minimum}..{self.maximum}{stack}"
        if self.type == "bool":
            return "true or false"
        listed = f"one of {list(self.choices)}"
        return f"{listed} or text matching {self.pattern}" if self.pattern else listed

    def parse(self, value: Any, *, where: str = "") -> KnobValue:
        """One raw value (TOML, JSON, or text from a command line or a manifest) as this knob's type."""
        head = f"{where}knob {self.name!r}"
        if self.type == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise KnobError(f"{head}: value {value!r} is not a boolean; valid: {self.range_text}")
        if self.type == "choice":
            if isinstance(value, str) and (
                value.strip() in self.choices or (self.pattern and re.fullmatch(self.pattern, value.strip()))
            ):
                return value.strip()
            raise KnobError(f"{head}: value {value!r} is not {self.range_text} ({self.doc})")
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            if len(value.strip()) > 30:  # int() refuses 4,300+ digits; this long is out of every range
                raise KnobError(
                    f"{head}: value {value.strip()[:12]}... ({len(value.strip())} characters) "
                    f"is out of range {self.range_text}"
                )
            number = int(value)
        if number is None:
            raise KnobError(f"{head}: value {value!r} is not an integer; valid range {self.range_text}")
        low, high = self.bounds
        if not low <= number <= high:
            why = self.limited_by.doc if self.limited_by else self.doc
            raise KnobError(f"{head}: value {number} is out of range {self.range_text} ({why})")
        return number


class KnobValues(Mapping[str, KnobValue]):
    """Knob values checked against one manifest: each knob known, consumed by it, and valid.

    Made by ``parse_knobs`` (or ``baseline_knobs``); immutable; ``a | b`` is ``a`` with ``b``'s
    values laid over it. Compares equal to a dict of the same values.
    """

    def __init__(self, values: Mapping[str, KnobValue], *, manifest: str) -> None:
        self._values = dict(values)
        self.manifest = manifest  # the manifest's label the values were checked against

    def __getitem__(self, name: str) -> KnobValue:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __or__(self, other: Mapping[str, KnobValue]) -> KnobValues:
        if not isinstance(other, KnobValues) or other.manifest != self.manifest:
            return NotImplemented
        return KnobValues({**self._values, **other._values}, manifest=self.manifest)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return f"KnobValues({self._values!r})"

    def text(self, keys: Iterable[str] | None = None) -> str:
        """``sliding_window=188 centroid_top_k=49``: how consoles and dry runs show them."""
        return " ".join(f"{k}={_show(self._values[k])}" for k in (keys or self._values) if k in self._values)


def _show(value: KnobValue) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# --- the registry file -----------------------------------------------------------------------


def _target(raw: Any, *, where: str, knob_type: str) -> Target:
    if not isinstance(raw, dict):
        raise KnobError(f"{where}: a target must be a table, got {raw!r}")
    kinds = [k for k in _TARGET_KINDS if k in raw]
    extra = sorted(set(raw) - {*_TARGET_KINDS, "paths", "create"})
    if len(kinds) != 1 or extra or not isinstance(raw[kinds[0]], str) or not raw[kinds[0]]:
        raise KnobError(
            f"{where}: a target needs exactly one of {list(_TARGET_KINDS)} naming it "
            f"(and optionally 'paths', 'create'); got {raw!r}"
        )
    kind = kinds[0]
    json_kind = kind.endswith("_json")
    paths = raw.get("paths", [])
    if json_kind != bool(paths) or not all(isinstance(p, str) and p for p in paths):
        raise KnobError(f"{where}: 'paths' (dotted JSON paths) belong to env_json and flag_json targets only: {raw!r}")
    if raw.get("create") and not kind.startswith("env"):
        raise KnobError(f"{where}: 'create' applies to env targets only: {raw!r}")
    if kind == "switch" and knob_type != "bool":
        raise KnobError(f"{where}: a switch target needs a knob of type 'bool'")
    return Target(kind, raw[kind], tuple(tuple(p.split(".")) for p in paths), bool(raw.get("create", False)))


def _is_regex(text: Any) -> bool:
    try:
        return isinstance(text, str) and bool(text) and re.compile(text) is not None
    except re.error:
        return False


def _stack_limits(raw: Any, *, path: Path, knob: str, low: int, high: int) -> tuple[StackLimit, ...]:
    """The ``[<knob>.stacks.<stack>]`` tables: each narrows the knob's range for one stack."""
    if not isinstance(raw, dict):
        raise KnobError(f"{path} [{knob}]: 'stacks' must hold one [{knob}.stacks.<stack>] table per stack")
    limits = []
    for stack, table in raw.items():
        source = f"{path} [{knob}.stacks.{stack}]"
        valid = {"min", "max", "doc"}
        if not isinstance(table, dict) or set(table) - valid or not {"min", "max"} & set(table):
            raise KnobError(f"{source}: needs 'doc' and 'min' and/or 'max' (fields: {sorted(valid)}); got {table!r}")
        if not isinstance(table.get("doc"), str) or not table["doc"].strip():
            raise KnobError(f"{source}: 'doc' must say why the stack accepts less")
        minimum, maximum = table.get("min", low), table.get("max", high)
        if (
            not all(isinstance(v, int) and not isinstance(v, bool) for v in (minimum, maximum))
            or not low <= minimum <= maximum <= high
        ):
            raise KnobError(
                f"{source}: 'min' and 'max' must be integers with {low} <= min <= max <= {high} "
                f"(a stack's limit narrows the knob's range), got {minimum!r}..{maximum!r}"
            )
        limits.append(StackLimit(stack, minimum, maximum, table["doc"], source))
    return tuple(limits)


def load_registry(path: Path = KNOBS_FILE) -> dict[str, Knob]:
    """The knobs of a registry file (see its header), checked; raises KnobError naming the entry."""
    path = Path(path)
    raw = load_toml(path, KnobError, what="the knob registry")
    knobs = {}
    for name, entry in raw.items():
        where = f"{path} [{name}]"
        if not isinstance(entry, dict):
            raise KnobError(f"{where}: must be a table")
        valid = {"doc", "type", "min", "max", "choices", "pattern", "lossless", "targets", "stacks"}
        if sorted(set(entry) - valid) or not isinstance(entry.get("doc"), str) or not entry.get("targets"):
            raise KnobError(
                f"{where}: needs 'doc', 'type' and 'targets' (fields: {sorted(valid)}); got {sorted(entry)}"
            )
        kind = entry.get("type")
        if kind == "int" and not all(isinstance(entry.get(k), int) for k in ("min", "max")):
            raise KnobError(f"{where}: an int knob needs integer 'min' and 'max'")
        if kind == "choice" and not (entry.get("choices") and all(isinstance(c, str) for c in entry["choices"])):
            raise KnobError(f"{where}: a choice knob needs 'choices', a list of strings")
        if kind not in ("int", "choice", "bool"):
            raise KnobError(f"{where}: 'type' must be 'int', 'choice' or 'bool', got {kind!r}")
        if "pattern" in entry and (kind != "choice" or not _is_regex(entry["pattern"])):
            raise KnobError(
                f"{where}: 'pattern' (a regular expression) belongs to choice knobs only, got {entry['pattern']!r}"
            )
        if "stacks" in entry and kind != "int":
            raise KnobError(f"{where}: 'stacks' (a stack's narrower range) belongs to int knobs only")
        limits = (
            _stack_limits(entry["stacks"], path=path, knob=name, low=entry["min"], high=entry["max"])
            if "stacks" in entry
            else ()
        )
        knobs[name] = Knob(
            name=name,
            type=kind,
            targets=tuple(_target(t, where=where, knob_type=kind) for t in entry["targets"]),
            doc=entry["doc"],
            minimum=entry.get("min"),
            maximum=entry.get("max"),
            choices=tuple(entry.get("choices", ())),
            pattern=entry.get("pattern"),
            lossless=bool(entry.get("lossless", False)),
            stack_limits=limits,
        )
    return knobs


KNOBS: dict[str, Knob] = load_registry()


# --- reading and writing one target -------------------------------------------------------


def _spellings(flag: str) -> set[str]:
    return {flag, flag.replace("-", "_").replace("__", "--", 1)}


def _flag_index(argv: list[str], flag: str) -> tuple[int, bool] | None:
    """Where ``flag`` sits in argv, and whether its value is inline (``--flag=value``)."""
    spellings = _spellings(flag)
    for i, item in enumerate(argv):
        name, eq, _ = item.partition("=")
        if name in spellings:
            if eq:
                return i, True
            if i + 1 < len(argv):
                return i, False
    return None


def _switch_index(argv: list[str], flag: str) -> tuple[int, bool] | None:
    """Where a boolean flag sits in argv, and its value (``--no-`` spelling: False)."""
    on, off = _spellings(flag), _spellings(f"--no-{flag[2:]}")
    for i, item in enumerate(argv):
        if item in on or item in off:
            return i, item in on
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
    if target.kind == "switch":
        switch = _switch_index(manifest.serve, target.name)
        return (False, None) if switch is None else (True, switch[1])
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


def _text(value: KnobValue) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


def _write(manifest: Manifest, argv: list[str], env: dict[str, str], target: Target, value: KnobValue) -> None:
    if target.kind == "switch":
        i, _ = _switch_index(argv, target.name)  # type: ignore[misc]  # carried, so present
        argv[i] = target.name if value else f"--no-{target.name[2:]}"
        return
    raw = _raw(argv, env, target)
    if target.kind in ("env", "flag"):
        new = _text(value)
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


def parse_knobs(
    manifest: Manifest, values: Mapping[str, Any], *, registry: Mapping[str, Knob] = KNOBS, where: str = ""
) -> KnobValues:
    """Check names, consumption and values: the one check every raw knob value passes. Raises KnobError."""
    consumed = consumed_knobs(manifest, registry=registry)
    checked = {}
    for name, value in values.items():
        if name not in registry:
            raise KnobError(f"{where}unknown knob {name!r}; valid knobs: {sorted(registry)}")
        if name not in consumed:
            targets = ", ".join(t.describe() for t in registry[name].targets)
            raise KnobError(
                f"{where}{manifest.label} does not consume knob {name!r}: it sets none of {targets} "
                f"(knobs it consumes: {consumed})"
            )
        checked[name] = registry[name].for_stack(manifest.stack).parse(value, where=where)
    return KnobValues(checked, manifest=manifest.label)


def baseline_knobs(manifest: Manifest, *, registry: Mapping[str, Knob] = KNOBS) -> KnobValues:
    """The manifest's own value of each knob it consumes: a sweep's trial 0."""
    values = {}
    for name in consumed_knobs(manifest, registry=registry):
        value = next(v for found, v in (_read(manifest, t) for t in registry[name].targets) if found)
        try:
            values[name] = registry[name].for_stack(manifest.stack).parse(value, where=f"{manifest.label}: ")
        except KnobError as exc:
            raise ManifestError(str(exc)) from None
    return KnobValues(values, manifest=manifest.label)


def apply_knobs(manifest: Manifest, knobs: KnobValues, *, registry: Mapping[str, Knob] = KNOBS) -> Manifest:
    """A copy of the manifest with each knob's targets set to its value."""
    if knobs.manifest != manifest.label:
        raise ValueError(f"knob values checked against {knobs.manifest}, applied to {manifest.label}")
    argv, env = list(manifest.serve), dict(manifest.env)
    for name, value in knobs.items():
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
