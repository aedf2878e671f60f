"""CAML tokenisation with character offsets (str -> tokens). Pure Python; the reference for tokenizer.py."""

from __future__ import annotations

import re

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


_COLUMN_NAME = re.compile(r"[\w .:/()#+-]{1,32}")


def describe_columns(columns, *, limit: int = 12) -> str:
    """Column names for an error message, never a cell of note text.

    A file without a header row has its first data row read as column names; names that do not look like
    names (longer than 32 characters, more than three words, or unusual characters) are shown by length only.
    """
    cols = [str(c) for c in columns]
    shown = [c if _COLUMN_NAME.fullmatch(c) and len(c.split()) <= 3 else f"<{len(c)}-character name>"
             for c in cols[:limit]]
    text = ", ".join(shown) + (f" and {len(cols) - limit} more" if len(cols) > limit else "") if cols else "none"
    if any(s.startswith("<") for s in shown):
        text += "; is the header row missing?"
    return text
