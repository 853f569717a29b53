"""HTTP calls to a stack, every failure turned into a ``BenchmarkError`` that says what failed."""

from __future__ import annotations

from typing import Any

import httpx

from errors import BenchmarkError

__all__ = ["first_choice", "post_json"]


def post_json(client: httpx.Client, path: str, payload: dict[str, Any], *, what: str) -> dict[str, Any]:
    """POST ``payload``; return the JSON object the stack answered with."""
    try:
        response = client.post(path, json=payload)
    except httpx.TimeoutException:
        raise BenchmarkError(f"{what}: POST {path} timed out after {client.timeout.read} s") from None
    except httpx.HTTPError as exc:
        raise BenchmarkError(f"{what}: POST {path} failed ({type(exc).__name__}: {exc})") from None
    if response.status_code != 200:
        raise BenchmarkError(f"{what}: POST {path} answered HTTP {response.status_code}: {response.text[:300]}")
    try:
        data = response.json()
    except (ValueError, RecursionError):  # JSONDecodeError, a huge number, nesting too deep
        raise BenchmarkError(f"{what}: POST {path} answered malformed JSON: {response.text[:200]!r}") from None
    if not isinstance(data, dict):
        raise BenchmarkError(f"{what}: POST {path} answered {type(data).__name__}, not a JSON object")
    return data


def first_choice(data: dict[str, Any], *, what: str) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BenchmarkError(f"{what}: response has no 'choices[0]' object: {str(data)[:200]}")
    return choices[0]
