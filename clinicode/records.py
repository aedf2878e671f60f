"""Note records to score: the one reader of JSONL, CSV, Parquet and .txt notes, for the CLI, the app and clusters.

Files are streamed, never loaded whole. A record that cannot be scored (invalid JSON, no text, text that is not a
string or is blank) keeps its place with an `error`; a file that cannot be read at all raises DataFormatError.
Messages name files, lines, rows and ids, never note text.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, TextIO

from clinicode.data.text import describe_columns
from clinicode.errors import DataFormatError

BATCH_ROWS = 1024  # rows parsed at a time from CSV and Parquet
SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".ndjson", ".csv", ".csv.gz", ".parquet", ".txt")


@dataclass
class Record:
    """An input record: `text` is None and `error` set when it cannot be scored."""

    id: str
    text: Any
    error: str | None = None


@dataclass(frozen=True)
class Upload:
    """A file held in memory (an upload in the app): its name decides the format."""

    name: str
    data: bytes


def text_error(rid: str, text: Any) -> str | None:
    """Why a note cannot be scored (not a string, or blank), or None. The one rule, for readers and `Predictor`."""
    if text is None or (isinstance(text, float) and text != text):
        return f"note {rid!r}: missing text"
    if not isinstance(text, str):
        return f"note {rid!r}: 'text' is {type(text).__name__}, expected a string"
    if not text.strip():
        return f"note {rid!r}: empty text; nothing to code"
    return None


def _record(rid: str, text: Any) -> Record:
    err = text_error(rid, text)
    return Record(rid, None if err else text, err)


def _jsonl_records(f: TextIO, source: str) -> Iterator[Record]:
    for n, line in enumerate(f, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            yield Record(f"line-{n}", None, f"line {n} of {source}: not valid JSON")
            continue
        if not isinstance(obj, dict):
            yield Record(f"line-{n}", None, f"line {n} of {source}: expected a JSON object with 'id' and 'text'")
            continue
        rid = f"line-{n}" if obj.get("id") is None else str(obj["id"])
        if "text" not in obj:
            yield Record(rid, None, f"record {rid!r} (line {n}): no 'text' field")
            continue
        yield _record(rid, obj["text"])


def frame_records(df: Any, source: str, offset: int = 0) -> Iterator[Record]:
    """Records of a pandas DataFrame with columns `text` and (optionally) `id`; rows without an id get `row-N`.

    Raises:
        DataFormatError: the frame has no `text` column.
    """
    if "text" not in df.columns:
        raise DataFormatError(f"{source}: no 'text' column (columns: {describe_columns(df.columns)}); add one holding the notes.")
    has_id = "id" in df.columns
    for i, (rid, text) in enumerate(zip(df["id"] if has_id else range(len(df)), df["text"])):
        n = offset + i + 1
        ok = has_id and rid is not None and rid == rid and str(rid).strip()
        yield _record(str(rid) if ok else f"row-{n}", text)


def _csv_records(src: Any, where: str) -> Iterator[Record]:
    import pandas as pd

    offset = 0
    try:
        for chunk in pd.read_csv(src, dtype={"id": str}, chunksize=BATCH_ROWS, keep_default_na=False, na_values=[]):
            yield from frame_records(chunk, where, offset)
            offset += len(chunk)
    except pd.errors.EmptyDataError:
        raise DataFormatError(f"{where}: empty file; expected a CSV header with columns id,text and one row per note.") from None
    except pd.errors.ParserError as err:
        raise DataFormatError(f"{where}: not a readable CSV after row {offset:,} ({type(err).__name__}); expected columns "
                              "id,text with the note text quoted.") from None


def _parquet_records(src: Any, where: str) -> Iterator[Record]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(src)
    except (pa.ArrowException, OSError) as err:
        raise DataFormatError(f"{where}: not a readable parquet file ({type(err).__name__}); write it again or use .jsonl/.csv.") from None
    offset = 0
    cols = [c for c in ("id", "text") if c in pf.schema_arrow.names] or None
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=cols):
        df = batch.to_pandas()
        yield from frame_records(df, where, offset)
        offset += len(df)


def _suffix(name: str) -> str:
    p = Path(name.lower())
    return "".join(p.suffixes[-2:]) if p.suffix == ".gz" else p.suffix


def read_records(source: str | Path | Upload) -> Iterator[Record]:
    """Stream the records of SOURCE: a file or folder path, '-' (JSONL on stdin), or an in-memory `Upload`.

    Formats by name: .jsonl/.ndjson/.json lines (optionally .gz), .csv (optionally .gz), .parquet, .txt (one note; the
    id is the file name), or a folder of .txt files. A byte-order mark is dropped.

    Raises:
        DataFormatError: a missing path, unknown extension, undecodable bytes, unreadable CSV/Parquet or a table
            without a `text` column (one line naming the file, never its text).
    """
    if isinstance(source, Upload):
        where, name = source.name, source.name
    elif str(source) == "-":
        yield from _jsonl_records(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8-sig", errors="strict"), "stdin")
        return
    else:
        p = Path(source)
        where, name = f"--input {p}", p.name
        if p.is_dir():
            files = sorted(q for q in p.iterdir() if q.suffix == ".txt" and q.is_file())
            if not files:
                raise DataFormatError(f"--input {p}: folder holds no .txt files; put one note per .txt file in it.")
            for q in files:
                yield _txt_record(q.stem, q.read_bytes, q.name)
            return
        if not p.is_file():
            raise DataFormatError(f"--input {p}: no such file or folder.")
    suffix = _suffix(name)
    if suffix not in SUFFIXES:
        raise DataFormatError(f"{where}: unknown file type {suffix or '(none)'!r}; expected .jsonl, .csv, .parquet, .txt "
                              "or a folder of .txt files.")

    def raw():  # a binary file object over the source
        return io.BytesIO(source.data) if isinstance(source, Upload) else open(source, "rb")

    try:
        if suffix == ".txt":
            yield _txt_record(Path(name).stem, lambda: raw().read(), name)
        elif suffix == ".parquet":
            with raw() as f:
                yield from _parquet_records(f, where)
        elif suffix == ".jsonl.gz":
            with gzip.open(raw(), "rt", encoding="utf-8-sig") as f:
                yield from _jsonl_records(f, name)
        elif suffix == ".csv.gz":
            with gzip.open(raw()) as f:
                yield from _csv_records(f, where)
        elif suffix == ".csv":
            with raw() as f:
                yield from _csv_records(f, where)
        else:
            with io.TextIOWrapper(raw(), encoding="utf-8-sig", errors="strict") as f:
                yield from _jsonl_records(f, name)
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start}); re-encode the file as UTF-8.") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise DataFormatError(f"{where}: damaged or truncated file ({type(err).__name__}); write it again.") from None


def _txt_record(rid: str, read, name: str) -> Record:
    try:
        return _record(rid, read().decode("utf-8-sig"))
    except UnicodeDecodeError:
        return Record(rid, None, f"file {name}: not UTF-8 text")
