"""Readers for the MIMIC-III v1.4 tables clinicode uses, with explicit dtypes (codes are always strings).

File discovery (.csv or .csv.gz) and parsing only; never joins notes or builds labels (`source_mimic3` does)."""

from __future__ import annotations

import gzip
import logging
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pandas as pd

from clinicode.errors import DataFormatError
from clinicode.formats import describe_columns

log = logging.getLogger(__name__)

NOTEEVENTS = "NOTEEVENTS"
DIAGNOSES_ICD = "DIAGNOSES_ICD"
PROCEDURES_ICD = "PROCEDURES_ICD"
D_ICD_DIAGNOSES = "D_ICD_DIAGNOSES"
D_ICD_PROCEDURES = "D_ICD_PROCEDURES"
TABLES = (NOTEEVENTS, DIAGNOSES_ICD, PROCEDURES_ICD, D_ICD_DIAGNOSES, D_ICD_PROCEDURES)

DISCHARGE_CATEGORY = "Discharge summary"
NOTE_COLUMNS = ("ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CATEGORY", "DESCRIPTION", "TEXT")
CODE_COLUMNS = ("SUBJECT_ID", "HADM_ID", "ICD9_CODE")
TITLE_COLUMNS = ("ICD9_CODE", "LONG_TITLE")

# HADM_ID and friends are nullable integers: a float column would turn 123456 into 123456.0 and
# silently stop matching the split files (docs/domain.md section 2). Everything textual stays a string.
_NOTE_DTYPES = {
    "ROW_ID": "Int64", "SUBJECT_ID": "Int64", "HADM_ID": "Int64",
    "CHARTDATE": str, "CATEGORY": str, "DESCRIPTION": str, "TEXT": str,
}
_CODE_DTYPES = {"SUBJECT_ID": "Int64", "HADM_ID": "Int64", "ICD9_CODE": str}
_TITLE_DTYPES = {"ICD9_CODE": str, "LONG_TITLE": str}

# What a damaged or non-CSV file raises from inside pandas' reader.
_READ_ERRORS = (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError, ValueError, pd.errors.ParserError)


@dataclass
class ReadStats:
    """Row counts from one table read: rows seen, rows kept, and rows dropped per reason."""

    table: str
    path: str
    rows_read: int = 0
    rows_kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str, n: int) -> None:
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + int(n)


def find_table(mimic_dir: Path, table: str, *, required: bool = True) -> Path | None:
    """Locate `TABLE.csv` or `TABLE.csv.gz` in `mimic_dir`, matching the file name case-insensitively.

    Args:
        mimic_dir: the MIMIC-III v1.4 folder.
        table: the table stem, e.g. "NOTEEVENTS".
        required: raise when absent (otherwise return None).
    Returns:
        The file's path; the uncompressed `.csv` wins when both exist.
    Raises:
        DataFormatError: if `mimic_dir` is not a folder, or a required table is missing.
    """
    mimic_dir = Path(mimic_dir)
    if not mimic_dir.is_dir():
        raise DataFormatError(
            f"MIMIC folder {mimic_dir} does not exist or is not a folder; pass --mimic-dir pointing at MIMIC-III v1.4."
        )
    wanted = {f"{table.lower()}.csv": 0, f"{table.lower()}.csv.gz": 1}
    hits = sorted((wanted[p.name.lower()], p.name,
                   p) for p in mimic_dir.iterdir() if p.name.lower() in wanted and p.is_file())
    if hits:
        return hits[0][2]
    if required:
        raise DataFormatError(
            f"{table}.csv(.gz) not found in {mimic_dir}; expected MIMIC-III v1.4's {table} table there "
            "(download it from PhysioNet or generate synthetic data with `clinicode demo-data`)."
        )
    return None


def _release(path: Path) -> str:
    """'MIMIC-IV v2.2' for a table in hosp/ or note/ (MIMIC-IV's layout), else 'MIMIC-III v1.4': for messages."""
    return "MIMIC-IV v2.2" if Path(path).parent.name in ("hosp", "note") else "MIMIC-III v1.4"


