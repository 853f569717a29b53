"""Study definitions: ``studies/<name>.toml`` -> a validated, frozen ``StudySpec``.

Everything is checked before anything boots: unknown fields, the sampler, the search space of
each knob (known to ``engine.config``, consumed by the study's manifest, values in range), the
gate, the profile and the resources. Each error names the file and the field and, where there
is a fixed set, lists the valid choices. The layout::

    name = "ctk"                  # Optuna study name; default: the file's stem
    manifest = "reference"        # a name in studies/manifests/ or a path
    n_trials = 7                  # budget: measured trials, the baseline included
    sampler = "grid"              # tpe (default), nsga2, gp, random, grid
    seed = 1
    workers = 1                   # trials in flight at once, one engine each
    identity_required = false     # a lossless-knob trial whose greedy output differs is infeasible
    repeats = "copy"              # a proposal of knobs already measured: "copy" (default) tells it that
                                  #   measurement, no boot; "allow" boots it again, recorded as a repeat
    ppl_memo = true               # a proposal whose PPL-moving knobs measured over the gate: told
                                  #   infeasible, no boot (sweep.search); false boots it
    objectives = { tps = "maximize", ppl = "minimize" }   # may be left out; a serving study's is
                                  #   { goodput = "maximize", ppl = "minimize" }

    [gate]                        # exactly one of:
    ppl_max_ratio = 1.05          #   relative to the baseline trial's PPL (the challenge's +5%)
    # ppl_max = 2.42              #   absolute
    # length_bucket = 2048        # and, both or neither: the PPL by context length (the profile's
    # length_ratio = 1.10         #   length_refs) in the bucket ending there <= ratio x the baseline's

    [profile]                     # or: profile = "quick"
    name = "quick"
    num_prompts = 4               # any field of engine.config.BenchProfile overrides it
    tps_repeats = 3               #   e.g. 3 timed runs per boot on disjoint prompts, CV stored

    [space.centroid_top_k]        # one table per swept knob:
    choices = [8, 16, 32]         #   a list of values (int, string or bool, as the knob's type), or
    # low = 8, high = 64, step = 8  an int range (step defaults to 1)

    [fixed]                       # knob values every trial but the baseline gets
    num_speculative_tokens = 4

    [fidelity]                    # multi-fidelity (sweep.search); left out: "multi" where safe
    mode = "multi"                #   or "full": every trial measured to the end
    stages = [0.25]               #   fractions of the first timed run where a trial may be stopped
    z = 2.0                       #   optimism, in deviations of the noise
    floor = 0.03                  #   the least relative noise assumed
    min_trials = 2                #   full trials needed before the front rule prunes

    [promotion]                   # after the search: the best re-measured over fresh boots (sweep.claims);
                                  #   a serving study's boots run its load levels too: claims of goodput
    candidates = 3                #   the N fastest feasible configurations (0: no promotion)
    boots = 3                     #   fresh boots each, interleaved A B C A B C ...
    profile = "challenge"         #   what a boot measures (default: the study's profile, one run a boot)
    target = 0.9                  #   the P(VERIFIED) of the organisers' re-run the confirmed claim must reach
    noise_floor = 0.02            #   the least relative noise a private re-run is given
    confirm_boots = 4             #   fresh boots of the chosen point and of its control, in a later run
                                  #   (>= 2): they alone make the claim and its odds (sweep.claims)
    confirm_max_boots = 12        #   the confirmation adds a pair at a time up to this many each, until P
                                  #   reaches the target or its ceiling cannot (>= confirm_boots)
    between_prior = 0.01          #   how far a run on another machine reads from one of yours (sd of the
                                  #   log ratio): the odds' machine term before the study's runs measure it
    between_prior_df = 2          #   the degrees of freedom that statement is worth beside what they measure

    [serving]                     # a serving study: after the challenge's measurement each trial runs the
    ttft_ms = 2000                #   profile's load levels (load_concurrency, ...); its objective is the
    # tpot_ms = 100, e2e_ms = ... #   highest goodput among them (requests a second that met every bound),
    percentile = 99               #   its constraint that level's p99 under each bound (sweep.judgement)

    [resources]                   # per trial (one engine)
    accelerator_type = "A10G"     # nodes advertising accelerator_type:A10G; none: any node
    num_gpus = 1
    num_cpus = 1

The baseline trial runs the manifest as it is, so the baseline value of every swept knob must
lie in its space (Optuna records the baseline as one of the study's points).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.config import (
    KNOBS,
    NAME_RULE,
    STUDIES_DIR,
    BenchProfile,
    KnobValue,
    KnobValues,
    Manifest,
    baseline_knobs,
    consumed_knobs,
    get_profile,
    is_plain_name,
    load_manifest,
    parse_knobs,
)
from engine.files import load_toml
from engine.stacks import adapter_for
from errors import ConfigError, StudySpecError
from sweep.judgement import (
    BETWEEN_PRIOR,
    BETWEEN_PRIOR_DF,
    DEFAULT_CONFIRM_BOOTS,
    DEFAULT_CONFIRM_MAX_BOOTS,
    DEFAULT_TARGET,
    NOISE_FLOOR,
    Gate,
    Slo,
)
from sweep.search._fidelity import FidelitySpec, front_rule_for, gate_first_unsafe, stage_counts

__all__ = [
    "DEFAULT_SAMPLER",
    "REPEATS",
    "SAMPLERS",
    "KnobSpace",
    "PromotionSpec",
    "Resources",
    "StudySpec",
    "load_study",
    "study_path",
]

SAMPLERS = ("tpe", "nsga2", "gp", "random", "grid")
DEFAULT_SAMPLER = "tpe"
REPEATS = ("copy", "allow")
OBJECTIVES = {"tps": "maximize", "ppl": "minimize"}
SERVING_OBJECTIVES = {"goodput": "maximize", "ppl": "minimize"}
_TOP_FIELDS = {
    "name",
    "manifest",
    "n_trials",
    "sampler",
    "seed",
    "workers",
    "identity_required",
    "objectives",
    "gate",
    "profile",
    "space",
    "fixed",
    "fidelity",
    "resources",
    "repeats",
    "ppl_memo",
    "promotion",
    "serving",
}


@dataclass(frozen=True, kw_only=True)
class KnobSpace:
    """The values one knob may take: an int range with a step, or a list of choices."""

    knob: str
    low: int | None = None
    high: int | None = None
    step: int = 1
    choices: tuple[KnobValue, ...] | None = None

    def values(self) -> list[KnobValue]:
        if self.choices is not None:
            return list(self.choices)
        assert self.low is not None and self.high is not None  # a range: made with both ends
        return list(range(self.low, self.high + 1, self.step))

    def contains(self, value: KnobValue) -> bool:
        if self.choices is not None:
            return value in self.choices
        return self.low <= value <= self.high and (value - self.low) % self.step == 0  # type: ignore[operator]


@dataclass(frozen=True, kw_only=True)
class Resources:
    accelerator_type: str | None = None
    num_gpus: float = 0
    num_cpus: float = 1


@dataclass(frozen=True, kw_only=True)
class PromotionSpec:
    """A study's ``[promotion]``: which candidates are re-measured after the search, and how; and the
    confirmation of the one it chooses."""

    candidates: int = 3
    boots: int = 3
    profile: BenchProfile | None = None  # None: no promotion
    target: float = DEFAULT_TARGET
    noise_floor: float = NOISE_FLOOR
    confirm_boots: int = DEFAULT_CONFIRM_BOOTS
    confirm_max_boots: int = DEFAULT_CONFIRM_MAX_BOOTS
    between_prior: float = BETWEEN_PRIOR
    between_prior_df: float = BETWEEN_PRIOR_DF


@dataclass(frozen=True, kw_only=True)
class StudySpec:
    name: str
    source: Path
    manifest: Manifest
    space: dict[str, KnobSpace]
    fixed: KnobValues
    gate: Gate
    profile: BenchProfile
    n_trials: int
    sampler: str = DEFAULT_SAMPLER
    seed: int | None = None
    workers: int = 1
    identity_required: bool = False
    repeats: str = "copy"  # REPEATS: what a proposal of already measured knobs gets (sweep.search)
    ppl_memo: bool = True  # a proposal whose PPL-moving knobs measured over the gate is told infeasible, unbooted
    fidelity: FidelitySpec = field(default_factory=lambda: FidelitySpec(mode="full"))
    promotion: PromotionSpec = field(default_factory=PromotionSpec)
    resources: Resources = field(default_factory=Resources)
    serving: Slo | None = None  # a serving study's SLO: its objective is goodput under it (sweep.judgement)

    @property
    def objective(self) -> str:
        """What the study maximises beside PPL: the challenge's TPS, or a serving study's goodput."""
        return "goodput" if self.serving is not None else "tps"

    def baseline(self) -> KnobValues:
        """The manifest's own value of every knob it consumes: trial 0."""
        return baseline_knobs(self.manifest)

    def trial_knobs(self, sampled: dict[str, Any]) -> KnobValues:
        """What a (non-baseline) trial sets: the fixed values and the sampled ones."""
        return self.fixed | parse_knobs(self.manifest, sampled)

    def effective(self, knobs: KnobValues) -> KnobValues:
        """Every consumed knob's value in a trial that sets ``knobs`` and leaves the rest as is.

        Trials are compared by this, so that "the same knobs" means the same stack.
        """
        return self.baseline() | knobs


