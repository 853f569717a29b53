"""Incremental detokenization (engine/reference/_detokenize.py) against full decodes, on the real tokenizer."""

from __future__ import annotations

import pytest

from engine.reference._detokenize import INCOMPLETE, IncrementalText

pytestmark = pytest.mark.slow

TEXTS = [
    "Plain prose, with punctuation; and  two spaces.\nA new line, then\ttabs.",
    "Émigré café naïve — “quotes” … ½ ∑ ∞",
    "日本語のテキストと中文文本，还有한국어.",
    "Emoji: 👩‍👩‍👧‍👦 🇫🇷 🤖✨ end",
    "def f(x):\n    return x ** 2  # squared\n\n\nprint(f(3))",
    "   leading spaces, trailing spaces   ",
    "1234567890 3.14159 -42 0x1F",
]


def _streamed(tokenizer, ids: list[int]) -> tuple[str, list[str]]:
    def decode(part: list[int]) -> str:
        return tokenizer.decode(part, skip_special_tokens=True)

    text, pieces = IncrementalText(decode), []
    for i, token in enumerate(ids, 1):
        new = text.add(token)
        if new is not None:
            pieces.append(new)
            full = decode(ids[:i])
            assert "".join(pieces) == full, f"after token {i}"
        else:
            assert decode(ids[:i]).endswith(INCOMPLETE)
    return decode(ids), pieces


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_streamed_pieces_join_into_the_full_decode(tokenizer, text):
    ids = tokenizer(text).input_ids  # <bos> first: a special token skipped in the text
    full, pieces = _streamed(tokenizer, ids)
    assert "".join(pieces) == full == text


def test_the_models_own_replies_stream_exactly(tokenizer, plain_outputs):
    for ids in plain_outputs:
        full, pieces = _streamed(tokenizer, ids)
        assert "".join(pieces) == full


def test_a_character_split_over_byte_tokens_waits_until_complete(tokenizer):
    ids = [tokenizer.convert_tokens_to_ids(f"<0x{b:02X}>") for b in "€".encode()]  # three byte-fallback tokens
    text = IncrementalText(lambda part: tokenizer.decode(part))
    assert [text.add(t) for t in ids] == [None, None, "€"]
