"""MIMIC-III's `Source` for prepare: DIAGNOSES_ICD and PROCEDURES_ICD codes, NOTEEVENTS' discharge summaries joined
per admission in CAML's order (docs/domain.md sections 3-5), titles from D_ICD_* and ICD9_descriptions.tsv."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from clinicode.codes.icd9 import load_descriptions_tsv
from clinicode.codes.icd10 import format_code
from clinicode.config import PrepareConfig
from clinicode.data import mimic
from clinicode.data.source import TEXT_BATCH, Source, coded, dedupe_codes, join_runs
from clinicode.data.splits import resolve

NOTE_ORDER_MIMIC3 = (
    "Discharge-summary rows (DESCRIPTION 'Report' and 'Addendum') of one HADM_ID joined with a single space, "
    "ordered Report before Addendum, then CHARTDATE, then ROW_ID; rows without text dropped; ISERROR not filtered "
    "(CAML parity)."
)
DESCRIPTIONS_TSV = "ICD9_descriptions.tsv"


def join_notes(notes: pd.DataFrame) -> pd.DataFrame:
    """One row per HADM_ID: SUBJECT_ID and the joined TEXT, in clinicode's MIMIC-III note order.

    Only the key columns are sorted; TEXT is gathered once in that order and joined per admission in Arrow,
    so the note text exists at most twice in memory (real-size NOTEEVENTS: peak ~1.8 GB instead of ~3 GB).
    """
    keys = pd.DataFrame({
        "HADM_ID": notes["HADM_ID"], "_addendum": (notes["DESCRIPTION"] != "Report").astype("int8"),
        "CHARTDATE": notes["CHARTDATE"], "ROW_ID": notes["ROW_ID"], "SUBJECT_ID": notes["SUBJECT_ID"],
    }).reset_index(drop=True)
    keys = keys.sort_values(["HADM_ID", "_addendum", "CHARTDATE", "ROW_ID"], na_position="last", kind="stable")
    order = pa.array(keys.index.to_numpy())
    text = pa.chunked_array([pa.array(notes["TEXT"].array, type=pa.large_string())]).combine_chunks().take(order)
    del notes["TEXT"]  # the caller is done with it: free the unsorted copy now
    hadm = keys["HADM_ID"].to_numpy()
    joined, starts = join_runs(hadm, text)
    first = keys.iloc[starts]
    subject = keys.groupby("HADM_ID", sort=True)["SUBJECT_ID"].first()                # first non-null per admission
    return pd.DataFrame({
        "HADM_ID": first["HADM_ID"].to_numpy(),
        "SUBJECT_ID": subject.reindex(first["HADM_ID"]).to_numpy(),
        "TEXT": joined.to_pandas(),                                                   # Arrow-backed strings
        "n_notes": np.diff(np.r_[starts, len(hadm)]),
    })


def mimic3_source(mimic_dir: Path, splits_dir: Path | None, cfg: PrepareConfig) -> Source:
    paths = {t: mimic.find_table(mimic_dir, t) for t in (mimic.NOTEEVENTS, mimic.DIAGNOSES_ICD, mimic.PROCEDURES_ICD)}
    titles, sources = _mimic3_titles(mimic_dir, splits_dir)
    source = Source("mimic3", 9, pd.DataFrame(), pd.DataFrame(), titles, sources, lambda keep: iter(()),
                     NOTE_ORDER_MIMIC3, dict(paths))
    parts = []
    for table, is_dx in ((mimic.DIAGNOSES_ICD, True), (mimic.PROCEDURES_ICD, False)):
        raw, stats = mimic.read_codes(mimic_dir, table)
        for reason, n in stats.dropped.items():
            source.drop(f"{table}.{reason}", n)
        parts.append(coded(source, table, raw, "ICD9_CODE", is_diagnosis=is_dx, path=stats.path))
    source.codes = dedupe_codes(source, parts)

    notes, note_stats = mimic.read_discharge_summaries(mimic_dir, chunksize=cfg.chunksize)
    for reason, n in note_stats.dropped.items():
        source.drop(f"NOTEEVENTS.{reason}", n)
    empty = notes["TEXT"].str.strip() == ""
    source.drop("NOTEEVENTS.discharge_summary_without_text", int(empty.sum()))
    source.counts.update(noteevents_rows_read=note_stats.rows_read, discharge_summary_rows=len(notes))
    docs = join_notes(notes[~empty.to_numpy()].reset_index(drop=True))
    del notes
    texts = docs.pop("TEXT")
    source.docs = docs

    def joined(keep: np.ndarray) -> Iterator[tuple[np.ndarray, pa.Array]]:
        rows = np.flatnonzero(np.isin(docs["HADM_ID"].to_numpy(), keep))
        arr = pa.array(texts.array, type=pa.large_string())
        for lo in range(0, len(rows), TEXT_BATCH):
            take = rows[lo:lo + TEXT_BATCH]
            yield docs["HADM_ID"].to_numpy()[take], arr.take(pa.array(take))

    source.texts = joined
    return source


def _mimic3_titles(mimic_dir: Path, splits_dir: Path | None) -> tuple[dict[str, str], dict[str, str]]:
    """Dotted code -> LONG_TITLE from D_ICD_* (mapped through the dotted code), ICD9_descriptions.tsv as fallback."""
    out: dict[str, str] = {}
    sources: dict[str, str] = {}
    tsv = resolve(Path(splits_dir) / DESCRIPTIONS_TSV) if splits_dir is not None else None
    if tsv is not None and tsv.is_file():
        out.update(load_descriptions_tsv(tsv))
        sources["tsv"] = str(tsv)
    for table, is_dx in ((mimic.D_ICD_DIAGNOSES, True), (mimic.D_ICD_PROCEDURES, False)):
        titles, path = mimic.read_titles(mimic_dir, table)
        if path is None:
            continue
        sources[table] = str(path)
        for raw, title in titles.items():
            if raw and title and (is_dx or len(raw.replace(".", "")) > 2):
                dotted = format_code(raw, version=9, is_diagnosis=is_dx)
                if dotted:
                    out[dotted] = title  # MIMIC's own title wins over the TSV
    return out, sources
