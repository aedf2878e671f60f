"""MIMIC-IV's `Source` for prepare: hosp/ codes of one ICD version, and MIMIC-IV-Note's note/discharge streamed into
hadm-ordered compressed bucket files inside the output's temporary folder, so memory stays bounded (section 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from clinicode.codes.icd10 import format_code
from clinicode.config import PrepareConfig
from clinicode.data import mimic, mimic4
from clinicode.data.source import TEXT_BATCH, Source, coded, dedupe_codes, join_runs
from clinicode.errors import DataFormatError

NOTE_ORDER_MIMIC4 = (
    "note/discharge rows of one hadm_id (summaries and addenda) joined with a single space in note_seq order, then "
    "file order; rows without text dropped, a text repeated within an admission kept once (first in file order, "
    "Edin et al.'s (hadm_id, text) rule); no other note table is read."
)
_BUCKET_WIDTH = 100_000  # hadm_ids per note bucket: ~3,000 MIMIC-IV admissions, ~35 MB of text


def mimic4_source(mimic_dir: Path, note_dir: Path, cfg: PrepareConfig, work: Path) -> Source:
    """MIMIC-IV codes of one ICD version, and note/discharge streamed into hadm-ordered bucket files under WORK."""
    version = int(cfg.icd_version)  # type: ignore[arg-type]
    paths = {t: mimic4.find_table4(mimic_dir, mimic4.HOSP, t) for t in (mimic4.DIAGNOSES_ICD, mimic4.PROCEDURES_ICD)}
    paths[mimic4.DISCHARGE] = mimic4.find_table4(note_dir, mimic4.NOTE, mimic4.DISCHARGE)
    titles, sources = _titles4(mimic_dir, version)
    source = Source("mimic4", version, pd.DataFrame(), pd.DataFrame(), titles, sources, lambda keep: iter(()),
                     NOTE_ORDER_MIMIC4, dict(paths))
    parts = []
    for table, is_dx in ((mimic4.DIAGNOSES_ICD, True), (mimic4.PROCEDURES_ICD, False)):
        raw, stats = mimic4.read_codes4(mimic_dir, table, version=version)
        for reason, n in stats.dropped.items():
            source.drop(f"{table}.{reason}", n)
        parts.append(coded(source, table, raw, "ICD_CODE", is_diagnosis=is_dx, path=stats.path))
    source.codes = dedupe_codes(source, parts)

    # Notes: one streamed pass. Each kept row goes to the bucket file of its hadm_id range (text never held whole);
    # the small per-row keys stay in memory to find repeated texts of an admission and to count notes per admission.
    buckets = work / ".notes"
    buckets.mkdir()
    keys, stats = _bucket_notes(note_dir, paths[mimic4.DISCHARGE], cfg.note_chunksize, buckets)
    for reason, n in stats.dropped.items():
        source.drop(f"discharge.{reason}", n)
    if not keys:
        raise DataFormatError(f"No discharge note with text in {paths[mimic4.DISCHARGE]} (read "
                              f"{stats.rows_read:,} rows). "
                              "Is --note-dir the MIMIC-IV-Note v2.2 folder?")
    rows = pd.concat(keys, ignore_index=True)
    dup = rows.duplicated(["HADM_ID", "HASH"])
    source.drop("discharge.duplicate_text_of_admission", int(dup.sum()))
    rows = rows[~dup.to_numpy()]
    source.counts.update(discharge_rows_read=stats.rows_read, discharge_rows_kept=len(rows))
    per = rows.groupby("HADM_ID", sort=True)
    source.docs = pd.DataFrame({"SUBJECT_ID": per["SUBJECT_ID"].first(), "n_notes": per.size()}).reset_index()
    source.texts = _bucket_texts(buckets)
    return source


def _titles4(mimic_dir: Path, version: int) -> tuple[dict[str, str], dict[str, str]]:
    """Dotted code -> long title of VERSION from hosp/d_icd_*, and the files they came from."""
    titles: dict[str, str] = {}
    sources: dict[str, str] = {}
    for table, is_dx in ((mimic4.D_ICD_DIAGNOSES, True), (mimic4.D_ICD_PROCEDURES, False)):
        raw_titles, path = mimic4.read_titles4(mimic_dir, table, version=version)
        if path is not None:
            sources[table] = str(path)
            for raw, title in raw_titles.items():
                dotted = format_code(raw, version=version, is_diagnosis=is_dx) if raw and title else ""
                if dotted:
                    titles[dotted] = title
    return titles, sources


def _bucket_notes(note_dir: Path, path: Path, chunksize: int,
                  buckets: Path) -> tuple[list[pd.DataFrame], mimic.ReadStats]:
    """Stream note/discharge (at PATH) into one lz4 Arrow file per hadm_id range in BUCKETS; the per-row keys."""
    schema = pa.schema([("ROW", pa.int64()), ("HADM_ID", pa.int64()), ("NOTE_SEQ", pa.int64()), ("HASH", pa.uint64()),
                        ("TEXT", pa.large_string())])
    writers: dict[int, Any] = {}
    keys = []
    stats = mimic.ReadStats(mimic4.DISCHARGE, str(path))
    options = ipc.IpcWriteOptions(compression="lz4")
    try:
        for chunk in mimic4.stream_discharge(note_dir, chunksize=chunksize, stats=stats):
            keys.append(chunk[["ROW", "SUBJECT_ID", "HADM_ID", "HASH"]])
            bucket = chunk["HADM_ID"].to_numpy() // _BUCKET_WIDTH
            for b in np.unique(bucket):
                if b not in writers:
                    writers[b] = ipc.new_file(str(buckets / f"{b:08d}.arrow"), schema, options=options)
                part = chunk[bucket == b]
                writers[b].write_table(pa.table({
                    "ROW": part["ROW"].to_numpy(), "HADM_ID": part["HADM_ID"].to_numpy(),
                    "NOTE_SEQ": part["NOTE_SEQ"].to_numpy(), "HASH": part["HASH"].to_numpy(),
                    "TEXT": pa.array(part["TEXT"].tolist(), pa.large_string())}, schema=schema))
    finally:
        for w in writers.values():
            w.close()
    return keys, stats


def _bucket_texts(buckets: Path) -> Callable[[np.ndarray], Iterator[tuple[np.ndarray, pa.Array]]]:
    """The texts of the kept admissions, joined per admission from the bucket files, in hadm_id order."""

    def joined(keep: np.ndarray) -> Iterator[tuple[np.ndarray, pa.Array]]:
        wanted = pa.array(np.asarray(keep, dtype=np.int64))
        for path in sorted(buckets.iterdir()):
            with ipc.open_file(str(path)) as f:
                table = f.read_all()
            table = table.filter(pc.is_in(table["HADM_ID"], value_set=wanted))
            if not table.num_rows:
                continue
            df = table.select(["ROW", "HADM_ID", "NOTE_SEQ", "HASH"]).to_pandas()
            df = df[~df.duplicated(["HADM_ID", "HASH"])].sort_values(["HADM_ID", "NOTE_SEQ", "ROW"], kind="stable")
            text = table["TEXT"].combine_chunks().take(pa.array(df.index.to_numpy()))
            hadm = df["HADM_ID"].to_numpy()
            texts, starts = join_runs(hadm, text)
            for lo in range(0, len(starts), TEXT_BATCH):
                yield hadm[starts[lo:lo + TEXT_BATCH]], texts.slice(lo, TEXT_BATCH)

    return joined
