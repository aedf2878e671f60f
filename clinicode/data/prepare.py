"""The write side of stage 1: raw MIMIC-III tables -> prepared dataset folder (parquet splits, labels.json, manifest).

Follows docs/domain.md sections 3-5; holds only discharge-summary rows in memory, never all of NOTEEVENTS.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from clinicode.artifacts import atomic_dir, check_output, make_manifest, sha256_file, write_manifest
from clinicode.config import PREPARE, PrepareConfig
from clinicode.constants import CAML50_SPLIT_COUNTS, CAML_TOP50, LABELS_FILE, SPLITS
from clinicode.data import mimic
from clinicode.data.icd9 import format_diagnosis, format_procedure, is_icd9_diagnosis, is_icd9_procedure, load_descriptions_tsv
from clinicode.data.labels import LabelSet
from clinicode.data.prepared import is_prepared_dataset
from clinicode.data.splits import is_caml50, read_splits, split_file
from clinicode.errors import ConfigError, DataFormatError

log = logging.getLogger(__name__)

NOTE_ORDER = (
    "Discharge-summary rows (DESCRIPTION 'Report' and 'Addendum') of one HADM_ID joined with a single space, "
    "ordered Report before Addendum, then CHARTDATE, then ROW_ID; ISERROR not filtered (CAML parity)."
)
NOT_COMPARABLE = "not comparable with published results"
# Proportions of CAML's top-50 split, used when no split lists are given (8,066 : 1,573 : 1,729).
_SPLIT_WEIGHTS = tuple(CAML50_SPLIT_COUNTS[s] for s in SPLITS)
DESCRIPTIONS_TSV = "ICD9_descriptions.tsv"


def _dot_codes(codes: pd.DataFrame, *, is_diagnosis: bool, path: str) -> pd.Series:
    """Dotted code per row ("" for a value that is not an ICD-9 code); formats each distinct raw code once."""
    fmt = format_diagnosis if is_diagnosis else format_procedure
    valid = is_icd9_diagnosis if is_diagnosis else is_icd9_procedure
    uniq = codes["ICD9_CODE"].unique()
    try:
        mapping = {raw: fmt(raw) if valid(raw) else "" for raw in uniq}
    except DataFormatError as err:
        raise DataFormatError(f"{path}: {err}") from err
    return codes["ICD9_CODE"].map(mapping).astype(str)


def _join_notes(notes: pd.DataFrame) -> pd.DataFrame:
    """One row per HADM_ID: SUBJECT_ID and the joined TEXT, in clinicode's note order (NOTE_ORDER).

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
    starts = np.flatnonzero(np.r_[True, hadm[1:] != hadm[:-1]])                      # first row of each admission
    offsets = pa.array(np.r_[starts, len(hadm)].astype(np.int64))
    joined = pc.binary_join(pa.LargeListArray.from_arrays(offsets, text), pa.scalar(" ", pa.large_string()))
    del text
    first = keys.iloc[starts]
    subject = keys.groupby("HADM_ID", sort=True)["SUBJECT_ID"].first()                # first non-null per admission
    return pd.DataFrame({
        "HADM_ID": first["HADM_ID"].to_numpy(),
        "SUBJECT_ID": subject.reindex(first["HADM_ID"]).to_numpy(),
        "TEXT": joined.to_pandas(),                                                   # Arrow-backed strings, no copy to Python
        "n_notes": np.diff(np.r_[starts, len(hadm)]),
    })


def _hash_split(subject_ids: pd.Series) -> pd.Series:
    """Deterministic split per patient: md5 of the SUBJECT_ID -> bucket in CAML's split proportions."""
    total = sum(_SPLIT_WEIGHTS)
    bounds = [sum(_SPLIT_WEIGHTS[: i + 1]) for i in range(len(SPLITS))]

    def bucket(subject: int) -> str:
        h = int.from_bytes(hashlib.md5(str(int(subject)).encode()).digest()[:8], "big") % total
        return next(s for s, b in zip(SPLITS, bounds) if h < b)

    uniq = {s: bucket(s) for s in subject_ids.unique()}
    return subject_ids.map(uniq)


def _frequent_codes(codes: pd.DataFrame, top_k: int) -> list[str]:
    """The top_k codes by number of admissions (each counted once per admission), ties by code string."""
    counts = codes.groupby("code")["HADM_ID"].nunique().reset_index(name="n")
    counts = counts.sort_values(["n", "code"], ascending=[False, True], kind="stable")
    return counts["code"].head(top_k).tolist()


