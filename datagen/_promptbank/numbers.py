"""Number formatting and numeric distractors for computed questions."""

from __future__ import annotations

import math
import random


def fmt(x: float, digits: int = 3) -> str:
    """``digits`` significant figures; powers of ten written out for very large or small values."""
    if x == 0:
        return "0"
    exponent = math.floor(math.log10(abs(x)))
    if -3 <= exponent < 6:
        decimals = max(0, digits - 1 - exponent)
        return f"{x:,.{decimals}f}" if abs(x) >= 10000 else f"{x:.{decimals}f}"
    mantissa = x / 10**exponent
    return f"{mantissa:.{digits - 1}f} × 10^{exponent}"


FACTORS = (
    0.5,
    2.0,
    0.25,
    4.0,
    1 / math.sqrt(2),
    math.sqrt(2),
    0.1,
    10.0,
    1.5,
    2 / 3,
    math.pi,
    1 / math.pi,
    0.8,
    1.25,
    3.0,
    1 / 3,
)


def numeric_options(
    rng: random.Random,
    correct: float,
    count: int,
    *,
    unit: str = "",
    digits: int = 3,
    factors: tuple[float, ...] = FACTORS,
) -> tuple[list[str], int]:
    """``count`` distinct formatted options: the correct value and scaled distractors, shuffled."""
    suffix = f" {unit}" if unit else ""
    right = fmt(correct, digits) + suffix
    options = [right]
    pool = list(factors)
    rng.shuffle(pool)
    for factor in pool:
        text = fmt(correct * factor, digits) + suffix
        if text not in options:
            options.append(text)
        if len(options) == count:
            break
    step = 1.07
    while len(options) < count:  # tiny or degenerate values: walk outwards until distinct
        text = fmt(correct * step, digits) + suffix
        if text not in options:
            options.append(text)
        step *= 1.07
    rng.shuffle(options)
    return options, options.index(right)


def table_options(rng: random.Random, correct: str, pool: list[str], count: int) -> tuple[list[str], int]:
    others = sorted({p for p in pool if p != correct})
    options = [correct, *rng.sample(others, min(count - 1, len(others)))]
    rng.shuffle(options)
    return options, options.index(correct)
