"""The write side of stage 1: raw MIMIC tables -> prepared dataset folder (parquet splits, labels.json, manifest).

The release's own reading is `source_mimic3` / `source_mimic4`; here: options, label set, splits, counts, writing."""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from clinicode.artifacts import make_manifest
from clinicode.codes.icd9 import load_descriptions_tsv
from clinicode.codes.icd10 import icd10_cm_titles, normalise_code
from clinicode.codes.systems import ICD9_CM, ICD10
from clinicode.config import PREPARE, PrepareConfig
from clinicode.constants import CAML50_SPLIT_COUNTS, CAML_TOP50, LABELS_FILE, SPLITS
from clinicode.data import mimic, mimic4
from clinicode.data.labels import LabelSet
from clinicode.data.prepared import is_prepared_dataset
from clinicode.data.protocols import Protocol, find_protocol
from clinicode.data.source import Source
from clinicode.data.source_mimic3 import DESCRIPTIONS_TSV, mimic3_source
from clinicode.data.source_mimic4 import mimic4_source
from clinicode.data.splits import (
    CAML_IDS,
    TOP50_CODES_FILE,
    packaged,
    read_id_list,
    read_split_file,
    read_splits,
    resolve,
    split_file,
)
from clinicode.errors import ConfigError, DataFormatError
from clinicode.files import atomic_dir, check_output, sha256_file, write_manifest

log = logging.getLogger(__name__)

NOT_COMPARABLE = "not comparable with published results"
# Proportions of CAML's top-50 split, used when no split lists are given (8,066 : 1,573 : 1,729).
_SPLIT_WEIGHTS = tuple(CAML50_SPLIT_COUNTS[s] for s in SPLITS)


def _hash_split(subject_ids: pd.Series) -> pd.Series:
    """Deterministic split per patient: md5 of the SUBJECT_ID -> bucket in CAML's split proportions."""
    total = sum(_SPLIT_WEIGHTS)
    bounds = [sum(_SPLIT_WEIGHTS[: i + 1]) for i in range(len(SPLITS))]

    def bucket(subject: int) -> str:
        h = int.from_bytes(hashlib.md5(str(int(subject)).encode()).digest()[:8], "big") % total
        return next(s for s, b in zip(SPLITS, bounds) if h < b)

    uniq = {s: bucket(s) for s in subject_ids.unique()}
    return subject_ids.map(uniq)


def _code_counts(codes: pd.DataFrame) -> pd.DataFrame:
    """Admissions per code (each counted once per admission), most frequent first, ties by code string."""
    counts = codes.groupby("code")["HADM_ID"].nunique().reset_index(name="n")
    return counts.sort_values(["n", "code"], ascending=[False, True], kind="stable")


