"""A held-out prompt set shaped like the organisers' own: their formats, their lengths, our questions.

    python -m datagen.heldout --challenge-data DIR   # or with GEMMA_SWEEP_CHALLENGE_DATA=DIR set

writes studies/data/prompts_heldout_challenge.json. DIR is the folder holding the organisers'
eval_prompts_sharegpt.json; only its prompts' token lengths are read, to set the targets below.

Why: the project's own sets (``datagen.promptset``) are about half as long as the organisers'
prompts, so a TPS re-run on them prefills less than the organisers' private re-run will. This set keeps the challenge's spread (57 knowledge questions
with ten options, 57 science questions with four, 14 competition problems), renders each kind in
the instruction format the organisers use for it, and gives every question extra material from
the project's own tables (``datagen/_promptbank``) until its length matches a target:

    knowledge   background notes before the question: facts from the fact tables, the
                question's own subject first, never the fact it asks about
    science     background notes: reference data from the science tables (its subject's first),
                then worked examples from the science templates, answers computed
    math        a multi-part problem: more problems from the templates, and the answer is the
                sum of all their answers modulo 1000

Lengths are Gemma 3 token counts of the chat-templated prompt (``<bos>`` included). The targets
are the organisers' sorted lengths, kind by kind (quantile matching); each target takes the first
unused candidate question whose padded prompt comes within ``TOLERANCE`` of it. Core questions
are distinct and never one of the project's other sets. Output is byte-for-byte the same on every
run with the same tokenizer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli import command
from datagen._promptbank import competition, facts, knowledge, science
from datagen._promptbank.numbers import fmt
from datagen.promptset import DATA_DIR, FILES, SPREAD
from engine.config import CHALLENGE_DATA_ENV
from errors import DataError, GemmaSweepError

__all__ = ["OUTPUT", "SEED", "build_set", "load_tokenizer", "main", "prompt_tokens", "target_lengths"]

SEED = 20261201
OUTPUT = DATA_DIR / "prompts_heldout_challenge.json"
CHALLENGE_FILE = "eval_prompts_sharegpt.json"
MODULES = {"knowledge": knowledge, "science": science, "math": competition}  # source -> its templates
KINDS = {"mmlu_pro": "knowledge", "gpqa_diamond": "science", "aime": "math"}  # organisers' id prefix -> source
CANDIDATES = 8  # candidate questions per prompt: spares for targets a question cannot hit
TOLERANCE = 0.01  # of the target: far inside the 5% (median) and ~10% (deciles) the set must meet

# The organisers' instruction formats (their header and answer line), filled with our questions.
MCQ_HEADER = (
    "Answer the following multiple choice question. The last line of your response should be of "
    "the following format: 'ANSWER: $LETTER' (without quotes) where LETTER is one of {letters}. "
    "Think step by step before answering."
)
MATH_HEADER = (
    "Solve the following math problem step by step.\nThe last line of your response should be of the "
    'form "ANSWER: $ANSWER" (without quotes) where $ANSWER is the answer to the problem.'
)
MATH_FOOTER = (
    'Remember to put your answer on its own line at the end in the form "ANSWER: $ANSWER" (without '
    "quotes) where $ANSWER is the answer to the problem, and you do not need to use a \\boxed command."
)


@dataclass(frozen=True)
class _Question:
    subject: str
    stem: str  # the question; a problem statement for mathematics
    options: tuple[str, ...]  # empty for mathematics
    answer: int  # index of the right option; the integer answer for mathematics


def _fact_notes() -> list[tuple[str, str, str]]:
    """(subject, key, sentence) for every row of the knowledge tables; key is what a question names."""
    tables: list[tuple[str, list[tuple[str, Any]], Callable[[str, Any], str]]] = [
        ("geography", facts.CAPITALS, lambda k, v: f"The capital of {k} is {v}."),
        # An event is stored as its question: a year cannot be put into the sentence without
        # re-inflecting its verb, so the note reads as a question answered.
        ("history", facts.EVENTS, lambda k, v: f"{k} {v}."),
        ("philosophy and literature", facts.WORKS, lambda k, v: f"'{k}' was written by {v}."),
        ("psychology", facts.PSYCHOLOGISTS, lambda k, v: f"{v} is best known for {k}."),
        ("philosophy", facts.PHILOSOPHERS, lambda k, v: f"{v} is closely associated with {k}."),
        ("law", facts.COURT_CASES, lambda k, v: f"{v} {k}."),
        ("health", facts.HORMONES, lambda k, v: f"The main source of {k} is {v}."),
        ("health", facts.DEFICIENCIES, lambda k, v: f"A dietary deficiency of {v} classically causes {k}."),
        ("computer science", facts.COMPLEXITIES, lambda k, v: f"The worst-case running time of {k} is {v}."),
        ("economics", facts.ECON_TERMS, lambda k, v: f"The term '{v}' describes {k}."),
    ]
    return [(subject, key, say(key, value)) for subject, table, say in tables for key, value in table]


def _data_notes() -> list[tuple[str, str, str]]:
    """(subject, key, sentence) for the science tables, under the subject of the template that
    uses each, and for the constants the templates use (no one subject's)."""
    constants = [
        ("Planck's constant", science.H, "J s"),
        ("the electron mass", science.ME, "kg"),
        ("the elementary charge", science.E, "C"),
        ("the speed of light in vacuum", science.C, "m/s"),
        ("Boltzmann's constant", science.KB, "J/K"),
        ("the molar gas constant", science.R, "J/(mol K)"),
        ("the Faraday constant", science.FARADAY, "C/mol"),
        ("the atomic mass unit", science.AMU, "kg"),
        ("the Rydberg constant for hydrogen", science.RH, "m⁻¹"),
    ]
    return [
        *(("constants", name, f"The value of {name} is {fmt(value, 4)} {unit}.") for name, value, unit in constants),
        *(
            ("chemistry", acid, f"At 25 °C the pKa of {acid} is {pka:.2f} (conjugate base: {base}).")
            for acid, base, pka in science.ACIDS
        ),
        *(
            ("nuclear physics", name, f"The half-life of {name} is {half} {unit}.")
            for name, half, unit in science.ISOTOPES
        ),
        *(
            ("molecular spectroscopy", name, f"The bond force constant of {name} is about {k} N/m.")
            for name, _, _, k in science.MOLECULES
        ),
        *(
            (
                "neurophysiology",
                ion,
                f"In a typical mammalian cell {ion} is {out:g} mM outside and {inside:g} mM inside.",
            )
            for ion, _, out, inside in science.IONS
        ),
        *(
            ("organic chemistry", group, f"The expected first-order ¹H NMR signal for {group} is {pattern}.")
            for group, pattern in facts.NMR
        ),
    ]


NOTES = {"knowledge": _fact_notes(), "science": _data_notes()}


def _draw(source: str, rng: random.Random, template: Callable) -> _Question | None:
    if source == "math":
        statement, answer = template(rng)
        # an AIME answer is an integer from 0 to 999
        return _Question("competition mathematics", statement, (), answer) if 0 <= answer <= 999 else None
    subject, stem, options, right = template(rng)
    return _Question(subject, stem, tuple(options), right)


def _candidates(source: str, rng: random.Random, count: int, taken: Callable[[str], bool]) -> list[_Question]:
    """``count`` distinct questions, cycling through the templates (as ``datagen.promptset`` does)."""
    templates = MODULES[source].TEMPLATES
    drawn: list[_Question] = []
    seen: set[str] = set()
    misses = 0
    while len(drawn) < count:
        # a small table runs out of unused rows: after 20 misses take any template
        template = templates[len(drawn) % len(templates)] if misses < 20 else rng.choice(templates)
        question = _draw(source, rng, template)
        if question is None or question.stem in seen or taken(question.stem):
            misses += 1
            continue
        misses = 0
        seen.add(question.stem)
        drawn.append(question)
    return drawn


def _examples(source: str, rng: random.Random, core: _Question) -> Iterator[_Question]:
    """Endless further questions of the kind, none the core or each other; the templates taken
    in a shuffled cycle, so that a long run of them is not one template over and over."""
    templates = list(MODULES[source].TEMPLATES)
    rng.shuffle(templates)
    seen = {core.stem}
    for template in itertools.cycle(templates):
        question = _draw(source, rng, template)
        if question is not None and question.stem not in seen:
            seen.add(question.stem)
            yield question


def _extras(source: str, core: _Question) -> Iterator[Any]:
    """The material a question is padded with, in the order it is added: notes (text), or further
    problems (``_Question``) for mathematics. Seeded by the question alone, so that a candidate's
    padding does not depend on which targets came before it."""
    rng = random.Random(f"{SEED}:{source}:{core.stem}")
    if source == "math":
        yield from _examples(source, rng, core)
        return
    # never the row a question asks about (its key is in the stem): that would give the answer away
    notes = [(subject, text) for subject, key, text in NOTES[source] if key not in core.stem]
    related = [text for subject, text in notes if subject == core.subject]
    other = [text for subject, text in notes if subject != core.subject]
    rng.shuffle(related)
    rng.shuffle(other)
    yield from related + other
    if source == "science":  # the data run out at ~900 tokens, short of the longest targets
        for q in _examples(source, rng, core):
            yield f"Worked example: {q.stem} Answer: {q.options[q.answer]}."


def _with_notes(notes: list[str], stem: str) -> str:
    if not notes:
        return stem
    return "Background notes:\n" + "\n".join(f"- {n}" for n in notes) + "\n\n" + stem


def _render(source: str, core: _Question, extras: list[Any]) -> tuple[str, str]:
    """The prompt text and its answer (a letter, or the integer as text)."""
    if source == "math":
        parts = [core, *extras]
        if len(parts) == 1:
            body, answer = core.stem, core.answer
        else:  # a short frame: the gap between one problem and two stays small
            problems = "\n\n".join(f"({i}) {p.stem}" for i, p in enumerate(parts, 1))
            every = "both" if len(parts) == 2 else f"all {len(parts)}"
            body = (
                f"Answer {every} problems below; each answer is an integer from 0 to 999.\n\n"
                f"{problems}\n\nGive the sum of the {len(parts)} answers, modulo 1000."
            )
            answer = sum(p.answer for p in parts) % 1000
        return f"{MATH_HEADER}\n\n{body}\n\n{MATH_FOOTER}", str(answer)
    letters = MODULES[source].LETTERS
    header = MCQ_HEADER.format(letters=",".join(letters))
    options = "\n".join(f"{letters[i]}) {text}" for i, text in enumerate(core.options))
    question = _with_notes(extras, core.stem)
    # the organisers' MMLU-Pro layout has labelled blocks; their GPQA layout, blank lines
    body = f"Question:\n{question}\nOptions:\n{options}" if source == "knowledge" else f"{question}\n\n{options}"
    return f"{header}\n\n{body}", letters[core.answer]


def _fit(
    source: str, target: int, pool: list[_Question], used: set[int], length: Callable[[str], int]
) -> tuple[_Question, str, str]:
    """The first unused candidate padded to within TOLERANCE of ``target`` (else the nearest):
    the question, the prompt text and its answer."""
    best: tuple[int, int, str, str] | None = None  # error, candidate, text, answer
    for i, core in enumerate(pool):
        if i in used:
            continue
        extras: list[Any] = []
        stream = _extras(source, core)
        text, answer = _render(source, core, extras)
        n, shorter = length(text), None
        while n < target and (item := next(stream, None)) is not None:
            shorter = (target - n, i, text, answer)
            extras.append(item)
            text, answer = _render(source, core, extras)
            n = length(text)
        nearest = min([(abs(n - target), i, text, answer), *([shorter] if shorter else [])])
        best = nearest if best is None or nearest[0] < best[0] else best
        if best[0] <= TOLERANCE * target:
            break
    assert best is not None, f"{source}: more targets than candidates"
    used.add(best[1])
    return pool[best[1]], best[2], best[3]


def prompt_tokens(tokenizer: Any, text: str) -> int:
    """Tokens of a prompt as the organisers' harness sends it: chat template applied, ``<bos>`` included."""
    templated = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    return len(tokenizer(templated, add_special_tokens=False)["input_ids"])  # the template holds <bos>


def target_lengths(folder: Path, tokenizer: Any) -> dict[str, list[int]]:
    """The organisers' public prompts' sorted token lengths, per source: all this set keeps of them."""
    path = Path(folder) / CHALLENGE_FILE
    lengths: dict[str, list[int]] = {source: [] for source in SPREAD}
    for record in json.loads(path.read_text()):
        source = next((s for prefix, s in KINDS.items() if record["id"].startswith(prefix)), None)
        if source is None:
            raise DataError(f"{path}: record {record['id']!r} is of no kind this set knows ({', '.join(KINDS)})")
        lengths[source].append(prompt_tokens(tokenizer, record["conversations"][0]["value"]))
    if {s: len(v) for s, v in lengths.items()} != SPREAD:
        raise DataError(f"{path}: spread { ({s: len(v) for s, v in lengths.items()}) }, expected {SPREAD}")
    return {source: sorted(v) for source, v in lengths.items()}


def build_set(tokenizer: Any, targets: dict[str, list[int]], seed: int = SEED) -> list[dict[str, Any]]:
    """One prompt per target length (``target_lengths``), shuffled, in the project's record format."""
    rng = random.Random(seed)
    # joined by \0: a stem counts as taken only when one prompt holds it whole
    others = "\0".join(r["conversations"][0]["value"] for p in FILES.values() for r in json.loads(p.read_text()))
    items = []
    for source, lengths in targets.items():
        pool = _candidates(source, rng, CANDIDATES * len(lengths), lambda stem: stem in others)
        used: set[int] = set()
        for target in sorted(lengths):  # shortest first: a short target needs a question short enough
            core, text, answer = _fit(source, target, pool, used, lambda t: prompt_tokens(tokenizer, t))
            items.append({"source": source, "subject": core.subject, "text": text, "answer": answer})
    rng.shuffle(items)  # kinds and lengths mixed, so that any prefix of the file is a fair sample
    return [
        {
            "id": f"heldout-challenge-{i:03d}",
            "source": item["source"],
            "subject": item["subject"],
            "answer": item["answer"],
            "conversations": [{"from": "human", "value": item["text"]}, {"from": "gpt", "value": ""}],
        }
        for i, item in enumerate(items)
    ]


def load_tokenizer() -> Any:
    from transformers import AutoTokenizer

    from engine.reference.prepare import prepare_model

    return AutoTokenizer.from_pretrained(prepare_model().checkpoint_dir)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m datagen.heldout", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--challenge-data",
        type=Path,
        default=os.environ.get(CHALLENGE_DATA_ENV),
        help=f"the folder holding the organisers' {CHALLENGE_FILE} (default: ${CHALLENGE_DATA_ENV})",
    )
    args = parser.parse_args(argv)
    if args.challenge_data is None:
        parser.error(
            f"the length targets come from the organisers' {CHALLENGE_FILE}: pass --challenge-data DIR "
            f"or set {CHALLENGE_DATA_ENV} to the folder that holds it"
        )
    if not (Path(args.challenge_data) / CHALLENGE_FILE).is_file():
        parser.error(f"{args.challenge_data}: no {CHALLENGE_FILE} there")
    return args


@command(_parse, usage=(GemmaSweepError,))  # every error here is the data's: the organisers' file, the draws
def main(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    began = time.monotonic()
    tokenizer = load_tokenizer()
    records = build_set(tokenizer, target_lengths(Path(args.challenge_data), tokenizer))
    OUTPUT.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")
    print(f"{OUTPUT}: {len(records)} prompts, {time.monotonic() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
