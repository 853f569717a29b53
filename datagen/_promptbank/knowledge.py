"""Knowledge questions in the style of MMLU-Pro: ten options, many subjects."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from datagen._promptbank import facts
from datagen._promptbank.numbers import numeric_options, table_options

Question = tuple[str, str, list[str], int]  # subject, stem, options, index of the right one
N = 10


def _from_table(subject: str, table: list[tuple[str, str]], stem: Callable[[str], str]):
    answers = [answer for _, answer in table]

    def make(rng: random.Random) -> Question:
        key, answer = rng.choice(table)
        options, right = table_options(rng, answer, answers, N)
        return subject, stem(key), options, right

    return make


def events(rng: random.Random) -> Question:
    stem, year = rng.choice(facts.EVENTS)
    offsets = rng.sample([d for d in range(-60, 61) if d], N - 1)
    options = [str(year), *(str(year + d) for d in offsets)]
    rng.shuffle(options)
    return "history", stem, options, options.index(str(year))


def elasticity(rng: random.Random) -> Question:
    p1 = rng.choice([2, 4, 5, 8, 10, 12, 20, 25])
    p2 = p1 + rng.choice([1, 2, 3, 5])
    q1 = rng.choice([100, 120, 200, 240, 300, 500, 800])
    q2 = q1 - rng.choice([10, 20, 30, 40, 60, 80])
    e = ((q1 - q2) / ((q1 + q2) / 2)) / ((p2 - p1) / ((p1 + p2) / 2))
    options, right = numeric_options(rng, e, N, digits=2)
    stem = (
        f"When the price of a good rises from ${p1} to ${p2}, the quantity demanded falls from {q1} "
        f"to {q2} units per week. Using the midpoint (arc) method, what is the absolute value of the "
        f"price elasticity of demand?"
    )
    return "economics", stem, options, right


def present_value(rng: random.Random) -> Question:
    amount = rng.choice([1000, 2500, 5000, 10000, 20000, 50000])
    years = rng.randint(2, 15)
    rate = rng.choice([3, 4, 5, 6, 7, 8, 10, 12])
    pv = amount / (1 + rate / 100) ** years
    options, right = numeric_options(
        rng,
        pv,
        N,
        digits=4,
        factors=(
            (1 + rate / 100),
            1 / (1 + rate / 100),
            1 / (1 + rate / 100) ** 2,
            0.9,
            1.1,
            0.85,
            1.15,
            (1 + rate / 100) ** 2,
            0.95,
            1.05,
            0.75,
        ),
    )
    stem = (
        f"What is the present value of ${amount:,} to be received in {years} years if the annual "
        f"discount rate is {rate}%, compounded annually? (Options in dollars.)"
    )
    return "business", stem, options, right


def current_ratio(rng: random.Random) -> Question:
    assets = rng.randrange(200, 2000, 10)
    liabilities = rng.randrange(100, 1500, 10)
    inventory = rng.randrange(20, assets // 2, 10)
    quick = rng.random() < 0.5
    value = (assets - inventory) / liabilities if quick else assets / liabilities
    name = "quick (acid-test) ratio" if quick else "current ratio"
    options, right = numeric_options(rng, value, N, digits=3)
    stem = (
        f"A company reports current assets of ${assets}k, of which inventory is ${inventory}k, and "
        f"current liabilities of ${liabilities}k. What is its {name}?"
    )
    return "business", stem, options, right


def break_even(rng: random.Random) -> Question:
    price = rng.choice([12, 15, 20, 25, 40, 60])
    variable = rng.choice([4, 6, 8, 9, 10]) if price < 25 else rng.choice([10, 15, 22, 30])
    fixed = rng.randrange(20000, 400000, 5000)
    q = fixed / (price - variable)
    options, right = numeric_options(rng, q, N, digits=4)
    stem = (
        f"A firm sells a product at ${price} per unit with a variable cost of ${variable} per unit "
        f"and fixed costs of ${fixed:,} per year. How many units must it sell per year to break even?"
    )
    return "business", stem, options, right


def money_multiplier(rng: random.Random) -> Question:
    ratio = rng.choice([2, 4, 5, 8, 10, 12.5, 20, 25])
    deposit = rng.choice([100, 500, 1000, 2000, 5000])
    created = deposit * (100 / ratio)
    options, right = numeric_options(
        rng,
        created,
        N,
        digits=3,
        factors=(1 - ratio / 100, ratio / 100, 0.5, 2.0, 0.25, 1.5, 0.75, 4.0, 0.1, 3.0, 1.25),
    )
    stem = (
        f"The required reserve ratio is {ratio}% and banks hold no excess reserves. If a new deposit "
        f"of ${deposit} enters the banking system, what is the maximum total amount of deposits "
        f"that can eventually be created (including the original deposit), by the simple money "
        f"multiplier?"
    )
    return "economics", stem, options, right


def gdp_deflator(rng: random.Random) -> Question:
    real = rng.randrange(800, 3000, 25)
    nominal = round(real * rng.uniform(0.9, 1.4) / 5) * 5
    value = 100 * nominal / real
    options, right = numeric_options(rng, value, N, digits=4)
    stem = (
        f"In a given year an economy's nominal GDP is ${nominal} billion and its real GDP, in "
        f"base-year prices, is ${real} billion. What is the GDP deflator for that year?"
    )
    return "economics", stem, options, right


def base_conversion(rng: random.Random) -> Question:
    value = rng.randrange(100, 4096)
    kind = rng.choice(["binary", "hexadecimal", "octal"])
    written = {"binary": f"{value:b}", "hexadecimal": f"{value:X}", "octal": f"{value:o}"}[kind]
    wrong = sorted({value + d for d in (-16, -8, -2, -1, 1, 2, 8, 16, 32, 64, -32, 128) if 0 < value + d})
    options = [str(value), *(str(w) for w in rng.sample(wrong, N - 1))]
    rng.shuffle(options)
    stem = f"What is the decimal value of the {kind} number {written}?"
    return "computer science", stem, options, options.index(str(value))


def twos_complement(rng: random.Random) -> Question:
    bits = rng.choice([8, 12, 16])
    value = -rng.randrange(1, 2 ** (bits - 1))
    right = format(value & (2**bits - 1), f"0{bits}b")
    candidates = {
        format(abs(value), f"0{bits}b"),
        format((~abs(value)) & (2**bits - 1), f"0{bits}b"),
        format((value - 1) & (2**bits - 1), f"0{bits}b"),
        format((value + 1) & (2**bits - 1), f"0{bits}b"),
    }
    while len(candidates) < N + 2:
        candidates.add(format(rng.randrange(2**bits), f"0{bits}b"))
    wrong = sorted(candidates - {right})
    options = [right, *rng.sample(wrong, N - 1)]
    rng.shuffle(options)
    stem = f"Which bit pattern represents the integer {value} in {bits}-bit two's complement?"
    return "computer science", stem, options, options.index(right)


def resistor_network(rng: random.Random) -> Question:
    r1, r2, r3 = (rng.choice([10, 22, 33, 47, 68, 100, 150, 220, 330, 470]) for _ in range(3))
    volts = rng.choice([5, 9, 12, 24, 48])
    total = r1 + (r2 * r3) / (r2 + r3)
    power = volts**2 / total
    options, right = numeric_options(rng, power * 1000, N, unit="mW", digits=3)
    stem = (
        f"A {volts} V ideal source drives a {r1} Ω resistor in series with the parallel combination "
        f"of {r2} Ω and {r3} Ω resistors. What total power does the source deliver?"
    )
    return "engineering", stem, options, right


def axial_stress(rng: random.Random) -> Question:
    diameter = rng.choice([8, 10, 12, 16, 20, 25, 30])
    load = rng.choice([5, 10, 15, 20, 30, 40, 60])
    area = math.pi * diameter**2 / 4
    stress = load * 1000 / area
    options, right = numeric_options(rng, stress, N, unit="MPa", digits=3)
    stem = (
        f"A solid circular steel rod of diameter {diameter} mm carries an axial tensile load of "
        f"{load} kN. What is the normal stress in the rod?"
    )
    return "engineering", stem, options, right


def rc_time(rng: random.Random) -> Question:
    r = rng.choice([1, 2.2, 4.7, 10, 22, 47, 100])
    c = rng.choice([1, 4.7, 10, 22, 47, 100, 220])
    fraction = rng.choice([50, 63.2, 90, 95, 99])
    t = -r * 1000 * c * 1e-6 * math.log(1 - fraction / 100)
    options, right = numeric_options(rng, t * 1000, N, unit="ms", digits=3)
    stem = (
        f"A {c} µF capacitor, initially uncharged, is charged through a {r} kΩ resistor from a DC "
        f"source. How long does it take to reach {fraction}% of the source voltage?"
    )
    return "engineering", stem, options, right


TEMPLATES: list[Callable[[random.Random], Question]] = [
    _from_table("geography", facts.CAPITALS, lambda c: f"What is the capital city of {c}?"),
    events,
    _from_table("philosophy and literature", facts.WORKS, lambda w: f"Who wrote '{w}'?"),
    _from_table("psychology", facts.PSYCHOLOGISTS, lambda x: f"Which psychologist is best known for {x}?"),
    _from_table("philosophy", facts.PHILOSOPHERS, lambda x: f"Which philosopher is most closely associated with {x}?"),
    _from_table("law", facts.COURT_CASES, lambda x: f"Which decision of the U.S. Supreme Court {x}?"),
    _from_table("health", facts.HORMONES, lambda h: f"In humans, which organ or tissue is the main source of {h}?"),
    _from_table(
        "health", facts.DEFICIENCIES, lambda d: f"A dietary deficiency of which nutrient classically causes {d}?"
    ),
    _from_table("computer science", facts.COMPLEXITIES, lambda a: f"What is the worst-case running time of {a}?"),
    _from_table("economics", facts.ECON_TERMS, lambda d: f"Which economic term describes {d}?"),
    elasticity,
    present_value,
    current_ratio,
    break_even,
    money_multiplier,
    gdp_deflator,
    base_conversion,
    twos_complement,
    resistor_network,
    axial_stress,
    rc_time,
]

LETTERS = "ABCDEFGHIJ"


def render(subject: str, stem: str, options: list[str]) -> str:
    lines = "\n".join(f"{LETTERS[i]}. {text}" for i, text in enumerate(options))
    return (
        f"The following is a multiple-choice question about {subject}. Think it through step by "
        f"step, then finish with a line of the form 'Answer: X', where X is the letter of the "
        f"correct option.\n\nQuestion: {stem}\nOptions:\n{lines}"
    )
