"""Hypothesis strategies for hostile input: wrong types, huge and non-integer numbers, unicode,
shell and placeholder injection, deep nesting, damaged files."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = [
    "DIGIT_STRINGS",
    "INJECTIONS",
    "damaged",
    "deep_json",
    "fuzz_settings",
    "json_values",
    "nasty_text",
    "numbers",
    "toml_text",
]


def fuzz_settings(examples: int) -> settings:
    """Bounded for CI; ``GEMMA_FUZZ_SCALE=20`` multiplies the examples for a long local run."""
    scale = float(os.environ.get("GEMMA_FUZZ_SCALE", "1"))
    return settings(
        max_examples=max(1, int(examples * scale)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# Text a shell, a template engine or a path joiner would treat specially. ``{reference_checkpoint}``
# is left out on purpose: a manifest that names it prepares the real model (slow, not a parser).
INJECTIONS = [
    "$(touch pwned)",
    "`id`",
    "; rm -rf /",
    "&& curl evil",
    "| nc -l 1",
    "\x00",
    "a\x00b",
    "\n",
    "\r\n",
    "{port}",
    "{host}",
    "{python}",
    "{repo}",
    "{workdir}",
    "{tmpdir}",
    "{bogus}",
    "{__class__}",
    "{0}",
    "{{}}",
    "{",
    "}",
    "%s%n",
    "../../etc/passwd",
    "/etc/passwd",
    "' OR 1=1 --",
    "<script>x</script>",
    "${HOME}",
    "-Xfoo",
    "--help",
    "=",
    "A=B",
    "",
]
UNICODE = ["é", "日本語", "\u202e", "\u00a0", "\ufeff", "🙂", "İ", "\u0000", "Ω", "\t", "\ud800", "\udcff"]
# Strings that look like numbers to someone: huge, signed, spaced, float, hex, other scripts' digits.
DIGIT_STRINGS = [
    "9" * 5000,
    "1" + "0" * 30,
    "-0",
    "+7",
    " 32 ",
    "32.0",
    "1e3",
    "0x20",
    "0b1",
    "٣٢",
    "３２",
    "NaN",
    "inf",
    "-1",
    "0",
    "2048",
    "2049",
    "65536",
    "",
]

nasty_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(INJECTIONS + UNICODE + DIGIT_STRINGS),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8),
)
numbers = st.one_of(
    st.integers(-3, 70),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2047, 2048, 2049, 65535, 65536, 131072, 131073, 2**31, 2**63, 2**64, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 1.0, 32.0, -0.0, 1e308, float("nan"), float("inf")]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, nasty_text)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(nasty_text, children, max_size=3),
    max_leaves=8,
)


def deep_json(depth: int) -> str:
    """``[[[...]]]``: valid JSON that a recursive parser cannot follow."""
    return "[" * depth + "]" * depth


def damaged(text: str) -> st.SearchStrategy[bytes]:
    """A file that was meant to hold ``text``: cut short, with bytes that are not UTF-8, emptied,
    or replaced by nesting too deep to parse."""
    data = text.encode()
    return st.one_of(
        st.integers(0, max(len(data) - 1, 0)).map(lambda cut: data[:cut]),
        st.tuples(st.integers(0, len(data)), st.binary(min_size=1, max_size=4).map(lambda b: b"\xff" + b)).map(
            lambda t: data[: t[0]] + t[1] + data[t[0] :]
        ),
        st.sampled_from([b"", b"\x00" * 8, "é".encode("latin-1"), b"\xef\xbb\xbf" + data]),
        st.sampled_from([200, 5_000, 100_000]).map(lambda n: deep_json(n).encode()),
    )


# --- TOML text for study files: hypothesis values written the way a person would write them ----


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string; a lone surrogate makes it invalid TOML
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items() if v is not None) + "}"
        )
    raise TypeError(type(value))


def toml_text(doc: dict[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """A TOML document: scalars first, then one ``[table]`` per dict value (TOML has no null:
    None values are left out, as a person would leave the line out)."""
    lines = []
    if prefix:
        lines.append("[" + ".".join(json.dumps(str(p)) for p in prefix) + "]")
    lines += [
        f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in doc.items() if v is not None and not isinstance(v, dict)
    ]
    for key, value in doc.items():
        if isinstance(value, dict):
            lines.append(toml_text(value, (*prefix, str(key))))
    return "\n".join(lines) + "\n"
