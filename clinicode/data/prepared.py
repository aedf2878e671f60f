"""The read side of stage 1: load and validate a prepared dataset folder (parquet, JSONL or CSV splits, the text
ones optionally gzipped, read through `clinicode.formats`), for training and evaluation; never writes."""

from __future__ import annotations

import codecs
import gzip
import hashlib
import json
import logging
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from clinicode import formats
from clinicode.codes.systems import infer_code_system
from clinicode.constants import EVIDENCE, ID, LABELS, LABELS_FILE, MANIFEST_FILE, SPLITS, SUBJECT_ID, TEXT
from clinicode.data.labels import LabelSet
from clinicode.errors import DataFormatError
from clinicode.files import manifest_kind, read_json, sha256_file
from clinicode.format_streams import open_binary
from clinicode.formats import describe_columns

log = logging.getLogger(__name__)

# A split is train.<ending> (dev, test) for every reader that reads splits (`formats.Reader.splits`: parquet, jsonl,
# csv, and any format registered so), by its first ending; first match wins when a split exists in several formats,
# binary formats first (parquet). Text formats are read through `clinicode.formats` (gzip, byte-order mark, the
# record bound), so each may be gzipped.
def split_endings() -> list[str]:
    """The endings a split file may have, in the order they are looked for: parquet, jsonl, jsonl.gz, csv, csv.gz."""
    readers = sorted(formats.split_readers(), key=lambda r: r.text)  # stable: registry order within each
    return [e for r in readers for e in ((r.suffixes[0][1:], r.suffixes[0][1:] + ".gz") if r.text
                                          else (r.suffixes[0][1:],))]


REQUIRED_SPLITS = ("train", "dev")
CSV_LABEL_SEP = ";"
PREPARED_KIND = "prepared-dataset"


def is_prepared_dataset(folder: Path) -> bool:
    """True for a folder written by `clinicode prepare` (its manifest.json says so)."""
    return manifest_kind(folder) == PREPARED_KIND


@dataclass
class PreparedDataset:
    """A validated prepared dataset: one DataFrame per split plus the label set.

    Args:
        path: the folder it was read from.
        splits: split name -> DataFrame with columns id (str), text (str), labels (list[str], sorted by
            label index); subject_id kept when present.
        labels: the label set (the model's output index).
        manifest: the folder's manifest.json ({} when absent).
        stats: counts of what loading dropped (unseen codes, documents left without labels by top_k).
    """

    path: Path
    splits: dict[str, pd.DataFrame]
    labels: LabelSet
    manifest: dict
    stats: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> pd.DataFrame:
        """The DataFrame of split `name`.

        Raises:
            DataFormatError: if the split is absent (the message lists the available splits).
        """
        if name not in self.splits:
            raise DataFormatError(
                f"split {name!r} not in {self.path}; available splits: {', '.join(self.splits)}. "
                f"Add {name}.parquet/.jsonl/.csv to the folder."
            )
        return self.splits[name]


def _find_split_file(folder: Path, split: str) -> Path | None:
    for ext in split_endings():
        p = folder / f"{split}.{ext}"
        if p.is_file():
            return p
    return None


def _check_utf8(path: Path) -> None:
    """Raise a one-line DataFormatError for an empty or non-UTF-8 text file (checked in 1 MB blocks)."""
    if path.stat().st_size == 0:
        raise DataFormatError(f"{path} is empty; expected a header/rows with columns id, text, labels.")
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open_binary(path) as f:
        while block := f.read(1 << 20):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as err:
                raise DataFormatError(
                    f"{path} is not valid UTF-8 (bad byte near offset {offset + err.start:,}); "
                    "re-save the file as UTF-8."
                ) from None
            offset += len(block)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DataFormatError(f"{path} is not valid UTF-8 (truncated character at the end); "
                                  "re-save the file as UTF-8.") from None