def _descriptions(mimic_dir: Path, splits_dir: Path | None) -> tuple[dict[str, str], dict[str, Any]]:
    """Dotted code -> LONG_TITLE from D_ICD_* (mapped through the dotted code), ICD9_descriptions.tsv as fallback."""
    out: dict[str, str] = {}
    sources: dict[str, Any] = {}
    tsv = Path(splits_dir) / DESCRIPTIONS_TSV if splits_dir is not None else None
    if tsv is not None and tsv.is_file():
        out.update(load_descriptions_tsv(tsv))
        sources["tsv"] = str(tsv)
    for table, fmt in ((mimic.D_ICD_DIAGNOSES, format_diagnosis), (mimic.D_ICD_PROCEDURES, format_procedure)):
        titles, path = mimic.read_titles(mimic_dir, table)
        if path is None:
            continue
        sources[table] = str(path)
        for raw, title in titles.items():
            if not raw or (fmt is format_procedure and len(raw.replace(".", "")) <= 2):
                continue
            if title:
                out[fmt(raw)] = title  # MIMIC's own title wins over the TSV
    return out, sources


def _file_info(path: Path) -> dict[str, Any]:
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path)}


def _write_split(path: Path, frame: pd.DataFrame) -> None:
    """Write one split with the exact parquet contract: id str, subject_id int64, text str, labels list<str>."""
    table = pa.table({
        "id": pa.array(frame["id"].tolist(), pa.string()),
        "subject_id": pa.array(frame["subject_id"].tolist(), pa.int64()),
        "text": pa.array(frame["text"], pa.large_string()).cast(pa.string()),
        "labels": pa.array(frame["labels"].tolist(), pa.list_(pa.string())),
    })
    pq.write_table(table, path)


