"""ICD-9 dot placement for MIMIC's undotted codes, and the code-description lookup (pure functions)."""

from __future__ import annotations

from pathlib import Path

from clinicode.errors import DataFormatError


def format_diagnosis(code: str) -> str:
    """Dotted ICD-9-CM diagnosis code: E codes after 4 characters, numeric and V codes after 3.

    Idempotent (an existing dot is removed first); leading zeros are kept: '0389' -> '038.9'.
    """
    c = code.strip().replace(".", "").upper()
    if c.startswith("E"):
        return f"{c[:4]}.{c[4:]}" if len(c) > 4 else c
    return f"{c[:3]}.{c[3:]}" if len(c) > 3 else c


def format_procedure(code: str) -> str:
    """Dotted ICD-9-CM procedure code: the dot after 2 characters ('0040' -> '00.40', '966' -> '96.6').

    Raises:
        DataFormatError: for a code of 2 characters or fewer, which string-typed MIMIC never holds
            (CAML would have written 'xx.'; DOMAIN.md section 4 treats it as a data error).
    """
    c = code.strip().replace(".", "")
    if len(c) <= 2:
        raise DataFormatError(
            f"procedure code {code!r} has {len(c)} characters; ICD-9 procedure codes have 3-4. "
            "Read PROCEDURES_ICD.ICD9_CODE as strings so leading zeros survive."
        )
    return f"{c[:2]}.{c[2:]}"


def format_code(code: str, *, is_diagnosis: bool) -> str:
    """Dotted code for a raw MIMIC code from DIAGNOSES_ICD (is_diagnosis) or PROCEDURES_ICD."""
    return format_diagnosis(code) if is_diagnosis else format_procedure(code)


def load_descriptions_tsv(path: Path) -> dict[str, str]:
    """Read CAML's ICD9_descriptions.tsv (code<TAB>description, no header) into a dict."""
    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                code, _, desc = line.rstrip("\n").partition("\t")
                if code:
                    out[code.strip()] = desc.strip()
    except OSError as err:
        raise DataFormatError(f"{path}: cannot read code descriptions ({err}).") from err
    return out
