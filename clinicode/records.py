"""Note records to score: the one reader of JSONL, CSV, Parquet and .txt notes, for the CLI, the app and clusters.

Files are streamed, never loaded whole. A record that cannot be scored (invalid JSON, no text, text that is not a
string or is blank) keeps its place with an `error`; a file that cannot be read at all raises DataFormatError.
Messages name files, lines, rows and ids, never note text.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import io
import json
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from clinicode.data.text import describe_columns
from clinicode.errors import DataFormatError
from clinicode.files import LineTooLong, is_readable_stream, read_lines_bounded

BATCH_ROWS = 1024  # rows parsed at a time from CSV and Parquet
# bytes one JSONL line or .txt note may hold; a longer one is a bad record, never loaded whole
MAX_LINE_BYTES = 64 << 20
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
    """Why a note cannot be scored (not a string, blank, or holding a lone surrogate), or None. The one rule, for
    readers and `Predictor`."""
    if text is None or (isinstance(text, float) and text != text):
        return f"note {rid!r}: missing text"
    if not isinstance(text, str):
        return f"note {rid!r}: 'text' is {type(text).__name__}, expected a string"
    if not text.strip():
        return f"note {rid!r}: empty text; nothing to code"
    if not is_unicode(text):
        return (f"note {rid!r}: the text holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair), "
                "which is no character; fix the escape in the source")
    return None


def is_unicode(s: str) -> bool:
    """False for a string holding a lone surrogate: legal in JSON ("\\ud800") and in Python, but no character, so
    UTF-8 (the tokenizer, SQLite, every output file) cannot take it."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _record(rid: str, text: Any) -> Record:
    err = text_error(rid, text)
    return Record(rid, None if err else text, err)


def _jsonl_records(f: BinaryIO, source: str) -> Iterator[Record]:
    """Records of a binary JSONL stream, decoded line by line: a line that is not UTF-8 or longer than MAX_LINE_BYTES
    is a bad record with its line number (the rest of the file is still read), never a whole-file failure."""
    for n, line in enumerate(read_lines_bounded(f, MAX_LINE_BYTES), start=1):
        if isinstance(line, LineTooLong):
            yield Record(f"line-{n}", None, f"line {n} of {source}: more than the {_size(MAX_LINE_BYTES)} a record "
                                            "may hold; split or shorten the note")
            continue
        if n == 1 and line.startswith(codecs.BOM_UTF8):
            line = line[len(codecs.BOM_UTF8):]
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            yield Record(f"line-{n}", None,
                         f"line {n} of {source}: not UTF-8 text ({err.reason} at byte {err.start + 1} "
                                            "of the line); re-encode the file as UTF-8")
            continue
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as err:  # a 4,301-digit number is a ValueError, 1,000 brackets recurse
            why = "not valid JSON" if isinstance(err, json.JSONDecodeError) else \
                  "JSON that Python cannot hold (a number of over 4,300 digits, or nesting too deep)"
            yield Record(f"line-{n}", None, f"line {n} of {source}: {why}")
            continue
        if not isinstance(obj, dict):
            yield Record(f"line-{n}", None, f"line {n} of {source}: expected a JSON object with 'id' and 'text'")
            continue
        rid = f"line-{n}" if obj.get("id") is None else str(obj["id"])
        if not is_unicode(rid):  # the id goes into messages and outputs: it must be text, so it is not quoted here
            yield Record(f"line-{n}", None, f"line {n} of {source}: the 'id' holds a lone UTF-16 surrogate "
                                            "(a \\ud800-\\udfff escape without its pair); fix the escape")
            continue
        if "text" not in obj:
            yield Record(rid, None, f"record {rid!r} (line {n}): no 'text' field")
            continue
        yield _record(rid, obj["text"])


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n:,} bytes"


def _first_bad_line(raw: Callable[[], BinaryIO]) -> int | None:
    """The number of the first line of a file that is not UTF-8 (for messages; read again, line by line)."""
    try:
        with raw() as f:
            for n, line in enumerate(read_lines_bounded(f, MAX_LINE_BYTES), start=1):
                if isinstance(line, LineTooLong):
                    continue
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    return n
    except OSError:
        return None
    return None


def frame_records(df: Any, source: str, offset: int = 0) -> Iterator[Record]:
    """Records of a pandas DataFrame with columns `text` and (optionally) `id`; rows without an id get `row-N`.

    Raises:
        DataFormatError: the frame has no `text` column.
    """
    if "text" not in df.columns:
        raise DataFormatError(f"{source}: no 'text' column (columns: {describe_columns(df.columns)}); "
                              "add one holding the notes.")
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
        raise DataFormatError(f"{where}: empty file; expected a CSV header with columns "
                              "id,text and one row per note.") from None
    except pd.errors.ParserError as err:
        raise DataFormatError(f"{where}: not a readable CSV after row {offset:,} "
                              f"({type(err).__name__}); expected columns "
                              "id,text with the note text quoted.") from None


