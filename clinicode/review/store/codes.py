"""A code as a coder types it: checked (printable, not blank, not over-long) and matched to the one spelling it has
among a note's codes in the note's code system."""

from __future__ import annotations

from typing import Any

from clinicode.codes.systems import CodeSystem
from clinicode.review.store.errors import ReviewError

MAX_CODE_CHARS = 40  # the longest code of any system is 16 characters ('MESH:D000069279')


def same_code(system: CodeSystem, code: str, codes: set[str]) -> str | None:
    """The one of CODES that CODE names in the note's code system (`CodeSystem.canonical` on both sides: 'y92230' finds
    'Y92.230'; on ICD-9-CM '0040' is diagnosis 004.0 and never procedure 00.40), else None."""
    if code in codes:
        return code
    spelled = system.canonical(code, codes)  # the codes' own reading first: '3893' is 38.93 when that is one
    if spelled is not None:
        if spelled in codes:
            return spelled
        by_spelling = {system.canonical(c): c for c in codes}
        if spelled in by_spelling:
            return by_spelling[spelled]
    keys = {c.upper(): c for c in codes}  # a checkpoint's own labels (no standard system): any case
    return keys.get(code.upper())


def norm_code(code: Any) -> str:
    """A code as typed, stripped; blank, over-long or holding control characters is refused (the code system decides
    the rest, in `same_code` and the services that store it)."""
    c = str(code).strip()
    if not c or len(c) > MAX_CODE_CHARS or not c.isprintable():
        raise ReviewError(f"{c[:20]!r} is not a code; expected a code of the model's code system such as 428.0, "
                          "I50.9, 02HV33Z or D009369 (dotted or not, any case).")
    return c