@contextmanager
def _restated(where: str) -> Iterator[None]:
    """A ConfigError of what the study file names (its manifest, a knob, a profile) restated as the study's own,
    prefixed with where the file names it."""
    try:
        yield
    except ConfigError as exc:
        raise StudySpecError(f"{where}: {exc}") from None


def study_path(name_or_path: str | Path) -> Path:
    """``ctk`` means ``studies/ctk.toml``; anything that looks like a path is a path."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.suffix != ".toml" and len(path.parts) == 1 and not path.exists():
        path = STUDIES_DIR / f"{text}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in STUDIES_DIR.glob("*.toml") if p.stem != "profiles")
        raise StudySpecError(f"study {text!r} not found (no file {path}); known studies: {known}")
    return path


def load_study(
    name_or_path: str | Path,
    *,
    manifest: str | Path | None = None,
    profile: str | None = None,
    n_trials: int | None = None,
    workers: int | None = None,
    fidelity: str | None = None,
    accelerator: str | None = None,
) -> StudySpec:
    """Read and validate a study; the keyword arguments are the CLI's one-run overrides. ``accelerator``
    replaces ``[resources] accelerator_type`` for this run ("any": no pin), for a lent machine whose card is not
    the one the study names: each trial's node record says which card it ran on."""
    path = study_path(name_or_path)
    raw = load_toml(path, StudySpecError)
    spec = _parse(raw, path, manifest=manifest, profile=profile, n_trials=n_trials, workers=workers, fidelity=fidelity)
    if accelerator is None:
        return spec
    if not accelerator.strip() or any(c.isspace() or c in ":," for c in accelerator):
        raise StudySpecError(f"--accelerator: {accelerator!r} is not an accelerator type (e.g. A10G, H100, H200, any)")
    pinned = None if accelerator == "any" else accelerator
    return replace(spec, resources=replace(spec.resources, accelerator_type=pinned))


