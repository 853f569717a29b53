"""Benchmark profiles: what to measure on, and how much. Data in ``studies/profiles.toml``, not code.

A study names a profile and may override any of its fields in its own ``[profile]`` table.

Data sets are files the profile names. A relative path is relative to ``studies/``; a path that
starts with ``{challenge}`` is inside the folder holding the organisers' own files, which the
environment variable ``GEMMA_SWEEP_CHALLENGE_DATA`` names (the tool reads them where a user keeps
them, unchanged; they are not part of this repository). ``load_data`` reads both sets the way
the organisers' harness does: prompts in the file's order, or shuffled as sglang's
``bench_serving`` shuffles them (``shuffle_seed``), then the first ``num_prompts`` per timed run.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from engine.config._data import PplRecord, Prompt, load_ppl_records, load_prompts
from engine.files import load_toml
from engine.stackside import SPEC_RULE
from errors import DataError, StudySpecError
from studies import STUDIES_DIR

__all__ = [
    "CHALLENGE_DATA_ENV",
    "CLIENT_RULES",
    "PROFILES_FILE",
    "STUDIES_DIR",
    "BenchProfile",
    "get_profile",
    "is_client_rule",
    "load_profiles",
]

PROFILES_FILE = STUDIES_DIR / "profiles.toml"
CHALLENGE_DATA_ENV = "GEMMA_SWEEP_CHALLENGE_DATA"
_CHALLENGE = "{challenge}"
CLIENT_RULES = ("none", "rest")  # or a CPU list: where the timing client runs (engine.host's client_cpus)


def is_client_rule(text: str) -> bool:
    """A valid ``client_cpus`` value: ``none``, ``rest`` or a CPU list."""
    return text in CLIENT_RULES or re.fullmatch(SPEC_RULE, text) is not None


@dataclass(frozen=True, kw_only=True)
class BenchProfile:
    name: str
    prompts: str  # ShareGPT-style JSON; relative paths are relative to studies/, {challenge}/... see above
    refs: str  # PPL reference JSONL (context_token_ids, target_token_ids)
    num_prompts: int  # prompts per timed run
    output_len: int  # max_tokens with ignore_eos, as the harness
    ppl_records: int  # first N reference records
    # sglang bench_serving's random.seed(seed) shuffle of the prompt file (the organisers ran seed 1);
    # 0: the file's own order
    shuffle_seed: int = 0
    warmup_requests: int = 4
    warmup_output_len: int = 32
    warmup_pause_s: float = 1.0
    stream_pass: bool = False  # an extra streaming pass for TTFT / inter-token latency
    # Timed TPS runs in one boot: the trial's TPS is their median and their spread is stored, so
    # that a sweep does not crown one lucky measurement. Each run times its own slice of the
    # prompts, after its own warm-up, so that no run is served from what an earlier one cached.
    tps_repeats: int = 1
    # What sweep.verify re-runs a trial on: prompts unseen by the sweep, like the organisers'
    # private set, and the PPL references it re-resolves a relative gate on.
    heldout_prompts: str = "data/prompts_heldout.json"
    heldout_refs: str = "data/ppl_refs_heldout.jsonl"
    boot_timeout_s: float = 600.0
    request_timeout_s: float = 600.0
    gpu_free_timeout_s: float = 120.0  # a GPU still held by the last stack after this long: a FAILED trial
    # Where the timing client runs while a boot is measured: "none", "rest" (the CPUs the stack's may not
    # use) or a CPU list (engine.host; recorded in Measurement.telemetry["affinity"])
    client_cpus: str = "none"
    # Serving load after the challenge's measurement (engine.bench's measure_load): one run at each concurrency
    # (none: no load pass), load_num_prompts streamed requests of load_output_len tokens, arriving at
    # load_request_rate a second (0: all at once), on the public prompts or long-context ones built from them
    load_concurrency: tuple[int, ...] = ()
    load_num_prompts: int = 16
    load_output_len: int = 64
    load_request_rate: float = 0.0
    load_prompts: str = "public"
    # PPL by context length after the challenge's PPL (engine.measurement): a set of long texts (PPL reference JSONL;
    # "" none), its first length_records texts (0: all), each cut after the last bucket's end, scored in the buckets
    # of context length ending at length_buckets (tokens)
    length_refs: str = ""
    length_records: int = 0
    length_buckets: tuple[int, ...] = (512, 1024, 2048)

    @classmethod
    def from_record(cls, stored: dict[str, Any]) -> BenchProfile:
        """A profile as a trial record stored it (``asdict``); fields added since read as their defaults."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in stored.items() if k in known}
        for name in ("load_concurrency", "length_buckets"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)

    def path(self, value: str) -> Path:
        if value.startswith(_CHALLENGE):
            folder = os.environ.get(CHALLENGE_DATA_ENV)
            if not folder:
                raise DataError(
                    f"profile {self.name!r} reads the organisers' own files ({value}): set {CHALLENGE_DATA_ENV} "
                    "to the folder that holds them (eval_prompts_sharegpt.json, ppl_ground_truth_tokens.jsonl)"
                )
            return Path(folder).expanduser() / value[len(_CHALLENGE) :].lstrip("/")
        p = Path(value).expanduser()
        return p if p.is_absolute() else STUDIES_DIR / p

    def load_data(self) -> tuple[list[Prompt], list[PplRecord]]:
        """The prompts of every timed run (``num_prompts`` x ``tps_repeats``, in run order) and the
        PPL records; raises DataError for a file that does not load or holds too few."""
        prompts = load_prompts(self.path(self.prompts), shuffle_seed=self.shuffle_seed or None)
        needed = self.num_prompts * self.tps_repeats
        if needed > len(prompts):
            raise DataError(
                f"{self.path(self.prompts)}: {needed} prompts asked for ({self.num_prompts} a run x "
                f"{self.tps_repeats} run(s), none timed twice), the file has {len(prompts)}"
            )
        return prompts[:needed], load_ppl_records(self.path(self.refs), limit=self.ppl_records)

    def load_public(self) -> list[Prompt]:
        """Every public prompt, as ``load_data`` orders them (what the serving load's levels are cut from)."""
        return load_prompts(self.path(self.prompts), shuffle_seed=self.shuffle_seed or None)

    def load_lengths(self) -> list[PplRecord]:
        """The long texts of the length pass (none without ``length_refs``), each cut after the last bucket's end:
        a token at position p (p tokens before it) is scored only where p <= that end."""
        if not self.length_refs:
            return []
        records = load_ppl_records(self.path(self.length_refs), limit=self.length_records or None)
        end = self.length_buckets[-1]
        return [
            replace(r, target_token_ids=r.target_token_ids[: max(0, end + 1 - len(r.context_token_ids))])
            for r in records
        ]

    def load_heldout(self) -> list[Prompt]:
        """The held-out run's prompts: the first ``num_prompts`` of ``heldout_prompts`` in the file's
        order (a set the sweep never timed, as the organisers' private one is to a participant)."""
        path = self.path(self.heldout_prompts)
        prompts = load_prompts(path)
        if self.num_prompts > len(prompts):
            raise DataError(f"{path}: {self.num_prompts} held-out prompts asked for, the file has {len(prompts)}")
        return prompts[: self.num_prompts]

    def for_boots(self, *, verification: bool, prompts: str | None = None, refs: str | None = None) -> BenchProfile:
        """This profile as a promotion or verification boot measures it: one timed run of the public
        prompts and one of the held-out prompts (``heldout_prompts``, or ``prompts`` given) in the same
        boot, then PPL on the public references (promotion: the gate's own data) or on the held-out
        ones (verification: ``heldout_refs``, or ``refs`` given)."""
        overrides: dict[str, Any] = {"tps_repeats": 1, "stream_pass": False, "load_concurrency": (), "length_refs": ""}
        if prompts:
            overrides["heldout_prompts"] = prompts
        if refs:
            overrides["heldout_refs"] = refs
        if verification:
            overrides["refs"] = refs or self.heldout_refs
        return self.with_overrides(overrides, source="promotion and verification boots")

    def with_overrides(self, overrides: dict[str, Any], *, source: str) -> BenchProfile:
        known = {f.name: f.type for f in fields(self)}
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise StudySpecError(f"{source}: unknown profile field(s) {unknown}; valid: {sorted(known)}")
        return _validated(replace(self, **overrides), source=source)


