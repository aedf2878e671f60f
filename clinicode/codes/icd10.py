"""ICD-10 codes as MIMIC-IV stores them (no dots): dot placement, validity, and ICD-10-CM titles from the CMS tables.

The titles come from the `simple-icd-10-cm` package (MIT, shipped data), imported only when asked for; no network."""

from __future__ import annotations

import functools
import re
import warnings
from typing import Iterable

from clinicode.codes.icd9 import format_diagnosis, format_procedure, is_icd9_diagnosis, is_icd9_procedure

# ICD-10-CM: a letter, a digit, then up to 5 letters/digits (3-7 characters; A00 .. Z99.89); ASCII only.
_CM = re.compile(r"[A-Z][0-9][0-9A-Z]{1,5}")
# ICD-10-PCS: exactly 7 characters from digits and letters without I and O.
_PCS = re.compile(r"[0-9A-HJ-NP-Z]{7}")


def is_icd10_cm(code: str) -> bool:
    """True for an ICD-10-CM diagnosis code, dotted or not ('I10', 'J189', 'J18.9', 'S72.001A')."""
    c = code.strip().upper()
    if "." in c:
        head, _, tail = c.partition(".")
        if len(head) != 3 or not tail:
            return False
        c = head + tail
    return _CM.fullmatch(c) is not None


def is_icd10_pcs(code: str) -> bool:
    """True for an ICD-10-PCS procedure code: 7 characters, never dotted ('02HV33Z', '5A1955Z')."""
    return _PCS.fullmatch(code.strip().upper()) is not None


def format_icd10_cm(code: str) -> str:
    """Dotted ICD-10-CM code: the dot after the third character, only when the code is longer ('J189' -> 'J18.9',
    'I10' stays 'I10'). Idempotent."""
    c = code.strip().replace(".", "").upper()
    return f"{c[:3]}.{c[3:]}" if len(c) > 3 else c


def format_icd10_pcs(code: str) -> str:
    """ICD-10-PCS codes carry no dot ('02HV33Z')."""
    return code.strip().upper()


def format_code(raw: str, *, version: int, is_diagnosis: bool) -> str:
    """The dotted code for a raw MIMIC code of the given ICD version and table, or "" when it is not such a code.

    ICD-9 as for MIMIC-III (docs/domain.md section 4); ICD-10-CM after the third character when longer; PCS never.
    A 2-character ICD-9 procedure code raises DataFormatError (see `format_procedure`).
    """
    if version == 9:
        if is_diagnosis:
            return format_diagnosis(raw) if is_icd9_diagnosis(raw) else ""
        return format_procedure(raw) if is_icd9_procedure(raw) else ""
    if version == 10:
        if is_diagnosis:
            return format_icd10_cm(raw) if is_icd10_cm(raw) else ""
        return format_icd10_pcs(raw) if is_icd10_pcs(raw) else ""
    raise ValueError(f"ICD version must be 9 or 10, got {version!r}")


def normalise_code(code: str, known: set[str] | frozenset[str] = frozenset()) -> str:
    """A code from a list (top50_codes.txt, a user's labels) in clinicode's dotted form, whatever its dotting.

    Args:
        code: as written in the list ('J189', 'J18.9', '02HV33Z', '401.9').
        known: the dotted codes of the data at hand: when the code matches one of them, undotted or dotted, that one
            is returned (this settles 7-character codes that could be ICD-10-CM or ICD-10-PCS, e.g. 'S72001A').
    Returns:
        The dotted code. Without a match in `known`: ICD-10-CM codes of 3-6 characters get their dot; everything else
        is returned as given (undotted ICD-9 cannot be told apart from a diagnosis or procedure by its characters).
    """
    c = code.strip()
    if c in known:
        return c
    if "." not in c and is_icd10_cm(c):
        dotted = format_icd10_cm(c)
        if dotted in known or len(c) < 7:
            return dotted
    return c


@functools.lru_cache(maxsize=1)
def _cm_module():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the package warns about its own deprecations at import
        import simple_icd_10_cm as cm
    return cm


# No maintained, clearly licensed package ships the CMS ICD-10-PCS tables complete (see docs/domain.md), so a PCS code
# without a title from the data says what it is rather than showing a blank.
PCS_NO_TITLE = "ICD-10-PCS, no title"
PCS_SECTIONS = frozenset("0123456789BCDFGHX")  # the first character of every ICD-10-PCS code is one of its sections


@functools.lru_cache(maxsize=1)
def icd10_cm_catalogue() -> tuple[tuple[str, str], ...]:
    """(code, title) of every ICD-10-CM category and code in the CMS tables (`simple-icd-10-cm`), dotted; chapters
    (numbers) and blocks (ranges) are not codes and are left out. Built once per process (~1 s)."""
    cm = _cm_module()
    return tuple((c, cm.get_description(c)) for c in cm.get_all_codes(with_dots=True)
                 if "-" not in c and not c.isdigit())


@functools.lru_cache(maxsize=1)
def icd10_cm_billable_titles() -> tuple[tuple[str, str], ...]:
    """(code, title) of every billable ICD-10-CM code (a leaf of the CMS tables in `simple-icd-10-cm`: 74,736 codes),
    dotted, in the tables' order: the candidates `clinicode.codes.suggest` suggests from. Built once per process."""
    cm = _cm_module()
    return tuple((c, cm.get_description(c)) for c in cm.get_all_codes(with_dots=True) if cm.is_leaf(c))


def icd10_cm_titles(codes: Iterable[str]) -> dict[str, str]:
    """{code: title} for the ICD-10-CM codes among CODES that the CMS tables know (dotted or not); others are left out.

    The titles come from the CMS ICD-10-CM tabular list shipped in `simple-icd-10-cm` (no network).
    """
    wanted = [c for c in codes if is_icd10_cm(c) and not is_icd10_pcs(c)]
    if not wanted:
        return {}
    cm = _cm_module()
    out = {}
    for code in wanted:
        dotted = format_icd10_cm(code)
        if cm.is_valid_item(dotted):
            out[code] = cm.get_description(dotted)
    return out