def _bad_row(path: Path, where: str, row: formats.Row) -> DataFormatError:
    tail = "; expected one JSON object per line" if row.problem == "not valid JSON" else ""
    return DataFormatError(f"{path} {where} {row.n}: {row.problem}{tail}.")


def _read_jsonl(path: Path) -> pd.DataFrame:
    rows = []
    for row in formats.read_rows(path, "jsonl", where=str(path), fields=(ID, TEXT, LABELS)):
        if row.fields is None:  # a line over the record bound, not JSON, not an object: told, never skipped
            raise _bad_row(path, "line", row)
        rows.append({k: row.fields.get(k) for k in (ID, TEXT, LABELS, SUBJECT_ID, EVIDENCE) if k in row.fields})
    return pd.DataFrame(rows)


def _read_rows(path: Path, fmt: str) -> pd.DataFrame:
    """A split in another registered format (`Reader.splits`): its rows' fields; labels a list, or a
    ';'-separated string as in CSV."""
    rows = []
    for row in formats.read_rows(path, fmt, where=str(path), fields=(ID, TEXT, LABELS), strings=True):
        if row.fields is None:  # told, never skipped
            raise _bad_row(path, "record", row)
        rec = {k: row.fields.get(k) for k in (ID, TEXT, LABELS, SUBJECT_ID, EVIDENCE) if k in row.fields}
        if isinstance(rec.get(LABELS), str):
            rec[LABELS] = [c.strip() for c in rec[LABELS].split(CSV_LABEL_SEP) if c.strip()]
        rows.append(rec)
    df = pd.DataFrame(rows)
    if LABELS in df.columns:
        df[LABELS] = _column(list(df[LABELS]), df.index)
    return df


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        rows = []
        for row in formats.read_rows(path, "csv", where=str(path), strings=True, unique=(LABELS,)):
            if row.fields is None:  # a cell over the record bound: told, never skipped
                raise _bad_row(path, "row", row)
            rows.append(row.fields)
        df = pd.DataFrame(rows, dtype=object)
    except pd.errors.EmptyDataError:
        raise DataFormatError(f"{path} is empty; expected a header with columns id, text, labels.") from None
    except (pd.errors.ParserError, ValueError) as err:
        row = formats.csv_error_row(err) if isinstance(err, pd.errors.ParserError) else None
        at = f" at row {row:,}" if row is not None else ""
        raise DataFormatError(f"{path} cannot be parsed as CSV{at} ({type(err).__name__}); expected "
                              "columns id, text, labels with the text quoted.") from err
    if LABELS in df.columns:
        comma = next((i for i, s in enumerate(df[LABELS]) if "," in s), None)
        if comma is not None:
            rid = df[ID].iloc[comma] if ID in df.columns else f"row {comma + 1}"
            raise DataFormatError(
                f"{path}: the labels of document {rid!r} contain ','; in CSV, codes are separated by "
                f"'{CSV_LABEL_SEP}' (e.g. 401.9;428.0). Replace the commas, or use JSONL with a list."
            )
        df[LABELS] = _column([[c.strip() for c in s.split(CSV_LABEL_SEP) if c.strip()] for s in df[LABELS]], df.index)
    return df


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several unrelated types for damaged files
        raise DataFormatError(f"{path} cannot be read as parquet ({type(err).__name__}); "
                              "re-run `clinicode prepare`.") from err
    if TEXT in df.columns:  # read whole (Parquet is columnar); the record bound still holds for each note
        big = next((i for i, t in enumerate(df[TEXT]) if formats.over_limit(t, formats.MAX_RECORD_BYTES)), None)
        if big is not None:
            raise DataFormatError(f"{path} row {big + 1}: {formats.too_big_problem(formats.MAX_RECORD_BYTES)}.")
    return df


def _column(values: list, index: pd.Index) -> pd.Series:
    """An object column of per-row lists (a bare list of equal-length lists could be read as 2-D)."""
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    return pd.Series(arr, index=index, dtype=object)


