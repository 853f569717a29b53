"""The command line of ``python -m sweep.transfer``, parsed once into a validated ``TransferArgs``."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from errors import UsageError

__all__ = ["DEFAULT_LEVELS", "DEFAULT_NUM_PROMPTS", "DEFAULT_TOP", "TransferArgs", "parse_args"]

DEFAULT_LEVELS = (1, 4, 16)
DEFAULT_TOP = 4
DEFAULT_NUM_PROMPTS = 16
DESCRIPTION = "does a study's front keep its order under serving load?"


@dataclass(frozen=True, kw_only=True)
class TransferArgs:
    study: str
    storage: str
    manifest: str | None
    levels: tuple[int, ...]
    long: bool
    num_prompts: int
    output_len: int | None  # None: the profile's
    slo_ttft_ms: float | None
    top: int
    out: Path | None  # None: runs/exports/<study>/transfer/
    dry_run: bool = False
    max_load_repeats: int | None = None  # None: no max-load search; else runs a level it decides over


def _levels(text: str) -> tuple[int, ...]:
    """``1,4,16`` -> (1, 4, 16), ascending; raises UsageError naming what is wrong."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--levels must be comma-separated concurrencies such as 1,4,16, got {text!r}") from None
    if any(v < 1 for v in values):
        raise UsageError(f"--levels: a concurrency is at least 1 request in flight, got {text!r}")
    if len(set(values)) != len(values):
        raise UsageError(f"--levels: each concurrency once, got {text!r}")
    return tuple(sorted(values))


def parse_args(argv: list[str] | None = None) -> TransferArgs:
    """The command line; argparse's own errors exit 2, a bad value raises UsageError (``main``: exit 2)."""
    from sweep.store import DEFAULT_STORAGE_URL

    parser = argparse.ArgumentParser(prog="python -m sweep.transfer", description=DESCRIPTION)
    parser.add_argument("--study", required=True, help="the study as sweep.run was given it (name or .toml path)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE_URL, help=f"database URL (default {DEFAULT_STORAGE_URL})")
    parser.add_argument("--manifest", help="the study's manifest, if sweep.run was given --manifest")
    parser.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)), help="concurrencies (default 1,4,16)")
    parser.add_argument(
        "--long",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one more level at concurrency 1 on long-context prompts (default on; --no-long skips it)",
    )
    parser.add_argument("--num-prompts", type=int, default=DEFAULT_NUM_PROMPTS, help="requests a level (default 16)")
    parser.add_argument("--output-len", type=int, help="tokens a request (default: the profile's output_len)")
    parser.add_argument("--slo-ttft-ms", type=float, help="a TTFT bound in ms: each level's goodput under it")
    parser.add_argument("--top", type=int, default=DEFAULT_TOP, help="front points, fastest first (default 4)")
    parser.add_argument("--out", type=Path, help="output folder (default runs/exports/<study>/transfer/)")
    parser.add_argument(
        "--max-load",
        type=int,
        metavar="REPEATS",
        help="after the levels, on the same boot: the highest of --levels the point holds under the SLO, each level "
        "decided over REPEATS runs (at least 2; needs --slo-ttft-ms)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be booted and on what; boot nothing, write nothing"
    )
    ns = parser.parse_args(argv)
    levels = _levels(ns.levels)
    if ns.num_prompts < max(levels):
        raise UsageError(
            f"--num-prompts {ns.num_prompts} never puts {max(levels)} requests in flight: give at least {max(levels)}"
        )
    if ns.output_len is not None and ns.output_len < 1:
        raise UsageError(f"--output-len must be at least 1, got {ns.output_len}")
    if ns.top < 1:
        raise UsageError(f"--top must be at least 1, got {ns.top}")
    if ns.slo_ttft_ms is not None and not 0 < ns.slo_ttft_ms < math.inf:
        raise UsageError(f"--slo-ttft-ms must be a positive number of milliseconds, got {ns.slo_ttft_ms}")
    if ns.max_load is not None and (ns.max_load < 2 or ns.slo_ttft_ms is None):
        raise UsageError(f"--max-load needs --slo-ttft-ms and at least 2 runs a level, got {ns.max_load}")
    return TransferArgs(
        study=ns.study,
        storage=ns.storage,
        manifest=ns.manifest,
        levels=levels,
        long=ns.long,
        num_prompts=ns.num_prompts,
        output_len=ns.output_len,
        slo_ttft_ms=ns.slo_ttft_ms,
        top=ns.top,
        out=ns.out,
        dry_run=ns.dry_run,
        max_load_repeats=ns.max_load,
    )