def _read_header(path: Path, required: tuple[str, ...]) -> dict[str, str]:
    """Map each required (upper-case) column to its spelling in the file; raise naming what is missing."""
    try:
        header = pd.read_csv(path, nrows=0, encoding="utf-8")
    except pd.errors.EmptyDataError as err:
        raise DataFormatError(f"{path} is empty; expected a CSV with header "
                              f"{','.join(required)}. Re-extract the file.") from err
    except _READ_ERRORS as err:
        raise DataFormatError(
            f"{path} cannot be read as CSV ({type(err).__name__}); the file is probably truncated or not gzip/CSV. "
            "Re-download or re-extract it."
        ) from err
    by_upper = {str(c).strip().upper(): str(c) for c in header.columns}
    missing = [c for c in required if c not in by_upper]
    if missing:
        raise DataFormatError(
            f"{path} has no column {', '.join(missing)}; found {describe_columns(header.columns)}. "
            f"Is this the {_release(path)} table?"
        )
    return {c: by_upper[c] for c in required}


def _read_csv(path: Path, columns: tuple[str, ...], dtypes: dict, **kwargs):
    names = _read_header(path, columns)
    try:
        return pd.read_csv(
            path,
            usecols=list(names.values()),
            dtype={names[c]: dtypes[c] for c in columns},
            encoding="utf-8",
            keep_default_na=False,
            na_values=[""],
            **kwargs,
        ), names
    except _READ_ERRORS as err:
        raise _content_error(path, err, columns, "cannot be parsed") from err


def _wrap_chunks(path: Path, chunks) -> Iterator[pd.DataFrame]:
    """Re-raise errors that surface mid-stream (a truncated gzip fails only at its end)."""
    try:
        yield from chunks
    except _READ_ERRORS as err:
        raise _content_error(path, err, None, "failed mid-way") from err


def _content_error(path: Path, err: BaseException, columns: tuple[str, ...] | None, what: str) -> DataFormatError:
    """One-line message for a table whose bytes or values do not parse; never quotes the offending value."""
    if isinstance(err, UnicodeDecodeError):
        return DataFormatError(f"{path} is not valid UTF-8 ({err.reason}); "
                               f"{_release(path).split()[0]} is UTF-8, re-save or "
                               "re-extract the file.")
    if isinstance(err, ValueError) and not isinstance(err, (UnicodeError, pd.errors.ParserError)):
        cols = ", ".join(c for c in (columns or ("ROW_ID", "SUBJECT_ID", "HADM_ID")) if c.endswith("_ID"))
        return DataFormatError(
            f"{path} {what}: a value in {cols} is not an integer (or the file is damaged); "
            f"expected {_release(path)}'s integer ids. Re-download or re-extract the file."
        )
    return DataFormatError(
        f"{path} {what} ({type(err).__name__}); the file is probably truncated or corrupt. "
        "Re-download or re-extract it."
    )


def read_codes(mimic_dir: Path, table: str) -> tuple[pd.DataFrame, ReadStats]:
    """Read DIAGNOSES_ICD or PROCEDURES_ICD with string codes.

    Args:
        mimic_dir: the MIMIC-III folder.
        table: DIAGNOSES_ICD or PROCEDURES_ICD.
    Returns:
        A frame with SUBJECT_ID (Int64), HADM_ID (int64) and ICD9_CODE (stripped str, undotted as stored),
        plus the read statistics (rows without HADM_ID and empty codes are dropped and counted).
    Raises:
        DataFormatError: missing file or column, unreadable file, or a table with no rows.
    """
    path = find_table(mimic_dir, table)
    df, names = _read_csv(path, CODE_COLUMNS, _CODE_DTYPES)
    df = df.rename(columns={v: k for k, v in names.items()})
    stats = ReadStats(table, str(path), rows_read=len(df))
    if not len(df):
        raise DataFormatError(f"{path} has a header but no rows; expected one row per assigned "
                              "code. Re-extract the file.")
    codes = df["ICD9_CODE"].str.strip()
    no_code = codes.isna() | (codes == "")
    no_hadm = df["HADM_ID"].isna()
    stats.drop("empty_code", int(no_code.sum()))
    stats.drop("no_hadm_id", int((no_hadm & ~no_code).sum()))
    keep = ~(no_code | no_hadm)
    out = pd.DataFrame({
        "SUBJECT_ID": df["SUBJECT_ID"][keep],
        "HADM_ID": df["HADM_ID"][keep].astype("int64"),
        "ICD9_CODE": codes[keep].astype(str),
    }).reset_index(drop=True)
    stats.rows_kept = len(out)
    log.info("%s: %d rows read, %d kept, dropped %s", table, stats.rows_read, stats.rows_kept, stats.dropped)
    return out, stats