def _as_label_list(value: Any, path: Path, doc_id: str) -> list[str]:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise DataFormatError(
            f"{path}: document {doc_id!r} has labels of type {type(value).__name__}; expected a list of codes "
            f"(a '{CSV_LABEL_SEP}'-separated string in CSV)."
        )
    return [str(c).strip() for c in value if c is not None and str(c).strip()]


def _read_split(path: Path) -> pd.DataFrame:
    """Read one split file and validate its contract (columns, ids, text, label lists)."""
    fmt = formats.reader_for(path.name).name
    try:
        if formats.READERS[fmt].text:
            _check_utf8(path)
        read = {"parquet": _read_parquet, "jsonl": _read_jsonl, "csv": _read_csv}.get(fmt)
        df = read(path) if read is not None else _read_rows(path, fmt)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise DataFormatError(f"{path} is not a complete gzip file ({type(err).__name__}); compress it again "
                              "(gzip -k) or store it uncompressed.") from None
    if not len(df):
        raise DataFormatError(f"{path} has no documents; expected one row per document with id, text, labels.")
    for col in (ID, TEXT, LABELS):
        if col not in df.columns:
            raise DataFormatError(
                f"{path} has no column {col!r}; found {describe_columns(df.columns)}. Each row needs id, text, labels."
            )
    keep = [c for c in (ID, SUBJECT_ID, TEXT, LABELS, EVIDENCE) if c in df.columns]
    df = df[keep].reset_index(drop=True)
    if df[ID].isna().any():
        raise DataFormatError(f"{path}: {int(df[ID].isna().sum())} document(s) without an id; give every row an id.")
    df[ID] = [str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in df[ID]]
    dup = df[ID][df[ID].duplicated()]
    if len(dup):
        raise DataFormatError(
            f"{path}: {len(dup)} duplicate id(s), e.g. {dup.iloc[0]!r}; ids must be unique within a split."
        )
    text = df[TEXT]
    typed = [i for i, t in enumerate(text)
             if not (t is None or isinstance(t, str) or (isinstance(t, float) and t != t))]  # NaN: missing
    if typed:
        i = typed[0]
        raise DataFormatError(
            f"{path}: {len(typed)} document(s) whose text is not a string, e.g. id {df[ID].iloc[i]!r} "
            f"({type(text.iloc[i]).__name__}); store each note's text as a string."
        )
    bad = [i for i, t in enumerate(text) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise DataFormatError(
            f"{path}: {len(bad)} document(s) with empty or missing text, e.g. id {df[ID].iloc[bad[0]]!r}; "
            "remove them or supply the note text."
        )
    df[TEXT] = text.astype(str)
    df[LABELS] = _column([_as_label_list(v, path, i) for v, i in zip(df[LABELS], df[ID])], df.index)
    if EVIDENCE in df.columns:
        df[EVIDENCE] = _column([_as_evidence(v, t, path, i) for v, t, i in zip(df[EVIDENCE], df[TEXT], df[ID])],
                               df.index)
    return df


def _as_evidence(value: Any, text: str, path: Path, doc_id: str) -> list[dict[str, Any]]:
    """One note's gold mentions as [{code, start, end}] (text[start:end] is the mention); none given: []."""
    if isinstance(value, str):  # CSV: the list as a JSON string
        try:
            value = json.loads(value) if value.strip() else []
        except (json.JSONDecodeError, RecursionError):
            why = (" but a Python repr (single quotes, as DataFrame.to_csv writes a list of dicts); write the "
                   "column with json.dumps" if value.lstrip().startswith(("[{'", "[('", "{'")) else "")
            raise DataFormatError(f"{path}: document {doc_id!r} has an evidence cell that is not JSON{why}; give "
                                  "each cell as a JSON list of {\"code\": ..., \"start\": ..., \"end\": ...}, "
                                  "or leave it empty for none.") from None
    if value is None or (isinstance(value, float) and value != value):
        return []
    if isinstance(value, np.ndarray):
        value = value.tolist()
    out = []
    for item in value if isinstance(value, (list, tuple)) else [None]:
        code = item.get("code") if isinstance(item, dict) else None
        start = item.get("start") if isinstance(item, dict) else None
        end = item.get("end") if isinstance(item, dict) else None
        ints = all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in (start, end))
        if code is None or not ints or not 0 <= start < end <= len(text):
            raise DataFormatError(
                f"{path}: document {doc_id!r} has an evidence entry that is not {{code, start, end}} with "
                f"0 <= start < end <= the text's length ({len(text):,} characters); give each gold mention as "
                "{\"code\": ..., \"start\": ..., \"end\": ...} with character offsets into text, or drop the "
                "evidence column.")
        out.append({"code": str(code).strip(), "start": int(start), "end": int(end)})
    return out


