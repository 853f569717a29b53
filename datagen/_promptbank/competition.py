"""Competition mathematics in the style of AIME: integer answers from 0 to 999, computed here."""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction
from math import comb, gcd

Problem = tuple[str, int]  # statement, answer


def divisible_count(rng: random.Random) -> Problem:
    n = rng.randrange(600, 2000)
    a, b, c = rng.sample([3, 4, 5, 6, 7, 9, 11, 13], 3)
    answer = sum(1 for k in range(1, n + 1) if (k % a == 0 or k % b == 0) and k % c != 0)
    return (
        f"Find the number of positive integers $n \\le {n}$ such that $n$ is divisible by {a} or by {b} "
        f"but not by {c}.",
        answer,
    )


def power_mod(rng: random.Random) -> Problem:
    base = rng.randrange(3, 40)
    exponent = rng.randrange(100, 5000)
    modulus = rng.choice([1000, 997, 625, 343, 999])
    return (f"Find the remainder when ${base}^{{{exponent}}}$ is divided by {modulus}.", pow(base, exponent, modulus))


def divisor_sum(rng: random.Random) -> Problem:
    n = rng.choice(
        [
            2**a * 3**b * 5**c * 7**d
            for a in range(1, 6)
            for b in range(0, 4)
            for c in range(0, 3)
            for d in range(0, 2)
            if 500 < 2**a * 3**b * 5**c * 7**d < 100000
        ]
    )
    total = sum(d for d in range(1, n + 1) if n % d == 0)
    return (
        f"Let $S$ be the sum of all positive divisors of ${n}$. Find the remainder when $S$ is divided by 1000.",
        total % 1000,
    )


def linear_pairs(rng: random.Random) -> Problem:
    a, b = rng.sample([2, 3, 5, 7, 11, 13], 2)
    n = rng.randrange(200, 3000)
    answer = sum(1 for x in range(1, n // a + 1) if (n - a * x) > 0 and (n - a * x) % b == 0)
    return (f"Find the number of ordered pairs $(x, y)$ of positive integers satisfying ${a}x + {b}y = {n}$.", answer)


def recurrence(rng: random.Random) -> Problem:
    a1, a2 = rng.randrange(1, 10), rng.randrange(1, 10)
    p, q = rng.choice([(1, 1), (2, 1), (1, 2), (3, 1), (1, 3), (2, 3)])
    k = rng.randrange(50, 400)
    x, y = a1, a2
    for _ in range(k - 2):
        x, y = y, (p * y + q * x) % 1000
    return (
        f"A sequence is defined by $a_1 = {a1}$, $a_2 = {a2}$, and $a_{{n+2}} = {p if p > 1 else ''}a_{{n+1}} + "
        f"{q if q > 1 else ''}a_n$ for $n \\ge 1$. Find the remainder when $a_{{{k}}}$ is divided by 1000.",
        y,
    )


def subset_sums(rng: random.Random) -> Problem:
    n = rng.randrange(10, 20)
    m = rng.choice([3, 4, 5, 6, 7])
    counts = [1] + [0] * (m - 1)
    for value in range(1, n + 1):
        counts = [counts[r] + counts[(r - value) % m] for r in range(m)]
    return (
        f"How many subsets of $\\{{1, 2, \\ldots, {n}\\}}$ (including the empty set) have a sum of elements "
        f"divisible by {m}? Give the remainder when this number is divided by 1000.",
        counts[0] % 1000,
    )


def lattice_disk(rng: random.Random) -> Problem:
    r = rng.randrange(6, 17)
    r2 = r * r + rng.randrange(0, r)
    answer = sum(1 for x in range(-r - 1, r + 2) for y in range(-r - 1, r + 2) if x * x + y * y <= r2)
    return (f"How many points $(x, y)$ with integer coordinates satisfy $x^2 + y^2 \\le {r2}$?", answer)


def digit_sums(rng: random.Random) -> Problem:
    n = rng.choice([1000, 2000, 5000, 10000])
    s = rng.randrange(8, 20)
    answer = sum(1 for k in range(1, n) if sum(map(int, str(k))) == s)
    return (f"How many positive integers less than {n} have digits that sum to {s}?", answer)


def factorial_power(rng: random.Random) -> Problem:
    p = rng.choice([2, 3, 5, 7])
    n = rng.randrange(200, 2500)
    total, q = 0, p
    while q <= n:
        total += n // q
        q *= p
    return (f"Find the largest integer $k$ such that ${p}^k$ divides ${n}!$, and give $k$ modulo 1000.", total % 1000)


def stars_and_bars(rng: random.Random) -> Problem:
    boxes = rng.randrange(3, 7)
    minimum = rng.randrange(1, 4)
    balls = boxes * minimum + rng.randrange(5, 25)
    answer = comb(balls - boxes * minimum + boxes - 1, boxes - 1)
    return (
        f"In how many ways can {balls} identical balls be placed into {boxes} distinguishable boxes so that "
        f"every box receives at least {minimum} balls? Give the remainder when this number is divided by "
        f"1000.",
        answer % 1000,
    )


def vieta(rng: random.Random) -> Problem:
    while True:
        roots = [rng.randrange(-9, 15) for _ in range(3)]
        a = sum(roots)
        b = roots[0] * roots[1] + roots[1] * roots[2] + roots[0] * roots[2]
        c = roots[0] * roots[1] * roots[2]
        value = a * a - 2 * b
        if 0 < value < 1000 and b != 0 and c != 0:
            break

    def term(coef: int, power: str) -> str:
        sign = "-" if coef < 0 else "+"
        return f" {sign} {abs(coef)}{power}"

    poly = f"x^3{term(-a, 'x^2')}{term(b, 'x')}{term(-c, '')}"
    return (f"Let $r$, $s$, and $t$ be the roots of ${poly}$. Find $r^2 + s^2 + t^2$.", value)


def same_colour(rng: random.Random) -> Problem:
    red, blue = rng.randrange(3, 20), rng.randrange(3, 20)
    draws = rng.choice([2, 3])
    total = red + blue
    p = Fraction(comb(red, draws) + comb(blue, draws), comb(total, draws))
    return (
        f"A bag contains {red} red marbles and {blue} blue marbles. {draws} marbles are drawn at random "
        f"without replacement. The probability that all of them have the same colour is $m/n$, where $m$ "
        f"and $n$ are relatively prime positive integers. Find $m + n$ modulo 1000.",
        (p.numerator + p.denominator) % 1000,
    )


def coprime_count(rng: random.Random) -> Problem:
    n = rng.randrange(500, 3000)
    k = rng.choice([6, 10, 12, 14, 15, 21, 30])
    answer = sum(1 for x in range(1, n + 1) if gcd(x, k) == 1)
    return (
        f"How many integers $x$ with $1 \\le x \\le {n}$ satisfy $\\gcd(x, {k}) = 1$? Give the answer modulo 1000.",
        answer % 1000,
    )


TEMPLATES: list[Callable[[random.Random], Problem]] = [
    divisible_count,
    power_mod,
    divisor_sum,
    linear_pairs,
    recurrence,
    subset_sums,
    lattice_disk,
    digit_sums,
    factorial_power,
    stars_and_bars,
    vieta,
    same_colour,
    coprime_count,
]


def render(statement: str) -> str:
    return (
        f"Solve the following competition problem. Reason step by step, and put the final answer, an "
        f"integer from 0 to 999, on the last line in the form 'Answer: N'.\n\nProblem: {statement}"
    )
