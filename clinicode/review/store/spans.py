"""Evidence spans a decision keeps: the characters of a note that justify a code it accepts or adds (`review decide
--evidence`, `review adjudicate --evidence`), checked the same way for every writer."""

from __future__ import annotations

import json
import numbers
from typing import Any, Sequence

from clinicode.codes.systems import CodeSystem
from clinicode.review.store.codes import same_code
from clinicode.review.store.errors import ReviewError

MAX_SPANS = 50  # evidence spans per code and decision: the words that justify it, not the whole note


def check_evidence(note_id: str, given: Sequence[tuple[str, Any]], system: CodeSystem, kept: Sequence[str],
                   length: int, *, keeps: str = "--accept {code} or --add {code}") -> dict[str, str]:
    """{code as stored: JSON list of [start, end]} of the evidence GIVEN, each code one of KEPT (this call's accepted
    and added codes, however spelled), each span a pair of whole numbers 0 <= start < end <= LENGTH (the note's
    characters), at most MAX_SPANS a code; repeated spans are stored once, in the order given. KEEPS: the options
    that keep a code, for the message."""
    out: dict[str, list[list[int]]] = {}
    for typed, spans in given:
        code = same_code(system, typed, set(kept))
        if code is None:
            raise ReviewError(f"note {note_id!r}: evidence for {typed}, which this decision neither accepts nor adds; "
                              f"give evidence only with {keeps.format(code=typed)} in the same decision "
                              "(nothing was saved).")
        pairs = out.setdefault(code, [])
        for span in [spans] if isinstance(spans, (str, bytes)) else spans:
            pair = _span(note_id, code, span, length)
            if pair not in pairs:
                pairs.append(pair)
            if len(pairs) > MAX_SPANS:
                raise ReviewError(f"note {note_id!r}: more than {MAX_SPANS} evidence spans for {code}; at most "
                                  f"{MAX_SPANS} a code and decision: keep the words that justify it (nothing was "
                                  "saved).")
    return {c: json.dumps(p) for c, p in out.items() if p}


def _span(note_id: str, code: str, span: Any, length: int) -> list[int]:
    """SPAN as [start, end]: two whole numbers with 0 <= start < end <= LENGTH."""
    try:
        start, end = span
    except (TypeError, ValueError):
        start = end = None
    if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in (start, end)):
        raise ReviewError(f"note {note_id!r}: evidence span {str(span)[:40]!r} for {code} is not a pair of character "
                          "offsets; give each span as (start, end), two whole numbers (nothing was saved).")
    if not 0 <= start < end <= length:
        raise ReviewError(f"note {note_id!r}: evidence span {start}:{end} for {code} is outside the note's "
                          f"{length} characters; expected 0 <= start < end <= {length}, offsets into the note's text "
                          "(nothing was saved).")
    return [int(start), int(end)]
