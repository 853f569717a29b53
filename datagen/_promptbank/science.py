"""Graduate-level science questions in the style of GPQA: four options, computed answers."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from datagen._promptbank import facts
from datagen._promptbank.numbers import fmt, numeric_options, table_options

Question = tuple[str, str, list[str], int]
N = 4

H = 6.62607015e-34
ME = 9.1093837015e-31
E = 1.602176634e-19
C = 2.99792458e8
KB = 1.380649e-23
R = 8.314462618
FARADAY = 96485.33212
AMU = 1.66053906660e-27
RH = 1.09677583e7  # Rydberg constant for hydrogen, m^-1


def _fixed(
    rng: random.Random, right: float, wrong: list[float], *, decimals: int, unit: str = ""
) -> tuple[list[str], int]:
    suffix = f" {unit}" if unit else ""
    correct = f"{right:.{decimals}f}{suffix}"
    options = [correct]
    for w in wrong:
        text = f"{w:.{decimals}f}{suffix}"
        if text not in options:
            options.append(text)
    step = 1
    while len(options) < N:
        text = f"{right + step * 10**-decimals * 7:.{decimals}f}{suffix}"
        if text not in options:
            options.append(text)
        step += 1
    options = options[:N]
    rng.shuffle(options)
    return options, options.index(correct)


def square_well(rng: random.Random) -> Question:
    width = rng.choice([0.3, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0])
    hi = rng.randint(2, 5)
    lo = rng.randint(1, hi - 1)
    unit_e = H**2 / (8 * ME * (width * 1e-9) ** 2) / E
    value = unit_e * (hi**2 - lo**2)
    options, right = numeric_options(
        rng,
        value,
        N,
        unit="eV",
        factors=(hi**2 / (hi**2 - lo**2), 2.0, 0.5, (hi - lo) ** 2 / (hi**2 - lo**2), 4.0, 1 / (hi**2 - lo**2)),
    )
    stem = (
        f"An electron is confined to a one-dimensional infinite square well of width {width} nm. "
        f"What is the energy of the photon emitted when it drops from the n = {hi} to the n = {lo} level?"
    )
    return "quantum mechanics", stem, options, right


def hydrogen_line(rng: random.Random) -> Question:
    lo = rng.randint(1, 4)
    hi = rng.randint(lo + 1, lo + 4)
    inverse = RH * (1 / lo**2 - 1 / hi**2)
    value = 1e9 / inverse
    options, right = numeric_options(
        rng,
        value,
        N,
        unit="nm",
        factors=((1 / lo**2 - 1 / hi**2) / (1 / lo**2), 0.5, 2.0, (1 / lo**2 - 1 / hi**2) / (1 / lo - 1 / hi), 4 / 3),
    )
    stem = (
        f"What is the vacuum wavelength of the photon emitted when a hydrogen atom makes a "
        f"transition from n = {hi} to n = {lo}?"
    )
    return "atomic physics", stem, options, right


def muon_range(rng: random.Random) -> Question:
    beta = rng.choice([0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999])
    gamma = 1 / math.sqrt(1 - beta**2)
    tau = 2.197e-6
    distance = gamma * beta * C * tau
    options, right = numeric_options(rng, distance, N, unit="m", factors=(1 / gamma, gamma, 1 / beta, 1 / gamma**2))
    stem = (
        f"Muons have a proper mean lifetime of 2.197 µs. A beam of muons moves at {beta}c through "
        f"the laboratory. What mean distance does a muon travel in the laboratory frame before decaying?"
    )
    return "special relativity", stem, options, right


ACIDS = [
    ("acetic acid", "sodium acetate", 4.76),
    ("formic acid", "sodium formate", 3.75),
    ("hypochlorous acid", "sodium hypochlorite", 7.53),
    ("benzoic acid", "sodium benzoate", 4.20),
    ("sodium dihydrogen phosphate", "disodium hydrogen phosphate", 7.21),
    ("ammonium chloride", "ammonia", 9.25),
    ("lactic acid", "sodium lactate", 3.86),
]


def buffer_ph(rng: random.Random) -> Question:
    acid, base, pka = rng.choice(ACIDS)
    ca = rng.choice([0.05, 0.10, 0.15, 0.20, 0.25, 0.40, 0.50])
    cb = rng.choice([0.05, 0.10, 0.15, 0.20, 0.30, 0.50, 0.75])
    ph = pka + math.log10(cb / ca)
    options, right = _fixed(rng, ph, [pka - math.log10(cb / ca), pka, ph + 1, pka + cb / ca - 1], decimals=2)
    stem = (
        f"A buffer is prepared so that it contains {ca:.2f} M {acid} and {cb:.2f} M {base} "
        f"(pKa = {pka:.2f} at 25 °C). Neglecting activity effects, what is its pH?"
    )
    return "chemistry", stem, options, right


def nernst_cell(rng: random.Random) -> Question:
    zn = rng.choice([0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 2.0])
    cu = rng.choice([0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 2.0])
    q = zn / cu
    value = 1.10 - (R * 298.15 / (2 * FARADAY)) * math.log(q)
    options, right = _fixed(
        rng,
        value,
        [1.10 - (R * 298.15 / FARADAY) * math.log(q), 1.10 + (R * 298.15 / (2 * FARADAY)) * math.log(q), 1.10],
        decimals=3,
        unit="V",
    )
    stem = (
        f"For the cell Zn(s) | Zn²⁺(aq, {zn} M) || Cu²⁺(aq, {cu} M) | Cu(s) at 298 K, with "
        f"E° = 1.10 V, what is the cell potential?"
    )
    return "electrochemistry", stem, options, right


def first_order(rng: random.Random) -> Question:
    half_life = rng.choice([12, 20, 35, 48, 75, 120, 300])
    consumed = rng.choice([50, 75, 80, 90, 95, 99, 99.9])
    t = half_life * math.log(1 / (1 - consumed / 100)) / math.log(2)
    options, right = numeric_options(
        rng, t, N, unit="min", factors=(consumed / 100 * 2, math.log(2), 1 / math.log(2), 0.5)
    )
    stem = (
        f"A decomposition follows first-order kinetics with a half-life of {half_life} min. How long "
        f"does it take for {consumed}% of the reactant to be consumed?"
    )
    return "chemical kinetics", stem, options, right


def arrhenius(rng: random.Random) -> Question:
    t1 = rng.choice([290, 298, 300, 310, 320])
    t2 = t1 + rng.choice([10, 15, 20, 25, 30])
    factor = rng.choice([2, 3, 4, 5])
    ea = R * math.log(factor) / (1 / t1 - 1 / t2) / 1000
    options, right = numeric_options(
        rng, ea, N, unit="kJ/mol", factors=(1 / math.log(factor) * factor, math.log(10), 1 / math.log(10), 0.5)
    )
    stem = (
        f"The rate constant of a reaction increases by a factor of {factor} when the temperature rises "
        f"from {t1} K to {t2} K. Assuming Arrhenius behaviour, what is the activation energy?"
    )
    return "physical chemistry", stem, options, right


def nmr(rng: random.Random) -> Question:
    group, answer = rng.choice(facts.NMR)
    pool = ["a singlet", "a doublet", "a triplet", "a quartet", "a quintet", "a sextet", "a septet"]
    options, right = table_options(rng, answer, pool, N)
    stem = f"In the first-order ¹H NMR spectrum, what splitting pattern is expected for {group}?"
    return "organic chemistry", stem, options, right


def hardy_weinberg(rng: random.Random) -> Question:
    affected = rng.choice([1, 4, 9, 16, 25, 0.25, 0.04, 0.01])
    q = math.sqrt(affected / 100)
    p = 1 - q
    carriers = 2 * p * q * 100
    options, right = _fixed(rng, carriers, [q * 100, p * q * 100, p * p * 100], decimals=2, unit="%")
    stem = (
        f"An autosomal recessive trait is expressed by {affected}% of a large, randomly mating "
        f"population in Hardy-Weinberg equilibrium. What percentage of the population are "
        f"heterozygous carriers?"
    )
    return "genetics", stem, options, right


def _sixty_fourths(x: float) -> str:
    return f"{round(x * 64)}/64"


def trihybrid(rng: random.Random) -> Question:
    genes = "ABC"
    pattern = [rng.choice(["dominant", "recessive"]) for _ in genes]
    prob = math.prod(0.75 if p == "dominant" else 0.25 for p in pattern)
    parts = [f"the {p} phenotype for {g}" for p, g in zip(pattern, genes)]
    described = f"{parts[0]}, {parts[1]} and {parts[2]}"
    pool = [_sixty_fourths(x) for x in (27 / 64, 9 / 64, 3 / 64, 1 / 64, 18 / 64, 6 / 64, 12 / 64, 36 / 64)]
    options, right = table_options(rng, _sixty_fourths(prob), pool, N)
    stem = (
        f"Three genes A, B and C assort independently, and each shows complete dominance. In the "
        f"cross AaBbCc × AaBbCc, what fraction of the offspring is expected to show {described}?"
    )
    return "genetics", stem, options, right


def wien(rng: random.Random) -> Question:
    peak = rng.choice([290, 350, 420, 480, 502, 550, 650, 740, 850, 1000, 1400])
    temperature = 2.897771955e-3 / (peak * 1e-9)
    options, right = numeric_options(rng, temperature, N, unit="K", factors=(0.5, 2.0, 1.5, 0.8))
    stem = (
        f"The thermal spectrum of a star, treated as a blackbody, peaks at a wavelength of {peak} nm. "
        f"What is its effective surface temperature according to Wien's displacement law?"
    )
    return "astrophysics", stem, options, right


def boltzmann(rng: random.Random) -> Question:
    gap = rng.choice([5, 10, 25, 50, 100, 200])
    temperature = rng.choice([77, 150, 300, 500, 1000])
    g_upper = rng.choice([1, 2, 3])
    ratio = g_upper * math.exp(-gap * 1e-3 * E / (KB * temperature))
    options, right = numeric_options(
        rng, ratio, N, factors=(1 / g_upper if g_upper > 1 else 2.0, 0.5, 2.718281828, 0.1)
    )
    stem = (
        f"A two-level system has a non-degenerate ground state and an excited state of degeneracy "
        f"{g_upper} lying {gap} meV above it. In thermal equilibrium at {temperature} K, what is the "
        f"ratio of the excited-state population to the ground-state population?"
    )
    return "statistical mechanics", stem, options, right


ISOTOPES = [
    ("carbon-14", 5730, "years"),
    ("iodine-131", 8.02, "days"),
    ("cobalt-60", 5.27, "years"),
    ("phosphorus-32", 14.3, "days"),
    ("strontium-90", 28.8, "years"),
    ("technetium-99m", 6.01, "hours"),
    ("tritium", 12.3, "years"),
]


def decay(rng: random.Random) -> Question:
    name, half, unit = rng.choice(ISOTOPES)
    elapsed = round(half * rng.choice([0.5, 1.5, 2.3, 3.7, 4.2, 6.0]), 3 if half < 20 else 0)
    fraction = 0.5 ** (elapsed / half) * 100
    options, right = numeric_options(rng, fraction, N, unit="%", factors=(0.5, 0.25, 0.7, 0.35))
    stem = (
        f"The half-life of {name} is {half} {unit}. What percentage of an initial sample of "
        f"{name} remains after {fmt(elapsed, 4)} {unit}?"
    )
    return "nuclear physics", stem, options, right


def isothermal_entropy(rng: random.Random) -> Question:
    moles = rng.choice([0.5, 1.0, 1.5, 2.0, 3.0])
    v1 = rng.choice([1, 2, 5, 10])
    v2 = v1 * rng.choice([2, 3, 4, 5, 10])
    ds = moles * R * math.log(v2 / v1)
    options, right = numeric_options(rng, ds, N, unit="J/K", factors=(math.log10(math.e), 1.5, 2.5, 1 / 1.5))
    stem = (
        f"{moles} mol of an ideal gas expands reversibly and isothermally from {v1} L to {v2} L. "
        f"What is the entropy change of the gas?"
    )
    return "thermodynamics", stem, options, right


def de_broglie(rng: random.Random) -> Question:
    volts = rng.choice([50, 100, 150, 500, 1000, 5000])
    wavelength = H / math.sqrt(2 * ME * E * volts) * 1e12
    options, right = numeric_options(rng, wavelength, N, unit="pm", factors=(math.sqrt(2), 1 / math.sqrt(2), 2.0, 0.5))
    stem = (
        f"An electron initially at rest is accelerated through a potential difference of {volts} V. "
        f"Neglecting relativistic effects, what is its de Broglie wavelength?"
    )
    return "quantum physics", stem, options, right


MOLECULES = [
    ("H³⁵Cl", 1.00783, 34.96885, 516),
    ("H⁷⁹Br", 1.00783, 78.91834, 412),
    ("¹²C¹⁶O", 12.0, 15.99491, 1902),
    ("¹⁴N¹⁶O", 14.00307, 15.99491, 1595),
    ("H¹⁹F", 1.00783, 18.99840, 966),
    ("¹H₂", 1.00783, 1.00783, 575),
]


def vibration(rng: random.Random) -> Question:
    name, m1, m2, k = rng.choice(MOLECULES)
    scale = rng.choice([1.0, 1.0, 0.97, 1.03])
    k_used = round(k * scale)
    mu = m1 * m2 / (m1 + m2) * AMU
    wavenumber = math.sqrt(k_used / mu) / (2 * math.pi * C) / 100
    options, right = numeric_options(
        rng, wavenumber, N, unit="cm⁻¹", factors=(2 * math.pi, 1 / math.sqrt(2), math.sqrt(2), 0.5)
    )
    stem = (
        f"Treat the molecule {name} as a harmonic oscillator with a force constant of {k_used} N/m. "
        f"What is its fundamental vibrational wavenumber?"
    )
    return "molecular spectroscopy", stem, options, right


def compton(rng: random.Random) -> Question:
    angle = rng.choice([30, 45, 60, 90, 120, 135, 150, 180])
    shift = H / (ME * C) * (1 - math.cos(math.radians(angle))) * 1e12
    options, right = numeric_options(
        rng,
        shift,
        N,
        unit="pm",
        factors=(2.0, 0.5, 1 / (1 - math.cos(math.radians(angle))) if angle != 90 else 1.5, 1.5),
    )
    stem = (
        f"A photon scatters off a free electron at rest and is deflected by {angle}°. By how much "
        f"does its wavelength increase?"
    )
    return "modern physics", stem, options, right


def michaelis(rng: random.Random) -> Question:
    km = rng.choice([0.5, 1.0, 2.0, 5.0, 10.0])
    vmax = rng.choice([20, 50, 80, 100, 150])
    substrate = km * rng.choice([0.25, 0.5, 2, 3, 4, 9])
    inhibitor = rng.random() < 0.5
    if inhibitor:
        alpha = rng.choice([2, 3, 4])
        v = vmax * substrate / (alpha * km + substrate)
        extra = f" A competitive inhibitor is present at a concentration that raises the apparent Km {alpha}-fold."
    else:
        v = vmax * substrate / (km + substrate)
        extra = ""
    options, right = numeric_options(
        rng, v, N, unit="µM/s", factors=(substrate / (substrate + km) * 1.6, 0.5, 1.5, 0.75)
    )
    stem = (
        f"An enzyme obeys Michaelis-Menten kinetics with Km = {km} mM and Vmax = {vmax} µM/s.{extra} "
        f"What is the initial rate at a substrate concentration of {fmt(substrate)} mM?"
    )
    return "biochemistry", stem, options, right


IONS: list[tuple[str, int, float, float]] = [
    ("K⁺", 1, 5, 140),
    ("Na⁺", 1, 145, 12),
    ("Ca²⁺", 2, 2, 0.0001),
    ("Cl⁻", -1, 110, 10),
]


def nernst_ion(rng: random.Random) -> Question:
    ion, z, out, inside = rng.choice(IONS)
    out = round(out * rng.choice([0.5, 0.8, 1.0, 1.2, 2.0]), 4)
    temperature = rng.choice([(37, 310.15), (25, 298.15), (20, 293.15)])
    potential = R * temperature[1] / (z * FARADAY) * math.log(out / inside) * 1000
    options, right = _fixed(
        rng,
        potential,
        [
            -potential,
            potential * abs(z) if abs(z) > 1 else potential / 2,
            R * temperature[1] / (z * FARADAY) * math.log10(out / inside) * 1000,
        ],
        decimals=1,
        unit="mV",
    )
    stem = (
        f"A cell has {fmt(out)} mM extracellular and {fmt(inside)} mM intracellular {ion}. At "
        f"{temperature[0]} °C, what is the Nernst equilibrium potential for {ion} (inside relative to outside)?"
    )
    return "neurophysiology", stem, options, right


TEMPLATES: list[Callable[[random.Random], Question]] = [
    square_well,
    hydrogen_line,
    muon_range,
    buffer_ph,
    nernst_cell,
    first_order,
    arrhenius,
    nmr,
    hardy_weinberg,
    trihybrid,
    wien,
    boltzmann,
    decay,
    isothermal_entropy,
    de_broglie,
    vibration,
    compton,
    michaelis,
    nernst_ion,
]

LETTERS = "ABCD"


def render(subject: str, stem: str, options: list[str]) -> str:
    lines = "\n".join(f"{LETTERS[i]}) {text}" for i, text in enumerate(options))
    return (
        f"Answer the following question about {subject}. Reason step by step, and end with a line of "
        f"the form 'Answer: X', where X is one of A, B, C or D.\n\n{stem}\n\n{lines}"
    )
