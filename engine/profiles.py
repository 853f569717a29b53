"""Benchmark profiles: how much to measure. Data in ``studies/profiles.toml``, not code.

A study names a profile and may override any of its fields in its own ``[profile]`` table.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from errors import StudySpecError

__all__ = ["PROFILES_FILE", "STUDIES_DIR", "BenchProfile", "get_profile", "load_profiles"]

STUDIES_DIR = Path(__file__).resolve().parent.parent / "studies"
PROFILES_FILE = STUDIES_DIR / "profiles.toml"


@dataclass(frozen=True, kw_only=True)
class BenchProfile:
    name: str
    prompts: str  # ShareGPT-style JSON; relative paths are relative to studies/
    refs: str  # PPL reference JSONL (context_token_ids, target_token_ids)
    num_prompts: int  # first N prompts of the set are timed
    output_len: int  # max_tokens with ignore_eos, as the harness
    ppl_records: int  # first N reference records
    warmup_requests: int = 4
    warmup_output_len: int = 32
    warmup_pause_s: float = 1.0
    stream_pass: bool = False  # an extra streaming pass for TTFT / inter-token latency
    # Timed TPS runs back to back in one boot: the trial's TPS is their median and their
    # spread is stored, so that a sweep does not crown one lucky measurement.
    tps_repeats: int = 1
    boot_timeout_s: float = 600.0
    request_timeout_s: float = 600.0

    def path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else STUDIES_DIR / p

    def with_overrides(self, overrides: dict[str, Any], *, source: str) -> "BenchProfile":
        known = {f.name: f.type for f in fields(self)}
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise StudySpecError(
                f"{source}: unknown profile field(s) {unknown}; valid: {sorted(known)}"
            )
        return _validated(replace(self, **overrides), source=source)


def _validated(profile: BenchProfile, *, source: str) -> BenchProfile:
    for name in ("prompts", "refs"):
        value = getattr(profile, name)
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise StudySpecError(f"{source}: profile field {name!r} must be a file path, got {value!r}")
    for name, low in (("num_prompts", 1), ("output_len", 1), ("ppl_records", 1), ("warmup_requests", 0),
                      ("warmup_output_len", 1), ("tps_repeats", 1)):  # fmt: skip
        value = getattr(profile, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise StudySpecError(f"{source}: profile field {name!r} must be an integer >= {low}, got {value!r}")
    if not isinstance(profile.stream_pass, bool):
        raise StudySpecError(f"{source}: profile field 'stream_pass' must be true or false, got {profile.stream_pass!r}")
    for name in ("warmup_pause_s", "boot_timeout_s", "request_timeout_s"):
        value = getattr(profile, name)
        # NaN passes every comparison and inf overflows a socket timeout: both are refused.
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < math.inf:
            raise StudySpecError(f"{source}: profile field {name!r} must be a finite number >= 0, got {value!r}")
    return profile


def load_profiles(path: Path = PROFILES_FILE) -> dict[str, BenchProfile]:
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise StudySpecError(f"{path}: cannot read profiles: {exc}") from exc
    profiles = {}
    for name, table in raw.items():
        try:
            profiles[name] = _validated(BenchProfile(name=name, **table), source=f"{path} [{name}]")
        except TypeError as exc:
            raise StudySpecError(f"{path} [{name}]: {exc}") from exc
    return profiles


def get_profile(name: str) -> BenchProfile:
    profiles = load_profiles()
    if name not in profiles:
        raise StudySpecError(f"unknown profile {name!r}; valid: {sorted(profiles)}")
    return profiles[name]
