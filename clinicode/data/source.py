"""What one MIMIC release gives prepare's shared steps (`Source`: codes, admissions with notes, titles, their texts),
and the helpers both releases use: dotted codes, deduplicated code rows, texts joined per admission."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from clinicode.codes.icd10 import format_code
from clinicode.errors import DataFormatError

TEXT_BATCH = 2_000      # documents per Parquet row group written


@dataclass
class Source:
    """What one MIMIC release gives the shared steps: codes, admissions with notes, titles, and their texts."""

    release: str                   # "mimic3" or "mimic4"
    icd_version: int
    codes: pd.DataFrame            # HADM_ID int64, SUBJECT_ID, code (dotted), one row per admission and code
    docs: pd.DataFrame             # HADM_ID (sorted, unique), SUBJECT_ID, n_notes: admissions with a note with text
    titles: dict[str, str]         # dotted code -> title
    title_sources: dict[str, str]
    texts: Callable[[np.ndarray], Iterator[tuple[np.ndarray,
                                                 pa.Array]]]  # kept hadm ids -> (ids, joined texts), id order
    note_order: str
    inputs: dict[str, Path]
    dropped: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str, n: int) -> None:
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + int(n)


def _dotted(raw: pd.Series, *, version: int, is_diagnosis: bool, path: str) -> pd.Series:
    """Dotted code per row ("" for a value that is not a code of that version and table); each raw code once."""
    try:
        mapping = {r: format_code(r, version=version, is_diagnosis=is_diagnosis) for r in raw.unique()}
    except DataFormatError as err:
        raise DataFormatError(f"{path}: {err}") from err
    return raw.map(mapping).astype(str)


def coded(source: Source, table: str, raw: pd.DataFrame, column: str, *, is_diagnosis: bool,
           path: str) -> pd.DataFrame:
    dotted = _dotted(raw[column], version=source.icd_version, is_diagnosis=is_diagnosis, path=path)
    malformed = dotted == ""
    source.drop(f"{table}.malformed_code", int(malformed.sum()))  # e.g. 'NA', '401.90000', full-width digits
    return pd.DataFrame({"HADM_ID": raw["HADM_ID"][~malformed].to_numpy(),
                         "SUBJECT_ID": raw["SUBJECT_ID"][~malformed].to_numpy(), "code": dotted[~malformed].to_numpy()})


def dedupe_codes(source: Source, parts: list[pd.DataFrame]) -> pd.DataFrame:
    codes = pd.concat(parts, ignore_index=True)
    n = len(codes)
    codes = codes.drop_duplicates(["HADM_ID", "code"]).reset_index(drop=True)
    source.counts.update(code_rows_kept=n, duplicate_code_rows=n - len(codes))
    return codes


def join_runs(hadm: np.ndarray, text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Join the texts of each run of equal (sorted) hadm ids with one space: (joined texts, first row of each run)."""
    starts = np.flatnonzero(np.r_[True, hadm[1:] != hadm[:-1]])
    offsets = pa.array(np.r_[starts, len(hadm)].astype(np.int64))
    return pc.binary_join(pa.LargeListArray.from_arrays(offsets, text), pa.scalar(" ", pa.large_string())), starts