def _validated(profile: BenchProfile, *, source: str) -> BenchProfile:
    for name in ("prompts", "refs", "heldout_prompts", "heldout_refs"):
        value = getattr(profile, name)
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise StudySpecError(f"{source}: profile field {name!r} must be a file path, got {value!r}")
    for name, low in (
        ("num_prompts", 1),
        ("output_len", 1),
        ("ppl_records", 1),
        ("warmup_requests", 0),
        ("warmup_output_len", 1),
        ("tps_repeats", 1),
        ("shuffle_seed", 0),
        ("length_records", 0),
    ):
        value = getattr(profile, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise StudySpecError(f"{source}: profile field {name!r} must be an integer >= {low}, got {value!r}")
    if not isinstance(profile.stream_pass, bool):
        raise StudySpecError(
            f"{source}: profile field 'stream_pass' must be true or false, got {profile.stream_pass!r}"
        )
    if not isinstance(profile.client_cpus, str) or not is_client_rule(profile.client_cpus):
        raise StudySpecError(
            f"{source}: profile field 'client_cpus' must be 'none', 'rest' or a CPU list such as '2-3', "
            f"got {profile.client_cpus!r}"
        )
    levels = profile.load_concurrency
    if not isinstance(levels, (list, tuple)) or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in levels
    ):
        raise StudySpecError(
            f"{source}: profile field 'load_concurrency' must be a list of integers >= 1 (requests in flight), got "
            f"{levels!r}"
        )
    profile = replace(profile, load_concurrency=tuple(levels))
    ends = profile.length_buckets
    if (
        not isinstance(ends, (list, tuple))
        or not ends
        or not all(isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in ends)
        or list(ends) != sorted(set(ends))
    ):
        raise StudySpecError(
            f"{source}: profile field 'length_buckets' must be a non-empty list of increasing integers >= 1 (the "
            f"context lengths, in tokens, where the buckets end), got {ends!r}"
        )
    profile = replace(profile, length_buckets=tuple(ends))
    if not isinstance(profile.length_refs, str) or "\x00" in profile.length_refs:
        raise StudySpecError(
            f"{source}: profile field 'length_refs' must be a file path or empty, got {profile.length_refs!r}"
        )
    for name in ("load_num_prompts", "load_output_len"):
        value = getattr(profile, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise StudySpecError(f"{source}: profile field {name!r} must be an integer >= 1, got {value!r}")
    if profile.load_prompts not in ("public", "long"):
        raise StudySpecError(
            f"{source}: profile field 'load_prompts' must be 'public' or 'long', got {profile.load_prompts!r}"
        )
    for name in ("warmup_pause_s", "boot_timeout_s", "request_timeout_s", "gpu_free_timeout_s", "load_request_rate"):
        value = getattr(profile, name)
        # NaN passes every comparison and inf overflows a socket timeout: both are refused.
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < math.inf:
            raise StudySpecError(f"{source}: profile field {name!r} must be a finite number >= 0, got {value!r}")
    return profile


def load_profiles(path: Path = PROFILES_FILE) -> dict[str, BenchProfile]:
    raw = load_toml(path, StudySpecError, what="profiles")
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
