"""How many distinct inputs the fuzz tests tried, per target (printed at the end of the session).

Hypothesis may repeat an input (replays, shrinking); each test records every input it is given
and the summary counts distinct ones, by a digest of their ``repr``.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

__all__ = ["record", "summary"]

_SEEN: dict[str, set[bytes]] = defaultdict(set)


def record(target: str, value: object) -> None:
    _SEEN[target].add(hashlib.sha256(repr(value).encode("utf-8", "surrogatepass")).digest())


def summary() -> dict[str, int]:
    return {target: len(seen) for target, seen in sorted(_SEEN.items())}