def _read_pinned(path: Path, known: set[str]) -> list[str]:
    """A pinned label list (one code a line, dotted or not) in clinicode's dotted form, matched to the data's codes."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataFormatError(f"{path} cannot be read as UTF-8 text ({type(err).__name__}); "
                              "expected one code per line.") from err
    codes = [normalise_code(c, known) for c in (line.strip() for line in lines) if c]
    if len(set(codes)) != len(codes) or not codes:
        raise DataFormatError(f"{path}: expected distinct codes, one per line; got {len(codes)} lines, "
                              f"{len(set(codes))} distinct.")
    return codes


def _label_codes(cfg: PrepareConfig, label_set: str, codes: pd.DataFrame,
                 pinned: Path | None) -> tuple[list[str], pd.DataFrame]:
    """The label set's codes (sorted by code string, CAML's convention) and the code counts they came from."""
    counts = _code_counts(codes)
    if label_set == "caml50":
        chosen = list(CAML_TOP50)
    elif label_set == "top50" and pinned is not None:
        chosen = _read_pinned(pinned, set(counts["code"]))
    elif label_set in ("top50", "frequent"):
        chosen = counts["code"].head(50 if label_set == "top50" else cfg.top_k).tolist()
    else:  # full
        chosen = counts.loc[counts["n"] >= cfg.min_code_count, "code"].tolist()
    if not chosen:
        raise DataFormatError("No code is left for the label set (no coded admission has a "
                              "note, or --min-code-count is "
                              "higher than any code's count); check --mimic-dir, --icd-version and --min-code-count.")
    return sorted(chosen), counts


def _file_info(path: Path) -> dict[str, Any]:
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path)}


_SCHEMA = pa.schema([("id", pa.string()), ("subject_id", pa.int64()), ("text", pa.string()),
                     ("labels", pa.list_(pa.string()))])


def _write_splits(out: Path, docs: pd.DataFrame, texts: Iterator[tuple[np.ndarray, pa.Array]]) -> None:
    """{train,dev,test}.parquet with the exact contract (id str, subject_id int64, text str, labels list<str>),
    appended batch by batch as the texts arrive in HADM_ID order."""
    by_id = docs.set_index("HADM_ID")
    writers = {s: pq.ParquetWriter(out / f"{s}.parquet", _SCHEMA) for s in SPLITS}
    try:
        for hadm, text in texts:
            meta = by_id.loc[hadm]
            for s in SPLITS:
                rows = np.flatnonzero((meta["split"] == s).to_numpy())
                if len(rows):
                    take = meta.iloc[rows]
                    writers[s].write_table(pa.table({
                        "id": pa.array([str(h) for h in hadm[rows]], pa.string()),
                        "subject_id": pa.array(take["SUBJECT_ID"].astype("int64").to_numpy(), pa.int64()),
                        "text": text.take(pa.array(rows)).cast(pa.string()),
                        "labels": pa.array(take["labels"].tolist(), pa.list_(pa.string())),
                    }, schema=_SCHEMA))
    finally:
        for w in writers.values():
            w.close()


def detect_release(mimic_dir: Path) -> str:
    """'mimic3' (NOTEEVENTS, DIAGNOSES_ICD, ...) or 'mimic4' (hosp/diagnoses_icd) from the folder's files.

    Raises:
        DataFormatError: the folder does not exist, or holds neither release's tables.
    """
    mimic_dir = Path(mimic_dir)
    if not mimic_dir.is_dir():
        raise DataFormatError(f"MIMIC folder {mimic_dir} does not exist or is not a folder; "
                              "pass --mimic-dir pointing at "
                              "MIMIC-III v1.4 or MIMIC-IV v2.2.")
    if mimic4.is_mimic4(mimic_dir):
        return "mimic4"
    mimic.find_table(mimic_dir, mimic.NOTEEVENTS)  # names what is missing when neither release is there
    return "mimic3"


def prepare_mimic(
    mimic_dir: Path,
    out_dir: Path,
    *,
    note_dir: Path | None = None,
    icd_version: int | None = PREPARE.icd_version,
    splits_dir: Path | None = None,
    splits_file: Path | None = None,
    label_set: str | None = PREPARE.label_set,
    top_k: int = PREPARE.top_k,
    min_code_count: int = PREPARE.min_code_count,
    chunksize: int = PREPARE.chunksize,
    note_chunksize: int = PREPARE.note_chunksize,
    expect_published_counts: bool | None = None,
) -> dict:
    """Build the prepared dataset (one document per admission) from raw MIMIC-III or MIMIC-IV tables.

    Args:
        mimic_dir: MIMIC-III v1.4 (NOTEEVENTS, DIAGNOSES_ICD, PROCEDURES_ICD; D_ICD_* for titles) or MIMIC-IV v2.2
            (hosp/diagnoses_icd, hosp/procedures_icd, hosp/d_icd_*); .csv or .csv.gz. The release is told by its files.
        out_dir: folder to write; replaced atomically (a failure leaves the previous state untouched).
        note_dir: MIMIC-IV-Note v2.2 (note/discharge); default mimic_dir. MIMIC-IV only.
        icd_version: 9 or 10; required for MIMIC-IV (its tables hold both), 9 or None for MIMIC-III.
        splits_dir: a folder of {train,dev,test}_{50,full}_hadm_ids.csv (CAML, MIMIC-IV-ICD); "_full" lists for
            label_set "full", "_50" otherwise; its top50_codes.txt, if any, pins label_set "top50".
        splits_file: an Edin et al. split CSV (hadm_id,split with train/val/test). Exclusive with splits_dir.
            Without either, admissions are split by a hash of SUBJECT_ID in CAML's proportions (no patient in two).
        label_set: caml50 (CAML's pinned list, MIMIC-III), top50 (the pinned top50_codes.txt, else the 50 most
            frequent), frequent (the top_k most frequent), full (codes in >= min_code_count admissions with a note);
            None: caml50 for MIMIC-III, top50 for MIMIC-IV.
        expect_published_counts: require the published document counts of the protocol the split files belong to.
            None: whenever the files are a published protocol's (by SHA-256) and the options are that protocol's.
    Returns:
        Summary dict ({"release", "icd_version", "splits", "n_labels", "dropped", "label_set", "protocol",
        "comparable", "missing_from_data", "labels_without_description", "out_dir"}), also in manifest.json.
    Raises:
        ConfigError: bad or contradictory options (e.g. MIMIC-IV without icd_version), or an out_dir that may not
            be replaced.
        DataFormatError: missing/unreadable inputs, no notes, no labelled admission, or a protocol's published
            counts not reproduced (the message gives expected and actual counts and the likely cause).
    """
    t0 = time.perf_counter()
    mimic_dir, out_dir = Path(mimic_dir), Path(out_dir)
    splits_dir, splits_file = packaged(splits_dir), packaged(splits_file)  # a name of the packaged lists works too
    cfg = PrepareConfig(label_set=label_set, top_k=top_k, min_code_count=min_code_count, icd_version=icd_version,
                        chunksize=chunksize, note_chunksize=note_chunksize)  # range checks live there
    release, chosen_set = _release_and_label_set(mimic_dir, cfg, note_dir=note_dir, splits_dir=splits_dir,
                                                 splits_file=splits_file)
    note_dir = Path(note_dir) if note_dir is not None else mimic_dir
    check_output(out_dir, option="--out", command="prepare", folder=True, recognise=is_prepared_dataset,
                 inputs={"--mimic-dir": mimic_dir, "--note-dir": note_dir, "--splits-dir": splits_dir,
                         "--splits-file": splits_file})

    # Split lists first: a bad file fails before the long read of the notes.
    kind = "full" if chosen_set == "full" else "50"
    default = release == "mimic3" and splits_dir is None and splits_file is None  # CAML's lists if the data is MIMIC's
    choice = _split_choice(splits_dir, splits_file, kind, chosen_set, release, cfg,
                           None if default else expect_published_counts)

    with atomic_dir(out_dir, replaces=is_prepared_dataset) as tmp:
        if release == "mimic3":
            source = mimic3_source(mimic_dir, splits_dir, cfg)
        else:
            source = mimic4_source(mimic_dir, note_dir, cfg, tmp)
        if default and _are_listed(source, kind):
            # MIMIC-III's own admissions and no split option: CAML's packaged lists, its protocol (a fresh clone needs
            # no other folder). Other data (a synthetic demo's invented ids) keeps the hash split by patient.
            splits_dir = CAML_IDS
            choice = _split_choice(splits_dir, None, kind, chosen_set, release, cfg, expect_published_counts)
            _add_caml_titles(source)
        elif default and expect_published_counts:
            choice = _split_choice(None, None, kind, chosen_set, release, cfg, expect_published_counts)  # raises
        split_ids, split_files, pinned, protocol, matches, check_counts = choice
        plan = _Plan(cfg, chosen_set, split_ids, split_files, pinned, protocol, matches, check_counts, mimic_dir,
                     splits_dir, splits_file, out_dir)
        summary = _write_dataset(tmp, source, plan)
    log.info("prepared %s in %.1f s: %s", out_dir, time.perf_counter() - t0, summary["splits"])
    return summary


def _release_and_label_set(mimic_dir: Path, cfg: PrepareConfig, *, note_dir: Path | None, splits_dir: Path | None,
                           splits_file: Path | None) -> tuple[str, str]:
    """The release in MIMIC_DIR and the label set chosen for it; refuses options that contradict them."""
    if splits_dir is not None and splits_file is not None:
        raise ConfigError("give --splits-dir (CAML/MIMIC-IV-ICD id lists) or --splits-file "
                          "(hadm_id,split CSV), not both.")
    release = detect_release(mimic_dir)
    if release == "mimic4" and cfg.icd_version is None:
        raise ConfigError(f"{mimic_dir} is MIMIC-IV, which codes in ICD-9 and ICD-10: pass --icd-version 9 or 10.")
    if release == "mimic3" and cfg.icd_version not in (None, 9):
        raise ConfigError(f"{mimic_dir} is MIMIC-III, which is coded in ICD-9 only; drop --icd-version 10.")
    if release == "mimic3" and note_dir is not None:
        raise ConfigError("--note-dir is for MIMIC-IV (note/discharge); MIMIC-III's notes are in "
                          "NOTEEVENTS in --mimic-dir.")
    chosen_set = cfg.label_set or ("caml50" if release == "mimic3" else "top50")
    if chosen_set == "caml50" and release == "mimic4":
        raise ConfigError("--label-set caml50 is CAML's MIMIC-III list; for MIMIC-IV use top50, frequent or full.")
    return release, chosen_set


def _add_caml_titles(source: Source) -> None:
    """CAML's packaged ICD9_descriptions.tsv under the data's own titles (MIMIC's own title wins)."""
    tsv = resolve(CAML_IDS / DESCRIPTIONS_TSV)
    source.titles = {**load_descriptions_tsv(tsv), **source.titles}
    source.title_sources["tsv"] = str(tsv)


def _write_dataset(tmp: Path, source: Source, plan: _Plan) -> dict[str, Any]:
    """Label, split and write the dataset into TMP (splits, labels.json, manifest.json last); returns the summary."""
    summary, manifest, docs, labels = _assemble(source, plan)
    _write_splits(tmp, docs, source.texts(docs["HADM_ID"].to_numpy()))
    labels.save(tmp / LABELS_FILE)
    write_manifest(tmp, manifest)
    notes = tmp / ".notes"
    if notes.exists():
        for p in notes.iterdir():
            p.unlink()
        notes.rmdir()
    return summary


def _split_choice(splits_dir: Path | None, splits_file: Path | None, kind: str, chosen_set: str, release: str,
                  cfg: PrepareConfig, expect_published_counts: bool | None) -> tuple:
    """(split ids or None, split files, pinned top-50 list, protocol, options match it, check its counts)."""
    split_files: list[Path] = []
    if splits_dir is not None:
        split_ids = read_splits(splits_dir, kind)
        split_files = [split_file(splits_dir, s, kind) for s in SPLITS]
    elif splits_file is not None:
        split_ids = read_split_file(splits_file)
        split_files = [resolve(splits_file)]
    else:
        split_ids = None
    pinned = Path(splits_dir) / TOP50_CODES_FILE if splits_dir is not None and chosen_set == "top50" else None
    pinned = pinned if pinned is not None and pinned.is_file() else None
    protocol = find_protocol(split_files + ([pinned] if pinned else []))
    matches = protocol is not None and (protocol.mimic, protocol.icd_version, protocol.label_set,
                                        protocol.min_code_count) == (
        release, cfg.icd_version or 9, chosen_set, cfg.min_code_count if chosen_set == "full" else 1)
    if expect_published_counts and not matches:
        raise ConfigError("expect_published_counts=True needs a published protocol's split files with its options "
                          "(see docs/reproducing.md); these files or options are not one.")
    check_counts = matches if expect_published_counts is None else bool(expect_published_counts)
    return split_ids, split_files, pinned, protocol, matches, check_counts


def _are_listed(source: Source, kind: str) -> bool:
    """True when most of CAML's packaged ids of KIND are admissions of this data (real MIMIC-III, not a demo's)."""
    listed = [h for s in SPLITS for h in read_id_list(split_file(CAML_IDS, s, kind))]
    present = set(source.docs["HADM_ID"].tolist())
    return sum(h in present for h in listed) * 2 > len(listed)


@dataclass(frozen=True)
class _Plan:
    """What `prepare_dataset` decided before reading any table: the label set, the splits and the protocol."""

    cfg: PrepareConfig
    label_set: str
    split_ids: dict[str, list[int]] | None   # published id lists, or None for a hash split by patient
    split_files: list[Path]
    pinned: Path | None                      # top50_codes.txt pinning the label set
    protocol: Protocol | None
    matches: bool                            # the files and options are the protocol's
    check_counts: bool                       # require the protocol's published document counts
    mimic_dir: Path
    splits_dir: Path | str | None            # as given (the manifest records them so)
    splits_file: Path | str | None
    out_dir: Path


def _assemble(source: Source, plan: _Plan) -> tuple[dict[str, Any], dict[str, Any], pd.DataFrame, LabelSet]:
    """Label set, labels per document, splits and counts: the steps MIMIC-III and MIMIC-IV share."""
    coded = set(source.codes["HADM_ID"].unique().tolist())
    has_note = set(source.docs["HADM_ID"].tolist())
    source.drop("admissions_with_codes_but_no_note", len(coded - has_note))
    codes = source.codes[source.codes["HADM_ID"].isin(has_note)]
    labels, n_codes, undescribed = _label_set(source, plan, codes)
    docs = _labelled_docs(source, labels, codes, coded)
    docs, missing_from_data = _assign_splits(source, docs, plan.split_ids)
    n_docs = _check_counts(source, plan, docs, labels, missing_from_data)
    summary = _summary(source, plan, n_docs, labels, missing_from_data, undescribed)
    return summary, _manifest(source, plan, summary, n_docs, n_codes), docs.sort_values("HADM_ID"), labels


def _label_set(source: Source, plan: _Plan, codes: pd.DataFrame) -> tuple[LabelSet, int, list[str]]:
    """The label set with titles; how many codes the admissions with a note carry; the label codes without a title."""
    label_codes, counts = _label_codes(plan.cfg, plan.label_set, codes, plan.pinned)
    titles = dict(source.titles)
    missing_titles = [c for c in label_codes if not titles.get(c)]
    if missing_titles and source.icd_version == 10:
        titles.update(icd10_cm_titles(missing_titles))  # the CMS ICD-10-CM tables in simple-icd-10-cm
    labels = LabelSet.from_codes(label_codes, titles, code_system=ICD9_CM if source.icd_version == 9 else ICD10)
    undescribed = [c for c, d in zip(labels.codes, labels.descriptions) if not d]
    if undescribed:
        log.warning("%d of %d label codes have no description (e.g. %s); their code vectors start from the code string "
                    "instead.", len(undescribed), len(labels), ", ".join(undescribed[:3]))
    return labels, len(counts), undescribed


def _labelled_docs(source: Source, labels: LabelSet, codes: pd.DataFrame, coded: set[int]) -> pd.DataFrame:
    """Admissions with a note, each with its label-set codes (label order) and a SUBJECT_ID; the rest are dropped."""
    index = {c: i for i, c in enumerate(labels.codes)}
    in_set = codes[codes["code"].isin(index)]
    doc_labels = in_set.groupby("HADM_ID")["code"].agg(lambda s: sorted(s, key=index.__getitem__))
    docs = source.docs.assign(labels=source.docs["HADM_ID"].map(doc_labels))
    uncoded = ~docs["HADM_ID"].isin(coded)
    source.drop(f"admissions_with_a_note_but_no_icd{source.icd_version}_code", int(uncoded.sum()))
    no_label = docs["labels"].isna()
    source.drop("admissions_without_label_set_codes", int((no_label & ~uncoded).sum()))
    docs = docs[~no_label.to_numpy()]
    # A note without SUBJECT_ID takes it from the code tables; none at all cannot be grouped by patient.
    subj_from_codes = codes.dropna(subset=["SUBJECT_ID"]).groupby("HADM_ID")["SUBJECT_ID"].first()
    docs = docs.assign(SUBJECT_ID=docs["SUBJECT_ID"].fillna(docs["HADM_ID"].map(subj_from_codes)))
    no_subject = docs["SUBJECT_ID"].isna()
    source.drop("admissions_without_subject_id", int(no_subject.sum()))
    return docs[~no_subject.to_numpy()]


def _assign_splits(source: Source, docs: pd.DataFrame,
                   split_ids: dict[str, list[int]] | None) -> tuple[pd.DataFrame, dict[str, int]]:
    """Each document's split (from the id lists, else a hash of SUBJECT_ID); listed ids missing from the data."""
    if split_ids is None:
        return docs.assign(split=_hash_split(docs["SUBJECT_ID"])), {}
    membership = {h: s for s in SPLITS for h in split_ids[s]}
    docs = docs.assign(split=docs["HADM_ID"].map(membership))
    unlisted = docs["split"].isna()
    source.drop("admissions_not_in_split_lists", int(unlisted.sum()))
    docs = docs[~unlisted.to_numpy()]
    present = set(docs["HADM_ID"].tolist())
    return docs, {s: sum(1 for h in split_ids[s] if h not in present) for s in SPLITS}


def _check_counts(source: Source, plan: _Plan, docs: pd.DataFrame, labels: LabelSet,
                  missing_from_data: dict[str, int]) -> dict[str, int]:
    """Documents per split; refuses none at all, and a protocol's counts not reproduced when they are required."""
    if not len(docs):
        raise DataFormatError(
            f"No admission in {plan.mimic_dir} has a note and one of the {len(labels)} label-set codes"
            + (" and is listed in the split files" if plan.split_ids is not None else "")
            + "; check --mimic-dir, --icd-version and the split files."
        )
    n_docs = {s: int((docs["split"] == s).sum()) for s in SPLITS}
    protocol = plan.protocol
    if plan.check_counts and protocol is not None and n_docs != protocol.counts:
        got = ", ".join(f"{s} {n_docs[s]:,} (expected {protocol.counts[s]:,})" for s in SPLITS)
        cause = ("ICD9_CODE was probably read as numbers or HADM_ID as floats; read codes as strings (docs/domain.md "
                 "section 4) and use MIMIC-III v1.4" if source.release == "mimic3" else
                 "use MIMIC-IV v2.2 with MIMIC-IV-Note v2.2 and the protocol's --icd-version and label set")
        raise DataFormatError(
            f"{protocol.name} split counts not reproduced: {got}; {sum(missing_from_data.values()):,} listed ids "
            f"missing from the prepared data. {cause}."
        )
    if any(missing_from_data.values()):
        log.warning("split ids missing from the prepared data: %s", missing_from_data)
    if plan.matches and protocol is not None and protocol.n_labels and protocol.n_labels != len(labels):
        log.warning("%s reports %d codes; this data gives %d.", protocol.name, protocol.n_labels, len(labels))
    return n_docs


def _summary(source: Source, plan: _Plan, n_docs: dict[str, int], labels: LabelSet, missing_from_data: dict[str, int],
             undescribed: list[str]) -> dict[str, Any]:
    """`prepare_dataset`'s return value (also in manifest.json), with the reason when it is not a protocol's."""
    comparable = bool(plan.matches)
    summary: dict[str, Any] = {
        "release": source.release,
        "icd_version": source.icd_version,
        "splits": n_docs,
        "n_labels": len(labels),
        "dropped": source.dropped,
        "missing_from_data": missing_from_data,
        "label_set": plan.label_set,
        "protocol": plan.protocol.name if plan.matches and plan.protocol else None,
        "comparable": comparable,
        "labels_without_description": undescribed,
        "out_dir": str(plan.out_dir),
    }
    if not comparable:
        why = ("split files and options are not a published protocol's" if plan.split_ids is not None
               else "no split files (a hash split by patient)")
        if plan.label_set in ("frequent",) or (plan.label_set == "top50" and plan.pinned is None):
            why = "label set recomputed from this data"
        summary["note"] = f"{NOT_COMPARABLE}: {why}"
    return summary


def _manifest(source: Source, plan: _Plan, summary: dict[str, Any], n_docs: dict[str, int],
              n_codes: int) -> dict[str, Any]:
    """manifest.json of the prepared dataset: the summary, the options, the counts and every input's hash."""
    cfg, protocol, pinned = plan.cfg, plan.protocol, plan.pinned
    comparable = summary["comparable"]
    inputs = {name: _file_info(p) for name, p in source.inputs.items()}
    for key, path in source.title_sources.items():
        inputs[key] = _file_info(Path(path))
    for i, p in enumerate(plan.split_files + ([pinned] if pinned else [])):
        inputs[f"split_file_{i}" if p != pinned else "top50_codes"] = _file_info(p)
    return make_manifest(
        "prepared-dataset",
        summary=summary,
        parameters={
            "release": source.release, "icd_version": source.icd_version, "label_set": plan.label_set,
            "top_k": cfg.top_k, "min_code_count": cfg.min_code_count,
            "splits_dir": str(plan.splits_dir) if plan.splits_dir is not None else None,
            "splits_file": str(plan.splits_file) if plan.splits_file is not None else None,
            "split_method": ("published id lists" if plan.split_ids is not None else "md5(SUBJECT_ID) "
                                                                                     "buckets 8066:1573:1729"),
            "chunksize": cfg.chunksize, "note_chunksize": cfg.note_chunksize,
                    "expect_published_counts": plan.check_counts,
        },
        counts={"documents": n_docs, "admissions_with_note": len(source.docs), **source.counts},
        code_counts={"codes_on_admissions_with_a_note": n_codes},
        dropped=source.dropped,
        missing_from_data=summary["missing_from_data"],
        note_order=source.note_order,
        label_order="codes sorted by code string (CAML's convention)",
        descriptions_from=source.title_sources,
        inputs=inputs,
        protocol=(protocol.name if protocol else None),
        comparable=comparable,
        comparability="comparable with "
                      f"{protocol.name} ({protocol.source})" if comparable and protocol else NOT_COMPARABLE,
    )