def read_titles(mimic_dir: Path, table: str) -> tuple[dict[str, str], Path | None]:
    """Read D_ICD_DIAGNOSES or D_ICD_PROCEDURES as {undotted code: LONG_TITLE}; ({}, None) when absent.

    Raises:
        DataFormatError: if the file exists but is unreadable or lacks ICD9_CODE / LONG_TITLE.
    """
    path = find_table(mimic_dir, table, required=False)
    if path is None:
        return {}, None
    df, names = _read_csv(path, TITLE_COLUMNS, _TITLE_DTYPES)
    df = df.rename(columns={v: k for k, v in names.items()}).dropna(subset=["ICD9_CODE"])
    titles = dict(zip(df["ICD9_CODE"].str.strip(), df["LONG_TITLE"].fillna("").str.strip()))
    return titles, path


def iter_discharge_summaries(mimic_dir: Path, *, chunksize: int = 20_000,
                             stats: ReadStats | None = None) -> Iterator[pd.DataFrame]:
    """Stream NOTEEVENTS and yield only its discharge-summary rows (Report and Addendum), chunk by chunk.

    Never holds more than `chunksize` raw rows; only the needed columns are parsed.

    Args:
        mimic_dir: the MIMIC-III folder.
        chunksize: raw rows parsed per chunk.
        stats: updated in place with rows read/kept and drops (rows without HADM_ID).
    Yields:
        Frames with ROW_ID, SUBJECT_ID, HADM_ID (int64), CHARTDATE, DESCRIPTION, TEXT.
    Raises:
        DataFormatError: missing file or column, unreadable or truncated file, or an empty table.
    """
    path = find_table(mimic_dir, NOTEEVENTS)
    stats = stats if stats is not None else ReadStats(NOTEEVENTS, str(path))
    reader, names = _read_csv(path, NOTE_COLUMNS, _NOTE_DTYPES, chunksize=chunksize)
    rename = {v: k for k, v in names.items()}
    with reader:
        for chunk in _wrap_chunks(path, reader):
            stats.rows_read += len(chunk)
            chunk = chunk.rename(columns=rename)
            chunk = chunk[chunk["CATEGORY"] == DISCHARGE_CATEGORY]
            no_hadm = chunk["HADM_ID"].isna()
            stats.drop("discharge_summary_without_hadm_id", int(no_hadm.sum()))
            chunk = chunk[~no_hadm]
            if not len(chunk):
                continue
            stats.rows_kept += len(chunk)
            yield pd.DataFrame({
                "ROW_ID": chunk["ROW_ID"],
                "SUBJECT_ID": chunk["SUBJECT_ID"],
                "HADM_ID": chunk["HADM_ID"].astype("int64"),
                "CHARTDATE": chunk["CHARTDATE"],
                "DESCRIPTION": chunk["DESCRIPTION"],
                "TEXT": chunk["TEXT"].fillna(""),
            })
    if stats.rows_read == 0:
        raise DataFormatError(f"{path} has a header but no rows; expected MIMIC-III's 2,083,180 "
                              "notes. Re-extract the file.")
    log.info("%s: %d rows read, %d discharge-summary rows kept", NOTEEVENTS, stats.rows_read, stats.rows_kept)


def read_discharge_summaries(mimic_dir: Path, *, chunksize: int = 20_000) -> tuple[pd.DataFrame, ReadStats]:
    """All discharge-summary rows of NOTEEVENTS (streamed; other categories are never held in memory).

    Raises:
        DataFormatError: as `iter_discharge_summaries`, and when no discharge summary is found.
    """
    path = find_table(mimic_dir, NOTEEVENTS)
    stats = ReadStats(NOTEEVENTS, str(path))
    parts = list(iter_discharge_summaries(mimic_dir, chunksize=chunksize, stats=stats))
    if not parts:
        raise DataFormatError(
            f"No discharge summaries in {path.name} (read {stats.rows_read:,} rows; expected CATEGORY == "
            f"'{DISCHARGE_CATEGORY}'). Is --mimic-dir the MIMIC-III v1.4 folder?"
        )
    return pd.concat(parts, ignore_index=True), stats