def _leaks(splits: dict[str, pd.DataFrame]) -> dict[str, dict[str, int]]:
    """Ids and note texts that occur in more than one split: {"ids": {"train/test": n}, "texts": {...}}."""
    found: dict[str, dict[str, int]] = {"ids": {}, "texts": {}}
    keys = {name: (set(df[ID]), {hashlib.sha1(t.encode("utf-8")).digest() for t in df[TEXT]})
            for name, df in splits.items()}
    names = list(keys)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for n, what in ((len(keys[a][0] & keys[b][0]), "ids"), (len(keys[a][1] & keys[b][1]), "texts")):
                if n:
                    found[what][f"{a}/{b}"] = n
    return found


def read_split(path: Path, split: str) -> pd.DataFrame:
    """One split of a dataset folder, validated, with every gold code as given (nothing filtered).

    For evaluating a checkpoint, whose label set (not this folder's) decides which codes count.

    Raises:
        DataFormatError: missing folder or split, or a file that breaks the contract (see `load_dataset`).
    """
    path = Path(path)
    if not path.is_dir():
        raise DataFormatError(f"dataset folder {path} does not exist; pass the folder written by `clinicode prepare`.")
    file = _find_split_file(path, split)
    if file is None:
        present = [s for s in SPLITS if _find_split_file(path, s) is not None]
        raise DataFormatError(
            f"split {split!r} not in {path}; available splits: {', '.join(present) or 'none'}. Add "
            f"{split}.parquet/.jsonl/.csv to the folder."
        )
    return _read_split(file)


def read_split_codes(path: Path, split: str) -> pd.DataFrame:
    """[id, labels] of one split, without the note text (Parquet reads only those columns).

    For listing notes (the app's test-note picker) without holding note text in memory or caches.
    """
    file = _find_split_file(Path(path), split)
    if file is not None and file.suffix == ".parquet":
        try:
            df = pq.read_table(file, columns=[ID, LABELS]).to_pandas()
        except Exception as err:  # pyarrow raises several unrelated types for damaged files
            raise DataFormatError(f"{file} cannot be read as parquet ({type(err).__name__}); "
                                  "re-run `clinicode prepare`.") from err
        df[ID] = df[ID].astype(str)
        df[LABELS] = _column([_as_label_list(v, file, i) for v, i in zip(df[LABELS], df[ID])], df.index)
        return df
    return read_split(path, split)[[ID, LABELS]]