def _parse(
    raw: dict[str, Any],
    path: Path,
    *,
    manifest: str | Path | None,
    profile: str | None,
    n_trials: int | None,
    workers: int | None,
    fidelity: str | None = None,
) -> StudySpec:
    where = str(path)
    unknown = sorted(set(raw) - _TOP_FIELDS)
    if unknown:
        raise StudySpecError(f"{where}: unknown field(s) {unknown}; valid: {sorted(_TOP_FIELDS)}")

    name = _str(raw.get("name", path.stem), where, "name")
    if not is_plain_name(name):
        source = "field 'name'" if "name" in raw else "the file's name"
        raise StudySpecError(
            f"{where}: {source}: {name!r} is not a plain name ({NAME_RULE}): it names the study's folders under runs/"
        )
    manifest_ref = manifest if manifest is not None else raw.get("manifest")
    if manifest_ref is None:
        raise StudySpecError(f"{where}: field 'manifest' is required (a name in studies/manifests/ or a path)")
    loaded = _manifest(manifest_ref, path, from_cli=manifest is not None)

    serving = _serving(raw.get("serving"), where)
    _check_objectives(raw.get("objectives", SERVING_OBJECTIVES if serving else OBJECTIVES), where, serving=serving)
    sampler = _str(raw.get("sampler", DEFAULT_SAMPLER), where, "sampler")
    if sampler not in SAMPLERS:
        raise StudySpecError(f"{where}: field 'sampler': unknown sampler {sampler!r}; valid: {list(SAMPLERS)}")
    seed = raw.get("seed")
    if seed is not None:
        _int(seed, where, "seed", minimum=0)

    space = _space(raw.get("space"), loaded, where)
    fixed = _fixed(raw.get("fixed", {}), loaded, where, space)
    _baseline_in_space(space, loaded, where)
    budget: int | None
    if sampler == "grid" and n_trials is None and "n_trials" not in raw:
        budget = 1 + _grid_size(space)  # the baseline, then every grid point once
    else:
        budget = n_trials if n_trials is not None else raw.get("n_trials")
        if budget is None:
            raise StudySpecError(f"{where}: field 'n_trials' is required (the trial budget, baseline included)")
    bench = _profile(raw.get("profile", "quick"), where, override=profile)
    if serving is not None and not bench.load_concurrency:
        raise StudySpecError(
            f"{where}: [serving] judges the profile's serving load, and profile {bench.name!r} runs none: set its "
            "load_concurrency (e.g. [profile] load_concurrency = [1, 4])"
        )
    return StudySpec(
        name=name,
        source=path,
        manifest=loaded,
        space=space,
        fixed=fixed,
        gate=_gate(raw.get("gate"), where, profile=bench),
        profile=bench,
        n_trials=_int(budget, "--trials" if n_trials is not None else where, "n_trials", minimum=1),
        sampler=sampler,
        seed=seed,
        workers=_int(workers if workers is not None else raw.get("workers", 1), where, "workers", minimum=1),
        identity_required=_bool(raw.get("identity_required", False), where, "identity_required"),
        repeats=_repeats(raw.get("repeats", "copy"), where),
        ppl_memo=_bool(raw.get("ppl_memo", True), where, "ppl_memo"),
        fidelity=_fidelity(
            raw.get("fidelity"), where, manifest=loaded, profile=bench, sampler=sampler, override=fidelity
        ),
        resources=_resources(raw.get("resources", {}), where),
        promotion=_promotion(raw.get("promotion"), where, profile=bench, serving=serving is not None),
        serving=serving,
    )


