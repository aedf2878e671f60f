"""Finding a code by what a coder types: its code (dotted or not) or words of its title; one rule for every search."""

from __future__ import annotations


def code_matches(query: str, code: str, title: str) -> bool:
    """True when QUERY (case-insensitive) starts CODE, dotted or not ('428', '4280', '428.0'), or every word of it
    occurs in TITLE ("heart fail" finds 428.0 Congestive heart failure). An empty query matches nothing."""
    q = query.strip().lower()
    if not q:
        return False
    c = code.lower()
    low = title.lower()
    return c.startswith(q) or c.replace(".", "").startswith(q.replace(".", "")) or all(w in low for w in q.split())
