"""The reference server's configuration: parsed once from argv + environment, validated here.

Environment variables are named as in the challenge manifests (see docs of ``serve``). Every
problem raises ``ConfigError`` with a one-line message naming the variable and what is allowed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engine.config import KNOBS
from errors import ConfigError

# What the reference manifests' `stack` field says: the knobs' limits for this server are the
# registry's (studies/knobs.toml), so a study is refused at parse what this server would refuse.
STACK = "reference"
SPEC_TOKENS_RANGE = KNOBS["num_speculative_tokens"].for_stack(STACK).bounds
TOP_K_RANGE = KNOBS["centroid_top_k"].for_stack(STACK).bounds
NUM_LAYERS = 18
MAX_POSITIONS = 32768
MAX_LOGPROBS = 20  # as vLLM's default max_logprobs

_SPEC_KEYS = {
    "draft": {"method", "num_speculative_tokens", "draft_layers"},
    "ngram": {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"},
}


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    method: Literal["draft", "ngram"]
    num_speculative_tokens: int
    draft_layers: int | None = None  # draft: lower layers the drafter runs; None = all
    prompt_lookup_min: int = 1  # ngram: shortest suffix to match
    prompt_lookup_max: int = 1  # ngram: longest suffix to match


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    device: str = "auto"
    served_model_name: str = "gemma-3-270m"
    sliding_window: int | None = None  # None: the model's own (512)
    spec: SpecConfig | None = None
    centroid_top_k: int = 32
    max_model_len: int = MAX_POSITIONS
    warmup_num_prompts: int = 0
    warmup_max_tokens: int = 1


def _int(name: str, raw: Any, *, low: int, high: int | None = None) -> int:
    value = raw
    if isinstance(raw, str):
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}={raw!r} is not an integer")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"between {low} and {high}"
        raise ConfigError(f"{name}={value} is out of range: must be {allowed}")
    return value


def _json_object(name: str, raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} is not valid JSON ({exc.msg} at char {exc.pos}): {raw!r}") from None
    except (ValueError, RecursionError) as exc:  # a number too long for int(), nesting too deep
        raise ConfigError(f"{name} is not valid JSON ({type(exc).__name__}: {str(exc)[:100]})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object, got {raw!r}")
    return value


def _window(env: Mapping[str, str]) -> int | None:
    if raw := env.get("HF_OVERRIDES", "").strip():
        overrides = _json_object("HF_OVERRIDES", raw)
        text = overrides.pop("text_config", {})
        if not isinstance(text, dict):
            raise ConfigError("HF_OVERRIDES.text_config must be a JSON object")
        unknown = sorted(set(overrides) - {"sliding_window"}) + sorted(
            f"text_config.{k}" for k in set(text) - {"sliding_window"}
        )
        if unknown:
            raise ConfigError(
                f"HF_OVERRIDES sets {', '.join(unknown)}: the reference stack only honours "
                "sliding_window (top level or under text_config)"
            )
        for key, value in (
            ("HF_OVERRIDES.text_config.sliding_window", text.get("sliding_window")),
            ("HF_OVERRIDES.sliding_window", overrides.get("sliding_window")),
        ):
            if value is not None:
                return _int(key, value, low=1)
    if raw := env.get("SLIDING_WINDOW", "").strip():
        return _int("SLIDING_WINDOW", raw, low=1)
    return None


def _spec(raw: str) -> SpecConfig | None:
    if not raw.strip():
        return None
    spec = _json_object("SPECULATIVE_CONFIG", raw)
    method = spec.get("method")
    if not isinstance(method, str) or method not in _SPEC_KEYS:  # a list or object is unhashable
        raise ConfigError(f"SPECULATIVE_CONFIG.method={method!r} is not supported: use 'draft' or 'ngram'")
    unknown = sorted(set(spec) - _SPEC_KEYS[method])
    if unknown:
        raise ConfigError(
            f"SPECULATIVE_CONFIG has unknown keys for method {method!r}: {', '.join(unknown)} "
            f"(allowed: {', '.join(sorted(_SPEC_KEYS[method]))})"
        )
    if "num_speculative_tokens" not in spec:
        raise ConfigError("SPECULATIVE_CONFIG.num_speculative_tokens is required")
    low, high = SPEC_TOKENS_RANGE
    k = _int("SPECULATIVE_CONFIG.num_speculative_tokens", spec["num_speculative_tokens"], low=low, high=high)
    if method == "draft":
        layers = spec.get("draft_layers")
        layers = None if layers is None else _int("SPECULATIVE_CONFIG.draft_layers", layers, low=1, high=NUM_LAYERS)
        return SpecConfig(method="draft", num_speculative_tokens=k, draft_layers=layers)
    # vLLM's defaults: neither given -> 5/5; one given -> the other equals it.
    lo, hi = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
    lo, hi = (5, 5) if lo is None and hi is None else (lo if lo is not None else hi, hi if hi is not None else lo)
    lo = _int("SPECULATIVE_CONFIG.prompt_lookup_min", lo, low=1)
    hi = _int("SPECULATIVE_CONFIG.prompt_lookup_max", hi, low=1)
    if lo > hi:
        raise ConfigError(f"SPECULATIVE_CONFIG.prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
    return SpecConfig(method="ngram", num_speculative_tokens=k, prompt_lookup_min=lo, prompt_lookup_max=hi)


def _optional_int(env: Mapping[str, str], name: str, default: int, *, low: int, high: int | None = None) -> int:
    raw = env.get(name, "").strip()
    return _int(name, raw, low=low, high=high) if raw else default


def parse_config(argv: Sequence[str], env: Mapping[str, str]) -> ServeConfig:
    parser = argparse.ArgumentParser(prog="python -m engine.reference.serve", description="The reference Gemma server.")
    parser.add_argument("--host", default=env.get("HOST") or "127.0.0.1")
    parser.add_argument("--port", default=env.get("PORT") or "8000")
    parser.add_argument("--device", default=env.get("REFERENCE_DEVICE") or "auto", help="auto | cpu | cuda | cuda:N")
    args = parser.parse_args(list(argv))
    max_len = _optional_int(env, "MAX_MODEL_LEN", MAX_POSITIONS, low=2, high=MAX_POSITIONS)
    top_k_low, top_k_high = TOP_K_RANGE
    return ServeConfig(
        host=args.host,
        port=_int("--port/PORT", args.port, low=1, high=65535),
        device=args.device,
        served_model_name=env.get("SERVED_MODEL_NAME", "").strip() or "gemma-3-270m",
        sliding_window=_window(env),
        spec=_spec(env.get("SPECULATIVE_CONFIG", "")),
        centroid_top_k=_optional_int(env, "CENTROID_TOP_K", 32, low=top_k_low, high=top_k_high),
        max_model_len=max_len,
        warmup_num_prompts=_optional_int(env, "WARMUP_NUM_PROMPTS", 0, low=0),
        warmup_max_tokens=_optional_int(env, "WARMUP_MAX_TOKENS", 1, low=1),
    )