def read_split_texts(path: Path, split: str, note_ids: Sequence[str]) -> list[str]:
    """The texts of the given notes of a split, in the order of `note_ids` (Parquet reads only their row groups).

    Raises:
        DataFormatError: no such split, or an id that is not in it.
    """
    wanted = [str(i) for i in note_ids]
    file = _find_split_file(Path(path), split)
    if file is not None and file.suffix == ".parquet":
        try:
            table = pq.read_table(file, columns=[ID, TEXT], filters=[(ID, "in", wanted)])
        except Exception as err:  # pyarrow raises several unrelated types for damaged files
            raise DataFormatError(f"{file} cannot be read as parquet ({type(err).__name__}); "
                                  "re-run `clinicode prepare`.") from err
        found = dict(zip(map(str, table.column(ID).to_pylist()), table.column(TEXT).to_pylist()))
    else:
        df = read_split(path, split)
        found = dict(zip(df[ID], df[TEXT]))
    missing = [i for i in wanted if i not in found]
    if missing:
        raise DataFormatError(f"{path}: no note {missing[0]!r} in the {split} split.")
    return [found[i] for i in wanted]


def dataset_fingerprint(path: Path) -> str:
    """SHA-256 over the split files and labels.json of a dataset folder: what `train --resume` checks."""
    path = Path(path)
    h = hashlib.sha256()
    for name in [*(f.name for s in SPLITS if (f := _find_split_file(path, s)) is not None), LABELS_FILE]:
        if (path / name).is_file():
            h.update(f"{name}:{sha256_file(path / name)}\n".encode())
    return h.hexdigest()


def _top_codes(train: pd.DataFrame, top_k: int) -> list[str]:
    counts = Counter(c for labels in train[LABELS] for c in set(labels))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [c for c, _ in ranked[:top_k]]


def _read_splits(path: Path) -> dict[str, pd.DataFrame]:
    """The splits of folder PATH, each read from its file; train and dev are required."""
    splits: dict[str, pd.DataFrame] = {}
    for split in SPLITS:
        file = _find_split_file(path, split)
        if file is None:
            if split in REQUIRED_SPLITS:
                raise DataFormatError(
                    f"{path} has no {split} split; expected {split}.parquet, {split}.jsonl or {split}.csv "
                    "(train and dev are required, test is optional)."
                )
            continue
        splits[split] = _read_split(file)
    return splits


def _dataset_labels(path: Path, splits: dict[str, pd.DataFrame], stats: dict[str, Any],
                    label_splits: Sequence[str] = ("train",)) -> LabelSet:
    """labels.json, every code checked against it; without one, the codes of LABEL_SPLITS (train's, or train's and
    dev's; others dropped, counted in STATS)."""
    labels_path = path / LABELS_FILE
    if labels_path.is_file():
        labels = LabelSet.load(labels_path)
        for name, df in splits.items():
            outside = Counter(c for row in df[LABELS] for c in row if c not in labels)
            if outside:
                code, _ = min(outside.items(), key=lambda kv: (-kv[1], kv[0]))
                raise DataFormatError(
                    f"{name} split of {path}: {sum(outside.values())} label(s) of {len(outside)} code(s) not in "
                    f"{LABELS_FILE}, e.g. {code!r}; add the code to {LABELS_FILE} or remove it from the data."
                )
    else:
        train_codes = sorted({c for row in splits["train"][LABELS] for c in row})
        if not train_codes:
            raise DataFormatError(f"train split of {path} has no labels at all; a dataset needs at least one label.")
        more = sorted({c for name in label_splits if name != "train" and name in splits
                       for row in splits[name][LABELS] for c in row} - set(train_codes))
        stats["codes_outside_train"] = len(more)
        labels = LabelSet.from_codes(sorted([*train_codes, *more]))
        unseen = {}
        for name, df in splits.items():
            n = sum(1 for row in df[LABELS] for c in row if c not in labels)
            if n:
                unseen[name] = n
                df[LABELS] = _column([[c for c in row if c in labels] for row in df[LABELS]], df.index)
        stats["unseen_label_occurrences"] = unseen
        if unseen:
            log.info("codes seen only outside train were dropped: %s", unseen)
    return labels


