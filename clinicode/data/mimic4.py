"""Readers for MIMIC-IV v2.2 (`hosp/`) and MIMIC-IV-Note v2.2 (`note/`), with explicit dtypes (codes are strings).

File discovery and parsing only (`source_mimic4` joins); the discharge table (~3.5 GB of text) is streamed in chunks."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

import pandas as pd

from clinicode.data.mimic import ReadStats, _read_csv, _wrap_chunks
from clinicode.errors import DataFormatError

log = logging.getLogger(__name__)

HOSP, NOTE = "hosp", "note"
DIAGNOSES_ICD, PROCEDURES_ICD = "diagnoses_icd", "procedures_icd"
D_ICD_DIAGNOSES, D_ICD_PROCEDURES = "d_icd_diagnoses", "d_icd_procedures"
DISCHARGE = "discharge"

CODE_COLUMNS = ("SUBJECT_ID", "HADM_ID", "ICD_CODE", "ICD_VERSION")
TITLE_COLUMNS = ("ICD_CODE", "ICD_VERSION", "LONG_TITLE")
NOTE_COLUMNS = ("NOTE_ID", "SUBJECT_ID", "HADM_ID", "NOTE_TYPE", "NOTE_SEQ", "CHARTTIME", "STORETIME", "TEXT")
# Everything is read as text: codes keep their leading zeros, and a note's text hash (duplicate detection) covers
# exactly the characters in the file. Ids are converted afterwards, where a bad value can be named.
_AS_TEXT = {c: str for c in (*CODE_COLUMNS, *TITLE_COLUMNS, *NOTE_COLUMNS)}


def find_table4(folder: Path, sub: str, table: str, *, required: bool = True) -> Path | None:
    """`FOLDER/SUB/TABLE.csv` or `.csv.gz` (names matched case-insensitively; the plain .csv wins).

    Raises:
        DataFormatError: a required table is missing (the message names where it was looked for).
    """
    where = Path(folder) / sub
    wanted = {f"{table}.csv": 0, f"{table}.csv.gz": 1}
    hits = sorted((wanted[p.name.lower()], p.name, p) for p in where.iterdir()
                  if p.name.lower() in wanted and p.is_file()) if where.is_dir() else []
    if hits:
        return hits[0][2]
    if required:
        option = "--note-dir" if sub == NOTE else "--mimic-dir"
        raise DataFormatError(
            f"{sub}/{table}.csv(.gz) not found in {folder}; expected MIMIC-IV's {sub}/{table} "
            f"table there. Pass {option} "
            "pointing at the folder that holds it (PhysioNet ships hosp/ in MIMIC-IV and note/ in MIMIC-IV-Note)."
        )
    return None


def is_mimic4(folder: Path) -> bool:
    """True for a MIMIC-IV folder: it holds hosp/diagnoses_icd.csv(.gz)."""
    return find_table4(folder, HOSP, DIAGNOSES_ICD, required=False) is not None


def _ids(series: pd.Series, path: Path, column: str) -> pd.Series:
    """Integer ids from text (empty -> <NA>); a value that is not an integer is a one-line error naming the column."""
    try:
        return pd.to_numeric(series, errors="raise").astype("Int64")
    except (ValueError, TypeError):
        raise DataFormatError(f"{path}: a value in {column.lower()} is not an integer (or the file is damaged); "
                              "expected MIMIC-IV's integer ids. Re-download or re-extract the file.") from None


def read_codes4(mimic_dir: Path, table: str, *, version: int,
                chunksize: int = 500_000) -> tuple[pd.DataFrame, ReadStats]:
    """Rows of hosp/diagnoses_icd or hosp/procedures_icd of one ICD version, codes as stored (strings, undotted).

    Args:
        table: DIAGNOSES_ICD or PROCEDURES_ICD.
        version: 9 or 10; rows of the other version are skipped (and counted).
    Returns:
        (frame with SUBJECT_ID (Int64), HADM_ID (int64), ICD_CODE (stripped str), the read statistics).
    Raises:
        DataFormatError: missing file or column, unreadable file, non-integer ids or versions, or no rows.
    """
    path = find_table4(mimic_dir, HOSP, table)
    stats = ReadStats(table, str(path))
    reader, names = _read_csv(path, CODE_COLUMNS, _AS_TEXT, chunksize=chunksize)
    rename = {v: k for k, v in names.items()}
    parts = []
    with reader:
        for chunk in _wrap_chunks(path, reader):
            chunk = chunk.rename(columns=rename)
            stats.rows_read += len(chunk)
            ver = _ids(chunk["ICD_VERSION"], path, "ICD_VERSION")
            mine = ver == version
            stats.drop(f"icd_version_{10 if version == 9 else 9}", int((~mine.fillna(False)).sum()))
            chunk = chunk[mine.fillna(False).to_numpy()]
            codes = chunk["ICD_CODE"].str.strip()
            no_code = codes.isna() | (codes == "")
            hadm = _ids(chunk["HADM_ID"], path, "HADM_ID")
            no_hadm = hadm.isna()
            stats.drop("empty_code", int(no_code.sum()))
            stats.drop("no_hadm_id", int((no_hadm & ~no_code).sum()))
            keep = (~(no_code | no_hadm)).to_numpy()
            parts.append(pd.DataFrame({"SUBJECT_ID": _ids(chunk["SUBJECT_ID"], path, "SUBJECT_ID")[keep].to_numpy(),
                                       "HADM_ID": hadm[keep].astype("int64").to_numpy(),
                                       "ICD_CODE": codes[keep].astype(str).to_numpy()}))
    if stats.rows_read == 0:
        raise DataFormatError(f"{path} has a header but no rows; expected one row per assigned "
                              "code. Re-extract the file.")
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"SUBJECT_ID": [], "HADM_ID": [],
                                                                          "ICD_CODE": []})
    stats.rows_kept = len(out)
    log.info("%s (ICD-%d): %d rows read, %d kept, dropped %s", table, version, stats.rows_read, stats.rows_kept,
             stats.dropped)
    return out, stats


def read_titles4(mimic_dir: Path, table: str, *, version: int) -> tuple[dict[str, str], Path | None]:
    """hosp/d_icd_diagnoses or d_icd_procedures as {undotted code: long_title} for one version; ({}, None) if absent."""
    path = find_table4(mimic_dir, HOSP, table, required=False)
    if path is None:
        return {}, None
    df, names = _read_csv(path, TITLE_COLUMNS, _AS_TEXT)
    df = df.rename(columns={v: k for k, v in names.items()})
    df = df[df["ICD_VERSION"].str.strip() == str(version)].dropna(subset=["ICD_CODE"])
    return dict(zip(df["ICD_CODE"].str.strip(), df["LONG_TITLE"].fillna("").str.strip())), path


def stream_discharge(note_dir: Path, *, chunksize: int = 5_000,
                     stats: ReadStats | None = None) -> Iterator[pd.DataFrame]:
    """Stream note/discharge chunk by chunk, dropping (and counting) rows without hadm_id or without text.

    Each row keeps a 64-bit hash of its text as read, so a text repeated within an admission can be dropped later
    without holding the table (Edin et al.'s rule: duplicates by (hadm_id, text); every row has its own note_id, so a
    hash of all columns would keep a repeated text). Only `chunksize` rows are parsed at a time.

    Yields:
        Frames with ROW (position in the file), SUBJECT_ID (Int64), HADM_ID (int64), NOTE_SEQ (int64, -1 when empty),
        NOTE_TYPE, HASH (uint64, of TEXT alone) and TEXT (str).
    Raises:
        DataFormatError: missing file or column, unreadable or truncated file, non-integer ids, or no rows.
    """
    path = find_table4(note_dir, NOTE, DISCHARGE)
    stats = stats if stats is not None else ReadStats(DISCHARGE, str(path))
    reader, names = _read_csv(path, NOTE_COLUMNS, _AS_TEXT, chunksize=chunksize)
    rename = {v: k for k, v in names.items()}
    with reader:
        for chunk in _wrap_chunks(path, reader):
            chunk = chunk.rename(columns=rename)[list(NOTE_COLUMNS)]
            first = stats.rows_read
            stats.rows_read += len(chunk)
            text_hash = pd.util.hash_pandas_object(chunk["TEXT"], index=False).to_numpy()
            hadm = _ids(chunk["HADM_ID"], path, "HADM_ID")
            text = chunk["TEXT"]
            no_text = text.isna() | (text.fillna("").str.strip() == "")
            no_hadm = hadm.isna()
            stats.drop("note_without_hadm_id", int(no_hadm.sum()))
            stats.drop("note_without_text", int((no_text & ~no_hadm).sum()))
            keep = (~(no_text | no_hadm)).to_numpy()
            if not keep.any():
                continue
            seq = _ids(chunk["NOTE_SEQ"], path, "NOTE_SEQ").fillna(-1)
            stats.rows_kept += int(keep.sum())
            yield pd.DataFrame({
                "ROW": (first + pd.RangeIndex(len(chunk)).to_numpy())[keep],
                "SUBJECT_ID": _ids(chunk["SUBJECT_ID"], path, "SUBJECT_ID").to_numpy()[keep],
                "HADM_ID": hadm.to_numpy()[keep].astype("int64"),
                "NOTE_SEQ": seq.to_numpy()[keep].astype("int64"),
                "NOTE_TYPE": chunk["NOTE_TYPE"].fillna("").to_numpy()[keep],
                "HASH": text_hash[keep],
                "TEXT": text.to_numpy()[keep],
            })
    if stats.rows_read == 0:
        raise DataFormatError(f"{path} has a header but no rows; expected MIMIC-IV-Note's 331,794 "
                              "discharge notes. Re-extract it.")
    log.info("%s: %d rows read, %d kept", DISCHARGE, stats.rows_read, stats.rows_kept)