def prepare_mimic(
    mimic_dir: Path,
    out_dir: Path,
    *,
    splits_dir: Path | None = None,
    label_set: str = PREPARE.label_set,
    top_k: int = PREPARE.top_k,
    chunksize: int = PREPARE.chunksize,
    expect_caml_counts: bool | None = None,
) -> dict:
    """Build the prepared dataset (one document per admission) from raw MIMIC-III tables.

    Args:
        mimic_dir: folder with NOTEEVENTS, DIAGNOSES_ICD, PROCEDURES_ICD (.csv or .csv.gz); D_ICD_DIAGNOSES
            and D_ICD_PROCEDURES are used for descriptions when present.
        out_dir: folder to write; replaced atomically (a failure leaves the previous state untouched).
        splits_dir: folder with CAML's {train,dev,test}_50_hadm_ids.csv. Without it, admissions are split
            by a hash of SUBJECT_ID in CAML's proportions, so no patient is in two splits.
        label_set: "caml50" (the pinned CAML list) or "frequent" (top_k most frequent codes over admissions
            with a discharge summary, once per admission, ties by code string; not comparable with papers).
        top_k: number of codes for label_set="frequent" (ignored for "caml50").
        chunksize: NOTEEVENTS rows parsed at a time; bounds peak memory.
        expect_caml_counts: require exactly 8,066 / 1,573 / 1,729 documents. None = automatically when
            label_set is "caml50" and the split files have CAML's sizes.
    Returns:
        Summary dict: {"splits": {split: n_docs}, "n_labels", "dropped": {reason: count}, "label_set",
        "comparable", "missing_from_data": {split: n_ids}, "out_dir"}; also stored in manifest.json.
    Raises:
        ConfigError: unknown label_set, top_k < 1, chunksize < 1, or expect_caml_counts without splits_dir.
        DataFormatError: missing/unreadable inputs, no discharge summaries, no labelled admission, or CAML
            split counts not reproduced (the message gives expected and actual counts and the likely cause).
    """
    t0 = time.perf_counter()
    mimic_dir, out_dir = Path(mimic_dir), Path(out_dir)
    PrepareConfig(label_set=label_set, top_k=top_k, chunksize=chunksize)  # range checks live there
    if expect_caml_counts and splits_dir is None:
        raise ConfigError("expect_caml_counts=True needs splits_dir with CAML's *_50_hadm_ids.csv files; pass --splits-dir.")
    check_output(out_dir, option="--out", command="prepare", folder=True, recognise=is_prepared_dataset,
                 inputs={"--mimic-dir": mimic_dir, "--splits-dir": splits_dir})

    # Fail fast on missing inputs before the long NOTEEVENTS pass.
    paths = {t: mimic.find_table(mimic_dir, t) for t in (mimic.NOTEEVENTS, mimic.DIAGNOSES_ICD, mimic.PROCEDURES_ICD)}
    split_ids = read_splits(splits_dir) if splits_dir is not None else None
    caml_files = split_ids is not None and is_caml50(split_ids)
    check_counts = (label_set == "caml50" and caml_files) if expect_caml_counts is None else bool(expect_caml_counts)
    dropped: dict[str, int] = {}

    def drop(reason: str, n: int) -> None:
        if n:
            dropped[reason] = dropped.get(reason, 0) + int(n)

    # Codes: string-typed, dotted by source table, deduplicated per admission.
    parts = []
    for table, is_dx in ((mimic.DIAGNOSES_ICD, True), (mimic.PROCEDURES_ICD, False)):
        raw, stats = mimic.read_codes(mimic_dir, table)
        for reason, n in stats.dropped.items():
            drop(f"{table}.{reason}", n)
        dotted = _dot_codes(raw, is_diagnosis=is_dx, path=stats.path)
        malformed = dotted == ""
        drop(f"{table}.malformed_code", int(malformed.sum()))  # e.g. 'NA', '401.90000', full-width digits
        parts.append(pd.DataFrame({
            "HADM_ID": raw["HADM_ID"][~malformed], "SUBJECT_ID": raw["SUBJECT_ID"][~malformed], "code": dotted[~malformed],
        }))
    codes = pd.concat(parts, ignore_index=True)
    n_code_rows = len(codes)
    codes = codes.drop_duplicates(["HADM_ID", "code"]).reset_index(drop=True)
    duplicate_code_rows = n_code_rows - len(codes)

    # Documents: discharge summaries only, streamed, joined per admission.
    notes, note_stats = mimic.read_discharge_summaries(mimic_dir, chunksize=chunksize)
    for reason, n in note_stats.dropped.items():
        drop(f"NOTEEVENTS.{reason}", n)
    n_summary_rows = len(notes)
    docs = _join_notes(notes)
    del notes
    has_summary = set(docs["HADM_ID"].tolist())
    coded_hadm = set(codes["HADM_ID"].unique().tolist())
    drop("admissions_with_codes_but_no_discharge_summary", len(coded_hadm - has_summary))
    codes = codes[codes["HADM_ID"].isin(has_summary)]

    # Label set.
    if label_set == "caml50":
        label_codes = sorted(CAML_TOP50)
    else:
        label_codes = sorted(_frequent_codes(codes, top_k))
        if not label_codes:
            raise DataFormatError("No codes on admissions with a discharge summary; cannot rank the most frequent codes.")
    descriptions, desc_sources = _descriptions(mimic_dir, splits_dir)
    labels = LabelSet.from_codes(label_codes, descriptions)
    undescribed = [c for c, d in zip(labels.codes, labels.descriptions) if not d]
    if undescribed:
        missing_tables = [t for t in (mimic.D_ICD_DIAGNOSES, mimic.D_ICD_PROCEDURES) if t not in desc_sources]
        log.warning("%d of %d label codes have no description (e.g. %s)%s; their code vectors start from the code "
                    "string instead.", len(undescribed), len(labels), ", ".join(undescribed[:3]),
                    f": {', '.join(missing_tables)} not found in {mimic_dir}" if missing_tables else "")

    # Labels per document, sorted by label index.
    in_set = codes[codes["code"].isin(set(label_codes))]
    index = {c: i for i, c in enumerate(labels.codes)}
    doc_labels = in_set.groupby("HADM_ID")["code"].agg(lambda s: sorted(s, key=index.__getitem__))
    docs["labels"] = docs["HADM_ID"].map(doc_labels)
    no_label = docs["labels"].isna()
    drop("admissions_without_label_set_codes", int(no_label.sum()))
    docs = docs[~no_label]
    # A note without SUBJECT_ID takes it from the code tables; none at all cannot be grouped by patient.
    subj_from_codes = codes.dropna(subset=["SUBJECT_ID"]).groupby("HADM_ID")["SUBJECT_ID"].first()
    docs["SUBJECT_ID"] = docs["SUBJECT_ID"].fillna(docs["HADM_ID"].map(subj_from_codes))
    no_subject = docs["SUBJECT_ID"].isna()
    drop("admissions_without_subject_id", int(no_subject.sum()))
    docs = docs[~no_subject]

    # Splits.
    missing_from_data: dict[str, int] = {}
    if split_ids is not None:
        membership = {h: s for s in SPLITS for h in split_ids[s]}
        docs = docs.assign(split=docs["HADM_ID"].map(membership))
        unlisted = docs["split"].isna()
        drop("admissions_not_in_split_lists", int(unlisted.sum()))
        docs = docs[~unlisted]
        present = set(docs["HADM_ID"].tolist())
        missing_from_data = {s: sum(1 for h in split_ids[s] if h not in present) for s in SPLITS}
    else:
        docs = docs.assign(split=_hash_split(docs["SUBJECT_ID"]))
    if not len(docs):
        raise DataFormatError(
            f"No admission in {mimic_dir} has a discharge summary and one of the {len(labels)} label-set codes"
            + (" and is listed in the split files" if split_ids is not None else "")
            + "; check --mimic-dir and --splits-dir."
        )
    counts = {s: int((docs["split"] == s).sum()) for s in SPLITS}

    if check_counts and counts != CAML50_SPLIT_COUNTS:
        got = ", ".join(f"{s} {counts[s]:,} (expected {CAML50_SPLIT_COUNTS[s]:,})" for s in SPLITS)
        raise DataFormatError(
            f"CAML top-50 split counts not reproduced: {got}; {sum(missing_from_data.values()):,} listed ids missing "
            "from the prepared data. ICD9_CODE was probably read as numbers or HADM_ID as floats; read codes as "
            "strings (docs/domain.md section 4) and use MIMIC-III v1.4."
        )
    if any(missing_from_data.values()):
        log.warning("split ids missing from the prepared data: %s", missing_from_data)

    comparable = label_set == "caml50" and caml_files
    summary: dict[str, Any] = {
        "splits": counts,
        "n_labels": len(labels),
        "dropped": dropped,
        "missing_from_data": missing_from_data,
        "label_set": label_set,
        "comparable": comparable,
        "labels_without_description": undescribed,
        "out_dir": str(out_dir),
    }
    if not comparable:
        summary["note"] = (
            f"{NOT_COMPARABLE}: "
            + ("label set recomputed from this data" if label_set != "caml50" else "not CAML's top-50 split files")
        )

    inputs = {t: _file_info(p) for t, p in paths.items()}
    for key in (mimic.D_ICD_DIAGNOSES, mimic.D_ICD_PROCEDURES):
        if key in desc_sources:
            inputs[key] = _file_info(Path(desc_sources[key]))
    if split_ids is not None:
        for s in SPLITS:
            inputs[f"{s}_split"] = _file_info(split_file(splits_dir, s))
    manifest = make_manifest(
        "prepared-dataset",
        summary=summary,
        parameters={
            "label_set": label_set, "top_k": top_k if label_set == "frequent" else len(CAML_TOP50),
            "splits_dir": str(splits_dir) if splits_dir is not None else None,
            "split_method": "caml_id_lists" if split_ids is not None else "md5(SUBJECT_ID) buckets 8066:1573:1729",
            "chunksize": chunksize, "expect_caml_counts": check_counts,
        },
        counts={
            "documents": counts,
            "noteevents_rows_read": note_stats.rows_read,
            "discharge_summary_rows": n_summary_rows,
            "admissions_with_discharge_summary": len(has_summary),
            "code_rows_kept": n_code_rows,
            "duplicate_code_rows": duplicate_code_rows,
        },
        dropped=dropped,
        missing_from_data=missing_from_data,
        note_order=NOTE_ORDER,
        label_order="codes sorted by code string (CAML's convention)",
        descriptions_from=desc_sources,
        inputs=inputs,
        comparable=comparable,
        comparability="comparable with CAML top-50 results" if comparable else NOT_COMPARABLE,
    )

    with atomic_dir(out_dir, replaces=is_prepared_dataset) as tmp:
        for s in SPLITS:
            part = docs[docs["split"] == s].sort_values("HADM_ID")
            _write_split(tmp / f"{s}.parquet", pd.DataFrame({
                "id": part["HADM_ID"].astype("int64").astype(str),
                "subject_id": part["SUBJECT_ID"].astype("int64"),
                "text": part["TEXT"],
                "labels": part["labels"],
            }))
        labels.save(tmp / LABELS_FILE)
        write_manifest(tmp, manifest)
    log.info("prepared %s in %.1f s: %s", out_dir, time.perf_counter() - t0, counts)
    return summary
