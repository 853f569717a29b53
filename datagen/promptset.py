"""The project's prompt sets, generated from templates and fact tables with a fixed seed.

    python -m datagen.promptset     # rewrites studies/data/prompts_public.json and prompts_heldout.json

Each set holds 128 chat prompts in the challenge's spread: 57 knowledge questions (ten options,
MMLU-Pro style), 57 graduate-level science questions (four options, GPQA style) and 14
competition problems (integer answers, AIME style). Every question is written for this project
(``datagen/_promptbank``); computed answers are worked out here and stored beside each prompt.
The two sets are disjoint: the pool is drawn once and dealt alternately, so both have the same
mix of templates while no prompt appears in both. Output is byte-for-byte the same on every run.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datagen._promptbank import competition, knowledge, science

__all__ = ["SEED", "SPREAD", "build_sets", "main"]

SEED = 20261130
SPREAD = {"knowledge": 57, "science": 57, "math": 14}  # per set, as the challenge's 57/57/14
DATA_DIR = Path(__file__).resolve().parent.parent / "studies" / "data"
FILES = {"public": DATA_DIR / "prompts_public.json", "heldout": DATA_DIR / "prompts_heldout.json"}


# A maker returns (subject, prompt text, answer, key); two prompts with one key (the question
# without its options) count as the same question.
Made = tuple[str, str, str, str]


def _mcq(module: Any) -> Callable[[random.Random, Callable], Made]:
    def make(rng: random.Random, template: Callable) -> Made:
        subject, stem, options, right = template(rng)
        return subject, module.render(subject, stem, options), module.LETTERS[right], stem

    return make


def _math(rng: random.Random, template: Callable) -> Made | None:
    statement, answer = template(rng)
    if not 0 <= answer <= 999:  # an AIME answer is an integer from 0 to 999
        return None
    return "competition mathematics", competition.render(statement), str(answer), statement


def _pool(rng: random.Random, templates: list[Callable], make: Callable, count: int) -> list[dict[str, str]]:
    """``count`` distinct questions, cycling through the templates so each is used evenly."""
    drawn: list[dict[str, str]] = []
    seen: set[str] = set()
    misses = 0
    while len(drawn) < count:
        template = templates[len(drawn) % len(templates)] if misses < 20 else rng.choice(templates)
        made = make(rng, template)
        if made is None or made[3] in seen:
            misses += 1
            continue
        misses = 0
        subject, text, answer, key = made
        seen.add(key)
        drawn.append({"subject": subject, "text": text, "answer": answer})
    return drawn


def build_sets(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(seed)
    makers: dict[str, tuple[list[Callable], Callable]] = {  # the templates of a source, and its maker
        "knowledge": (knowledge.TEMPLATES, _mcq(knowledge)),
        "science": (science.TEMPLATES, _mcq(science)),
        "math": (competition.TEMPLATES, _math),
    }
    sets: dict[str, list[dict[str, Any]]] = {"public": [], "heldout": []}
    for source, per_set in SPREAD.items():
        templates, make = makers[source]
        pool = _pool(rng, templates, make, 2 * per_set)
        for i, item in enumerate(pool):
            sets["public" if i % 2 == 0 else "heldout"].append({"source": source, **item})
    for name, items in sets.items():
        rng.shuffle(items)
        sets[name] = [
            {
                "id": f"{name}-{i:03d}",
                "source": item["source"],
                "subject": item["subject"],
                "answer": item["answer"],
                "conversations": [{"from": "human", "value": item["text"]}, {"from": "gpt", "value": ""}],
            }
            for i, item in enumerate(items)
        ]
    return sets


def main() -> int:
    for name, records in build_sets().items():
        FILES[name].parent.mkdir(parents=True, exist_ok=True)
        FILES[name].write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")
        print(f"{FILES[name]}: {len(records)} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