# --- field parsers: each raises StudySpecError naming the file and the field ---------------


def _str(value: Any, where: str, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise StudySpecError(f"{where}: field {name!r} must be a non-empty string, got {value!r}")
    return value


def _int(value: Any, where: str, name: str, *, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise StudySpecError(f"{where}: field {name!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _number(value: Any, where: str, name: str, *, minimum: float, above: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or value < minimum or (above and value == minimum):
        bound = f"> {minimum:g}" if above else f">= {minimum:g}"
        raise StudySpecError(f"{where}: field {name!r} must be a number {bound}, got {value!r}")
    return float(value)


def _bool(value: Any, where: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise StudySpecError(f"{where}: field {name!r} must be true or false, got {value!r}")
    return value


def _repeats(value: Any, where: str) -> str:
    if value not in REPEATS:
        raise StudySpecError(
            f"{where}: field 'repeats' must be \"copy\" (a proposal of knobs already measured is "
            'told that measurement, without a boot) or "allow" (booted again and recorded as a '
            f"repeat), got {value!r}"
        )
    return value


def _table(value: Any, where: str, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StudySpecError(f"{where}: field {name!r} must be a table, got {value!r}")
    return value


def _manifest(ref: Any, study: Path, *, from_cli: bool) -> Manifest:
    if not isinstance(ref, (str, Path)):
        raise StudySpecError(f"{study}: field 'manifest' must be a manifest name or path, got {ref!r}")
    path = Path(ref).expanduser()
    # A relative path written in a study file is relative to that file; on the command line,
    # to the current folder. A bare name is looked up in studies/manifests/ either way.
    if not from_cli and not path.is_absolute() and (path.suffix == ".json" or len(path.parts) > 1):
        ref = study.parent / path
    with _restated("--manifest" if from_cli else f"{study}: field 'manifest'"):
        loaded = load_manifest(ref)
        adapter_for(loaded)  # a stack this project cannot read is refused here, before anything boots
    return loaded


def _check_objectives(value: Any, where: str, *, serving: Slo | None) -> None:
    expected = SERVING_OBJECTIVES if serving is not None else OBJECTIVES
    if value != expected:
        pair = ", ".join(f'{k} = "{v}"' for k, v in expected.items())
        raise StudySpecError(
            f"{where}: field 'objectives' must be {{ {pair} }} "
            + ("(a study with [serving] maximises goodput) " if serving is not None else "")
            + f"(PPL is gated by [gate], not traded), got {value!r}"
        )


def _serving(raw: Any, where: str) -> Slo | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise StudySpecError(f"{where}: [serving] must be a table (ttft_ms, tpot_ms, e2e_ms, percentile)")
    known = {"ttft_ms", "tpot_ms", "e2e_ms", "percentile"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise StudySpecError(f"{where}: [serving] unknown field(s) {unknown}; valid: {sorted(known)}")
    if not set(raw) & {"ttft_ms", "tpot_ms", "e2e_ms"}:
        raise StudySpecError(f"{where}: [serving] needs at least one bound (ttft_ms, tpot_ms or e2e_ms)")
    try:
        return Slo(**raw)
    except (TypeError, ValueError) as exc:
        raise StudySpecError(f"{where}: [serving] {exc}") from None


def _knob_known(knob: str, manifest: Manifest, where: str, table: str) -> None:
    if knob not in KNOBS:
        raise StudySpecError(f"{where}: [{table}] unknown knob {knob!r}; valid knobs: {sorted(KNOBS)}")
    consumed = consumed_knobs(manifest)
    if knob not in consumed:
        raise StudySpecError(
            f"{where}: [{table}] knob {knob!r} is not consumed by manifest {manifest.label} "
            f"(knobs it consumes: {consumed})"
        )


_TOML_TYPES = {"int": (int, "an integer"), "choice": (str, "a string"), "bool": (bool, "true or false")}


def _knob_value(knob: str, value: Any, manifest: Manifest, where: str, name: str) -> KnobValue:
    kind, words = _TOML_TYPES[KNOBS[knob].type]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise StudySpecError(
            f"{where}: field {name!r}: {value!r} is not {words} (knob {knob!r} is of type "
            f"{KNOBS[knob].type}: {KNOBS[knob].for_stack(manifest.stack).range_text})"
        )
    with _restated(f"{where}: field {name!r}"):
        parsed = parse_knobs(manifest, {knob: value})[knob]
    return parsed


def _space(value: Any, manifest: Manifest, where: str) -> dict[str, KnobSpace]:
    if value is None:
        raise StudySpecError(f"{where}: field 'space' is required: one [space.<knob>] table per swept knob")
    spaces = {}
    for knob, table in _table(value, where, "space").items():
        name = f"space.{knob}"
        _knob_known(knob, manifest, where, name)
        table = _table(table, where, name)
        if set(table) == {"choices"}:
            choices = table["choices"]
            if not isinstance(choices, list) or not choices:
                raise StudySpecError(f"{where}: field '{name}.choices' must be a non-empty list of integers")
            checked = [_knob_value(knob, v, manifest, where, f"{name}.choices") for v in choices]
            if len({repr(v) for v in checked}) != len(checked):
                raise StudySpecError(f"{where}: field '{name}.choices' repeats a value: {choices}")
            spaces[knob] = KnobSpace(knob=knob, choices=tuple(checked))
        elif {"low", "high"} <= set(table) <= {"low", "high", "step"}:
            if KNOBS[knob].type != "int":
                raise StudySpecError(
                    f"{where}: [{name}] 'low'/'high' need an int knob; {knob!r} is of type "
                    f"{KNOBS[knob].type}: list its 'choices'"
                )
            low = _knob_value(knob, table["low"], manifest, where, f"{name}.low")
            high = _knob_value(knob, table["high"], manifest, where, f"{name}.high")
            step = _int(table.get("step", 1), where, f"{name}.step", minimum=1)
            assert isinstance(low, int) and isinstance(high, int)  # an int knob's values, checked as such
            if high < low:
                raise StudySpecError(f"{where}: field '{name}.high' ({high}) is below '{name}.low' ({low})")
            spaces[knob] = KnobSpace(knob=knob, low=low, high=high, step=step)
        else:
            raise StudySpecError(
                f"{where}: [{name}] must have either 'choices', or 'low' and 'high' "
                f"(and optionally 'step'); got fields {sorted(table)}"
            )
    if not spaces:
        raise StudySpecError(f"{where}: field 'space' is empty: add a [space.<knob>] table")
    return spaces


def _fixed(value: Any, manifest: Manifest, where: str, space: dict[str, KnobSpace]) -> KnobValues:
    fixed = {}
    for knob, v in _table(value, where, "fixed").items():
        _knob_known(knob, manifest, where, "fixed")
        if knob in space:
            raise StudySpecError(f"{where}: [fixed] knob {knob!r} is also swept in [space.{knob}]; keep one")
        fixed[knob] = _knob_value(knob, v, manifest, where, f"fixed.{knob}")
    return parse_knobs(manifest, fixed)


def _baseline_in_space(space: dict[str, KnobSpace], manifest: Manifest, where: str) -> None:
    with _restated(f"{where}: field 'manifest'"):
        baseline = baseline_knobs(manifest)
    for knob, knob_space in space.items():
        if not knob_space.contains(baseline[knob]):
            raise StudySpecError(
                f"{where}: [space.{knob}] does not contain the manifest's own value {baseline[knob]} "
                "(the baseline trial); add it to the space"
            )


def _grid_size(space: dict[str, KnobSpace]) -> int:
    size = 1
    for knob_space in space.values():
        size *= len(knob_space.values())
    return size


_LENGTH_GATE = ("length_bucket", "length_ratio")


def _gate(value: Any, where: str, *, profile: BenchProfile) -> Gate:
    table = dict(_table(value if value is not None else {}, where, "gate"))
    length = {k: table.pop(k) for k in _LENGTH_GATE if k in table}
    keys = set(table)
    if len(keys) != 1 or not keys <= {"ppl_max", "ppl_max_ratio"}:
        raise StudySpecError(
            f"{where}: [gate] needs exactly one of 'ppl_max' (absolute, e.g. 2.42) or "
            f"'ppl_max_ratio' (relative to the baseline trial, e.g. 1.05); got {sorted(keys)}"
        )
    if "ppl_max" in table:
        gate = Gate(ppl_max=_number(table["ppl_max"], where, "gate.ppl_max", minimum=0, above=True))
    else:
        gate = Gate(ppl_max_ratio=_number(table["ppl_max_ratio"], where, "gate.ppl_max_ratio", minimum=1.0))
    return replace(gate, **_length_gate(length, where, profile=profile)) if length else gate


def _length_gate(table: dict[str, Any], where: str, *, profile: BenchProfile) -> dict[str, Any]:
    """The gate's length bucket: one the profile scores (its length_refs, its length_buckets' ends), and a ratio."""
    if set(table) != set(_LENGTH_GATE):
        raise StudySpecError(
            f"{where}: [gate] gates a length bucket with both 'length_bucket' (where the bucket ends, in tokens) and "
            f"'length_ratio' (its PPL over the baseline trial's there, e.g. 1.10); got {sorted(table)}"
        )
    end = _int(table["length_bucket"], where, "gate.length_bucket", minimum=1)
    if not profile.length_refs or end not in profile.length_buckets:
        raise StudySpecError(
            f"{where}: [gate] length_bucket = {end}: profile {profile.name!r} scores "
            + (
                f"the length buckets ending at {list(profile.length_buckets)}"
                if profile.length_refs
                else 'no long texts (set its length_refs, e.g. [profile] length_refs = "data/ppl_refs_long.jsonl")'
            )
        )
    return {
        "length_bucket": end,
        "length_ratio": _number(table["length_ratio"], where, "gate.length_ratio", minimum=1.0),
    }


def _profile(value: Any, where: str, *, override: str | None) -> BenchProfile:
    table = {"name": value} if isinstance(value, str) else dict(_table(value, where, "profile"))
    name = override if override is not None else table.pop("name", "quick")
    table.pop("name", None)
    try:
        base = get_profile(_str(name, where, "profile.name"))
    except StudySpecError as exc:
        raise StudySpecError(f"{where}: field 'profile': {exc}") from None
    profile = base.with_overrides(table, source=f"{where} [profile]") if table else base
    # The data sets load here, so that a missing or short file stops the study before a boot.
    with _restated(f"{where}: profile {profile.name!r}"):
        profile.load_data()
        profile.load_lengths()
    return profile


_FIDELITY_FIELDS = ("mode", "stages", "z", "floor", "min_trials")


def _fidelity(
    value: Any, where: str, *, manifest: Manifest, profile: BenchProfile, sampler: str, override: str | None = None
) -> FidelitySpec:
    table = _table(value if value is not None else {}, where, "fidelity")
    unknown = sorted(set(table) - set(_FIDELITY_FIELDS))
    if unknown:
        raise StudySpecError(f"{where}: [fidelity] unknown field(s) {unknown}; valid: {list(_FIDELITY_FIELDS)}")
    mode = override if override is not None else table.get("mode")
    named = "--fidelity" if override is not None else "field 'fidelity.mode'"
    if mode not in (None, "multi", "full"):
        raise StudySpecError(f'{where}: {named} must be "multi" or "full", got {mode!r}')
    default = FidelitySpec()
    stages = table.get("stages", list(default.stages))
    if (
        not isinstance(stages, list)
        or not stages
        or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f < 1 for f in stages)
        or stages != sorted(set(stages))
    ):
        raise StudySpecError(
            f"{where}: field 'fidelity.stages' must be increasing fractions of the first run, "
            f"each between 0 and 1 (e.g. [0.25, 0.5]), got {stages!r}"
        )
    spec = FidelitySpec(
        mode="full" if mode == "full" else "multi",  # not given (None): multi
        stages=tuple(float(f) for f in stages),
        z=_number(table.get("z", default.z), where, "fidelity.z", minimum=0),
        floor=_number(table.get("floor", default.floor), where, "fidelity.floor", minimum=0),
        min_trials=_int(table.get("min_trials", default.min_trials), where, "fidelity.min_trials", minimum=2),
        front_rule_off=front_rule_for(sampler),
    )
    if spec.mode == "full":
        return spec
    unsafe = gate_first_unsafe(manifest, profile, stage_counts(spec, profile))
    if unsafe is None:
        return spec
    if mode == "multi":
        raise StudySpecError(
            f'{where}: {named} = "multi" is not safe here: {unsafe}. '
            'Set mode = "full", or make the PPL records disjoint from the timed prompts'
        )
    return replace(spec, mode="full", why_full=f"multi-fidelity is not safe here: {unsafe}")


_PROMOTION_FIELDS = (
    "candidates",
    "boots",
    "profile",
    "target",
    "noise_floor",
    "confirm_boots",
    "confirm_max_boots",
    "between_prior",
    "between_prior_df",
)


def _promotion(value: Any, where: str, *, profile: BenchProfile, serving: bool) -> PromotionSpec:
    table = _table(value if value is not None else {}, where, "promotion")
    unknown = sorted(set(table) - set(_PROMOTION_FIELDS))
    if unknown:
        raise StudySpecError(f"{where}: [promotion] unknown field(s) {unknown}; valid: {list(_PROMOTION_FIELDS)}")
    default = PromotionSpec()
    candidates = _int(table.get("candidates", default.candidates), where, "promotion.candidates", minimum=0)
    # the target and the floor judge a verification too, where the study promotes nothing
    target = _probability(table, "target", default.target, where)
    floor = _number(table.get("noise_floor", default.noise_floor), where, "promotion.noise_floor", minimum=0)
    if not candidates:
        return PromotionSpec(candidates=0, target=target, noise_floor=floor)
    # One boot's figures are noise: a spread needs two at least
    boots = _int(table.get("boots", default.boots), where, "promotion.boots", minimum=2)
    # one confirming boot is one draw: its noise needs two at least
    confirm = _int(table.get("confirm_boots", default.confirm_boots), where, "promotion.confirm_boots", minimum=2)
    # a cap under the stated minimum is an error; the default cap under it gives way to it (a fixed confirmation)
    most = _int(
        table.get("confirm_max_boots", max(default.confirm_max_boots, confirm)),
        where,
        "promotion.confirm_max_boots",
        minimum=confirm,
    )
    prior = _number(table.get("between_prior", default.between_prior), where, "promotion.between_prior", minimum=0)
    # what a stated prior is worth: some degrees of freedom, never none (the measurement alone may have none)
    prior_df = _number(
        table.get("between_prior_df", default.between_prior_df),
        where,
        "promotion.between_prior_df",
        minimum=0,
        above=True,
    )
    boot_profile = (
        _profile(table["profile"], f"{where} [promotion]", override=None) if "profile" in table else profile
    ).for_boots(verification=False)
    if serving:  # a serving study's boots run its load levels too, as its trials ran them: its claims are of goodput
        load = ("load_concurrency", "load_num_prompts", "load_output_len", "load_request_rate", "load_prompts")
        boot_profile = boot_profile.with_overrides(
            {name: getattr(profile, name) for name in load}, source=f"{where}: [promotion] of a serving study"
        )
    with _restated(f"{where}: [promotion] profile {boot_profile.name!r}"):
        boot_profile.load_heldout()
    return PromotionSpec(
        candidates=candidates,
        boots=boots,
        profile=boot_profile,
        target=target,
        noise_floor=floor,
        confirm_boots=confirm,
        confirm_max_boots=most,
        between_prior=prior,
        between_prior_df=prior_df,
    )


def _probability(table: dict[str, Any], key: str, default: float, where: str) -> float:
    value = _number(table.get(key, default), where, f"promotion.{key}", minimum=0, above=True)
    if value >= 1:
        raise StudySpecError(f"{where}: field 'promotion.{key}' must be a probability below 1, got {value!r}")
    return value


def _resources(value: Any, where: str) -> Resources:
    table = _table(value, where, "resources")
    valid = {"accelerator_type", "num_gpus", "num_cpus"}
    unknown = sorted(set(table) - valid)
    if unknown:
        raise StudySpecError(f"{where}: [resources] unknown field(s) {unknown}; valid: {sorted(valid)}")
    accelerator = table.get("accelerator_type")
    return Resources(
        accelerator_type=None if accelerator is None else _str(accelerator, where, "resources.accelerator_type"),
        num_gpus=_number(table.get("num_gpus", 0), where, "resources.num_gpus", minimum=0),
        num_cpus=_number(table.get("num_cpus", 1), where, "resources.num_cpus", minimum=0),
    )