def _keep_top_k(path: Path, splits: dict[str, pd.DataFrame], labels: LabelSet, top_k: int,
                stats: dict[str, Any]) -> LabelSet:
    """The TOP_K most frequent train codes; documents left without a label are dropped from SPLITS (in place)."""
    keep = set(_top_codes(splits["train"], top_k))
    if not keep:
        raise DataFormatError(f"train split of {path} has no labels; top_k={top_k} keeps nothing.")
    kept_codes = [c for c in labels.codes if c in keep]
    labels = LabelSet(tuple(kept_codes), tuple(labels.description(c) for c in kept_codes), labels.code_system)
    dropped_docs = {}
    for name, df in splits.items():
        df[LABELS] = _column([[c for c in row if c in keep] for row in df[LABELS]], df.index)
        has = np.array([bool(row) for row in df[LABELS]], dtype=bool)
        dropped_docs[name] = int((~has).sum())
        splits[name] = df[has].reset_index(drop=True)
    stats["top_k"] = top_k
    stats["documents_without_top_k_label"] = dropped_docs
    return labels


def load_dataset(path: Path, *, top_k: int | None = None,
                 label_splits: Sequence[str] = ("train",)) -> PreparedDataset:
    """Load and validate a prepared dataset folder.

    The folder holds `{train,dev,test}.{parquet,jsonl,csv}` (train and dev required, test optional) with
    columns id, text, labels (a list; a ';'-separated string in CSV); extra columns are ignored, ids become
    strings. With `labels.json` the label set is fixed and any other code is an error. Without it the label
    set is the sorted union of train codes, and codes seen only in dev/test are removed from those documents
    (counted in `stats["unseen_label_occurrences"]`). Documents with an empty label list are kept.

    Args:
        path: the dataset folder.
        top_k: keep only the top_k most frequent train codes (documents counted once per code, ties by code
            string); documents left without a label are dropped from every split.
        label_splits: without labels.json, the splits whose codes make the label set: train's, or ("train", "dev")
            for a model that learns codes only dev carries (the fused model's `--fit-on train+dev`).
    Returns:
        The validated PreparedDataset; labels in each row are sorted by label index.
    Raises:
        DataFormatError: missing folder/split/column, empty or non-UTF-8 file, duplicate ids, empty text,
            a code outside labels.json, or no label left.
    """
    path = Path(path)
    if not path.is_dir():
        raise DataFormatError(f"dataset folder {path} does not exist; pass the folder written by `clinicode prepare`.")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise DataFormatError(f"top_k must be a positive integer, got {top_k!r}.")
    splits = _read_splits(path)

    manifest_path = path / MANIFEST_FILE
    manifest = read_json(manifest_path) if manifest_path.is_file() else {}
    stats: dict[str, Any] = {}
    labels = _dataset_labels(path, splits, stats, label_splits)
    if top_k is not None:
        labels = _keep_top_k(path, splits, labels, top_k, stats)

    leaks = _leaks(splits)
    if leaks["ids"] or leaks["texts"]:
        stats["leakage"] = leaks
        log.warning("%s: the same notes are in more than one split (ids: %s; identical texts: %s); dev and test "
                    "scores will be optimistic. Remove the repeats from dev/test.", path,
                    ", ".join(f"{k} {v:,}" for k, v in leaks["ids"].items()) or "none",
                    ", ".join(f"{k} {v:,}" for k, v in leaks["texts"].items()) or "none")
    if labels.code_system is None:  # a folder that names none: inferred here, once, and recorded from now on
        labels = labels.with_code_system(infer_code_system(labels.codes))
        log.info("%s names no code system; its %d codes are %s", path, len(labels), labels.code_system.name)
    index = {c: i for i, c in enumerate(labels.codes)}
    for df in splits.values():
        df[LABELS] = _column([sorted(set(row), key=index.__getitem__) for row in df[LABELS]], df.index)
    log.info("loaded %s: %s documents, %d labels", path, {k: len(v) for k, v in splits.items()}, len(labels))
    return PreparedDataset(path=path, splits=splits, labels=labels, manifest=manifest, stats=stats)