def _parquet_records(src: Any, where: str) -> Iterator[Record]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(src)
    except (pa.ArrowException, OSError) as err:
        raise DataFormatError(f"{where}: not a readable parquet file ({type(err).__name__}); write it "
                              "again or use .jsonl/.csv.") from None
    offset = 0
    cols = [c for c in ("id", "text") if c in pf.schema_arrow.names] or None
    batches = pf.iter_batches(batch_size=BATCH_ROWS, columns=cols)
    while True:
        try:
            batch = next(batches, None)
            df = None if batch is None else batch.to_pandas()
        except (pa.ArrowException, OSError) as err:
            raise DataFormatError(f"{where}: damaged parquet file after row {offset:,} "
                                  f"({type(err).__name__}); write it "
                                  "again or use .jsonl/.csv.") from None
        if df is None:
            return
        yield from frame_records(df, where, offset)
        offset += len(df)


def _suffix(name: str) -> str:
    p = Path(name.lower())
    return "".join(p.suffixes[-2:]) if p.suffix == ".gz" else p.suffix


def read_records(source: str | Path | Upload) -> Iterator[Record]:
    """Stream the records of SOURCE: a file or folder path, '-' (JSONL on stdin), or an in-memory `Upload`.

    Formats by name: .jsonl/.ndjson/.json lines (optionally .gz), .csv (optionally .gz), .parquet, .txt (one note; the
    id is the file name), or a folder of .txt files (any case: NOTE.TXT too). A pipe (`<(cmd)`) without a known
    extension is read as JSONL, like stdin. A byte-order mark is dropped. A JSONL line or .txt note of more than
    MAX_LINE_BYTES, or one that is not UTF-8, is a bad record (with its line number), not a failure.

    Raises:
        DataFormatError: a missing path, unknown extension, undecodable bytes, unreadable CSV/Parquet or a table
            without a `text` column (one line naming the file, never its text).
    """
    stream = False
    if isinstance(source, Upload):
        where, name = source.name, source.name
    elif str(source) == "-":
        try:
            yield from _jsonl_records(sys.stdin.buffer, "stdin")
        except OSError as err:
            raise DataFormatError("--input -: stdin could not be read "
                                  f"({err.strerror or type(err).__name__}).") from None
        return
    else:
        p = Path(source)
        where, name = f"--input {p}", p.name
        if p.is_dir():
            files = sorted(q for q in p.iterdir() if q.suffix.lower() == ".txt" and q.is_file())
            if not files:
                raise DataFormatError(f"--input {p}: folder holds no .txt files; put one note per .txt file in it.")
            for q in files:
                yield _txt_record(q.stem, functools.partial(_read_head, q), q.name)
            return
        stream = is_readable_stream(p)  # a pipe, e.g. bash's <(cmd) as /dev/fd/N
        if not p.is_file() and not stream:
            raise DataFormatError(f"--input {p}: no such file or folder." if not p.exists() else
                                  f"--input {p}: not a regular file, folder or pipe; pass a notes file or folder.")
    suffix = _suffix(name)
    if stream and suffix not in SUFFIXES:
        suffix = ".jsonl"  # a pipe has no file type of its own: JSONL, like stdin
    if suffix not in SUFFIXES:
        raise DataFormatError(f"{where}: unknown file type {suffix or '(none)'!r}; expected "
                              ".jsonl, .csv, .parquet, .txt "
                              "or a folder of .txt files.")

    def raw() -> BinaryIO:  # a binary file object over the source
        return io.BytesIO(source.data) if isinstance(source, Upload) else open(source, "rb")

    try:
        if suffix == ".txt":
            yield _txt_record(Path(name).stem, lambda: _read_head(raw), name)
        elif suffix == ".parquet":
            with raw() as f:
                yield from _parquet_records(f, where)
        elif suffix == ".jsonl.gz":
            with gzip.open(raw(), "rb") as f:
                yield from _jsonl_records(f, name)
        elif suffix == ".csv.gz":
            with gzip.open(raw()) as f:
                yield from _csv_records(f, where)
        elif suffix == ".csv":
            with raw() as f:
                yield from _csv_records(f, where)
        else:
            with raw() as f:
                yield from _jsonl_records(f, name)
    except UnicodeDecodeError as err:
        line = None if stream else _first_bad_line(lambda: gzip.open(raw(), "rb") if suffix.endswith(".gz") else raw())
        at = f"line {line}" if line is not None else f"byte {err.start}"
        raise DataFormatError(f"{where}: not UTF-8 text ({err.reason} at {at}); re-encode the file as UTF-8.") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise DataFormatError(f"{where}: damaged or truncated file ({type(err).__name__}); write it again.") from None


def _read_head(src: Path | Callable[[], BinaryIO]) -> bytes:
    """A .txt note's bytes, at most MAX_LINE_BYTES + 1 (so an oversized one is told, not loaded whole)."""
    with (open(src, "rb") if isinstance(src, Path) else src()) as f:
        return f.read(MAX_LINE_BYTES + 1)


def _txt_record(rid: str, read, name: str) -> Record:
    data = read()
    if len(data) > MAX_LINE_BYTES:  # _read_head reads one byte more than the bound, to tell
        return Record(rid, None,
                      f"file {name}: more than the {_size(MAX_LINE_BYTES)} a note may hold; split or shorten it")
    try:
        return _record(rid, data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        return Record(rid, None, f"file {name}: not UTF-8 text")
