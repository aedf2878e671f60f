"""Finding a code by what a coder types: its code (dotted or not) or words of its title; one rule for every search,
and the search of the tables a code system ships (`CodeSystem.catalogue`)."""

from __future__ import annotations

import functools
from typing import Container

from clinicode.codes.systems import CodeSystem


def code_matches(query: str, code: str, title: str) -> bool:
    """True when QUERY (case-insensitive) starts CODE, dotted or not ('428', '4280', '428.0'), or every word of it
    occurs in TITLE ("heart fail" finds 428.0 Congestive heart failure). An empty query matches nothing."""
    q = query.strip().lower()
    if not q:
        return False
    c = code.lower()
    low = title.lower()
    return c.startswith(q) or c.replace(".", "").startswith(q.replace(".", "")) or all(w in low for w in q.split())


def search_catalogue(query: str, system: CodeSystem, *, skip: Container[str] = (),
                     limit: int = 25) -> list[tuple[str, str, str]]:
    """(code, title, member's name) of the codes SYSTEM's members ship in tables (ICD-10-CM's CMS tables) that QUERY
    matches (`code_matches`), in the tables' order, at most LIMIT, leaving out the codes in SKIP; [] for a system that
    ships none (ICD-9-CM, ICD-10-PCS, MeSH, a checkpoint's own labels).

    Args:
        query: what the coder typed.
        system: the code system searched (a family searches each member that ships tables).
        skip: codes already shown (a model's own codes).
        limit: the most matches returned.
    """
    out: list[tuple[str, str, str]] = []
    if not query.strip() or limit <= 0:
        return out
    for part in system.leaves:
        if not part.ships_tables:
            continue
        for code, title, low in _lowered(part):
            if len(out) >= limit:
                return out
            if code not in skip and code_matches(query, code, low):
                out.append((code, title, part.name))
    return out


@functools.lru_cache(maxsize=8)
def _lowered(part: CodeSystem) -> tuple[tuple[str, str, str], ...]:
    """(code, title, lower-case title) of PART's tables, built once per process (~1 s for ICD-10-CM)."""
    return tuple((c, t, t.lower()) for c, t, _ in part.catalogue())
