"""What a user wrote that the engine reads: a stack's manifest, the knob registry and the values a study gives
its knobs, the benchmark profiles and the data sets they name.

Plain files and typed values, nothing booted: standard library and pydantic only, so that the reference server
reads its knob limits here inside a submission folder too.
"""

from engine.config._data import PplRecord, Prompt, load_ppl_records, load_prompts
from engine.config._knobs import (
    KNOBS,
    KNOBS_FILE,
    Knob,
    KnobValue,
    KnobValues,
    StackLimit,
    Target,
    apply_knobs,
    baseline_knobs,
    consumed_knobs,
    load_registry,
    parse_assignments,
    parse_knobs,
)
from engine.config._manifest import (
    MANIFESTS_DIR,
    NAME_RULE,
    PLACEHOLDERS,
    REPO_ROOT,
    Manifest,
    is_plain_name,
    load_manifest,
    parse_manifest,
)
from engine.config._profiles import (
    CHALLENGE_DATA_ENV,
    CLIENT_RULES,
    PROFILES_FILE,
    STUDIES_DIR,
    BenchProfile,
    get_profile,
    is_client_rule,
    load_profiles,
)

__all__ = [
    "CHALLENGE_DATA_ENV",
    "CLIENT_RULES",
    "KNOBS",
    "KNOBS_FILE",
    "MANIFESTS_DIR",
    "NAME_RULE",
    "PLACEHOLDERS",
    "PROFILES_FILE",
    "REPO_ROOT",
    "STUDIES_DIR",
    "BenchProfile",
    "Knob",
    "KnobValue",
    "KnobValues",
    "Manifest",
    "PplRecord",
    "Prompt",
    "StackLimit",
    "Target",
    "apply_knobs",
    "baseline_knobs",
    "consumed_knobs",
    "get_profile",
    "is_client_rule",
    "is_plain_name",
    "load_manifest",
    "load_ppl_records",
    "load_profiles",
    "load_prompts",
    "load_registry",
    "parse_assignments",
    "parse_knobs",
    "parse_manifest",
]
