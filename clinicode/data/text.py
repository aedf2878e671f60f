"""CAML tokenisation with character offsets (str -> tokens). Pure Python; the reference for tokenizer.py."""

from __future__ import annotations

import re

from clinicode.formats import describe_columns  # noqa: F401  (moved to the formats room; read from here too)

# CAML: tokens are \w+ runs (Unicode letters, digits, underscore); all-numeric tokens are dropped; lowercase.
TOKEN_RE = re.compile(r"\w+")


def tokenize_with_offsets(text: str) -> list[tuple[str, int, int]]:
    """CAML tokens of `text` with their character spans in the original string.

    Args:
        text: the raw note.
    Returns:
        (lowercased token, start, end) triples; `text[start:end].lower() == token`.
    """
    return [(m.group().lower(), m.start(), m.end()) for m in TOKEN_RE.finditer(text) if not m.group().isnumeric()]


def tokenize(text: str) -> list[str]:
    """CAML tokens of `text` (lowercased, all-numeric tokens dropped)."""
    return [t for t, _, _ in tokenize_with_offsets(text)]
