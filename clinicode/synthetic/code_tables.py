"""The synthetic generators' code tables, read from the package's data files (synthetic/tables/*.json).

Public CMS titles, Nguyen et al. 2023's public top-50 lists and invented signal phrases: nothing from MIMIC."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

CodeRow = tuple[str, bool, str, tuple[str, ...]]  # (dotted code, is_diagnosis, long title, phrases)


def _read(name: str) -> dict[str, Any]:
    return json.loads(resources.files("clinicode.synthetic").joinpath("tables", name).read_text(encoding="utf-8"))


def _code_rows(rows: list[list[Any]]) -> tuple[CodeRow, ...]:
    return tuple((str(c), bool(dx), str(t), tuple(p)) for c, dx, t, p in rows)


def _pairs(rows: list[list[str]]) -> tuple[tuple[str, str], ...]:
    return tuple((c, t) for c, t in rows)


_M3 = _read("mimic3_codes.json")
_M4 = _read("mimic4_codes.json")

# MIMIC-III demo: CAML's top 50 in CAML's order, then codes outside it (E and V codes, 00.40, ...).
CODE_INFO: tuple[CodeRow, ...] = _code_rows(_M3["caml_top50"])
EXTRA_CODE_INFO: tuple[CodeRow, ...] = _code_rows(_M3["extra"])

# MIMIC-IV demo.
TOP50_ICD9: tuple[str, ...] = tuple(_M4["top50_icd9"])
TOP50_ICD10: tuple[str, ...] = tuple(_M4["top50_icd10"])
TOP_ICD9_PROCEDURES: frozenset[str] = frozenset(_M4["top_icd9_procedures"])
# ICD-9 top-50 codes missing from CODE_INFO: official CMS long title and invented signal phrases.
ICD9_TOP_EXTRA: dict[str, tuple[str, tuple[str, ...]]] = {
    c: (t, tuple(p)) for c, (t, p) in _M4["icd9_top_extra"].items()}
# ICD-10 top-50: invented signal phrases (titles of the CM codes come from simple_icd_10_cm).
ICD10_TOP_PHRASES: dict[str, tuple[str, ...]] = {c: tuple(p) for c, p in _M4["icd10_top_phrases"].items()}
# ICD-10-PCS: official CMS long titles (the top-50 code first, then tail codes).
ICD10_PCS: tuple[tuple[str, str], ...] = _pairs(_M4["icd10_pcs"])
# ICD-10-CM tail codes placed first (3-character billable codes and common inpatient codes); the rest of the tail is
# a fixed pseudo-random draw of simple_icd_10_cm's billable codes.
ICD10_CM_TAIL_FIRST: tuple[str, ...] = tuple(_M4["icd10_cm_tail_first"])
# ICD-9-CM tail: real codes with official CMS long titles, leading-zero, V and E codes first.
ICD9_DX_TAIL: tuple[tuple[str, str], ...] = _pairs(_M4["icd9_dx_tail"])
ICD9_PX_TAIL: tuple[tuple[str, str], ...] = _pairs(_M4["icd9_px_tail"])
