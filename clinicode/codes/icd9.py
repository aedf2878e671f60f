"""ICD-9 dot placement for MIMIC's undotted codes, and the code-description lookup (pure functions)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from clinicode.errors import DataFormatError
from clinicode.files import LineTooLong, read_lines_bounded

# Undotted ICD-9-CM as MIMIC stores them, ASCII digits only (a full-width '４０１９' or 'NA' is not a code):
# diagnoses 001-999 with up to 2 decimals, V01-V91 with up to 2, E000-E999 with 1; procedures 00-99 with 1-2.
_DX = re.compile(r"[0-9]{3}[0-9]{0,2}|V[0-9]{2}[0-9]{0,2}|E[0-9]{3}[0-9]?")
_PX = re.compile(r"[0-9]{2}[0-9]{1,2}")


def is_icd9_diagnosis(code: str) -> bool:
    """True for an ICD-9-CM diagnosis code, dotted or not ('4019', '401.9', 'V5861', 'E8497')."""
    c = code.strip().upper()
    if "." in c:
        head, _, tail = c.partition(".")
        if not tail or "." in tail or len(head) != (4 if head.startswith("E") else 3):
            return False
        c = head + tail
    return _DX.fullmatch(c) is not None


def is_icd9_procedure(code: str) -> bool:
    """True for an ICD-9-CM procedure code of 3-4 digits, dotted or not ('3893', '38.93', '966');
    a 2-character code is left to `format_procedure`, which names it as a data error."""
    c = code.strip()
    if "." in c:
        head, _, tail = c.partition(".")
        if len(head) != 2 or not tail or "." in tail:
            return False
        c = head + tail
    return (len(c) <= 2 and c.isascii() and c.isdigit()) or _PX.fullmatch(c) is not None


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
            (CAML would have written 'xx.'; docs/domain.md section 4 treats it as a data error).
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


MAX_DESCRIPTION_LINE = 64 << 10  # bytes per line of a descriptions file (real ones are under 300)


# First lines that name the columns instead of holding a code (MIMIC's d_icd_* tables, pandas' to_csv(sep="\t")).
_HEADER_CODES = frozenset({"code", "codes", "icd_code", "icd9_code", "icd10_code", "icd", "id"})
_HEADER_TITLES = frozenset({"title", "titles", "description", "descriptions", "long_title", "short_title", "desc",
                            "name", ""})


def load_descriptions_tsv(path: Path, *, unique: bool = False) -> dict[str, str]:
    """Read CAML's ICD9_descriptions.tsv (code<TAB>description) into a dict.

    A UTF-8 byte-order mark is dropped, and a first line naming the columns ('code<TAB>title', 'icd_code<TAB>
    long_title', ...) is a header, not a code. UNIQUE (`predict --titles`): a code given twice is refused (one line
    naming it and both lines), never one of its titles dropped in silence; otherwise the last line wins.
    """
    out: dict[str, str] = {}
    first_line: dict[str, int] = {}
    try:
        with (gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")) as f:
            for n, raw in enumerate(read_lines_bounded(f, MAX_DESCRIPTION_LINE), start=1):
                if isinstance(raw, LineTooLong):  # e.g. /dev/zero or a binary file: stop at once, not out of memory
                    raise DataFormatError(f"{path}: line {n} is longer than {MAX_DESCRIPTION_LINE >> 10} KiB; expected "
                                          "code<TAB>description lines (a text file).")
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise DataFormatError(f"{path}: line {n} is not UTF-8 text; save the "
                                          "descriptions file as UTF-8.") from None
                if n == 1:
                    line = line.removeprefix("\ufeff")
                code, _, desc = line.rstrip("\r\n").partition("\t")
                if n == 1 and code.strip().lower() in _HEADER_CODES and desc.strip().lower() in _HEADER_TITLES:
                    continue
                code = code.strip()
                if not code:
                    continue
                if unique and code in first_line:
                    raise DataFormatError(f"{path}: code {code[:40]!r} is given twice (lines {first_line[code]:,} and "
                                          f"{n:,}); keep one code<TAB>title line per code.")
                first_line.setdefault(code, n)
                out[code] = desc.strip()
    except (OSError, EOFError) as err:
        raise DataFormatError(f"{path}: cannot read code descriptions "
                              f"({getattr(err, 'strerror', None) or type(err).__name__}).") from None
    return out
