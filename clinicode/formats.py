"""Input and output formats by name (`Reader`, `Writer`, the registries `READERS`, `WRITERS`) and the readers' rows.

A record over MAX_RECORD_BYTES is a bad row; writers' bodies: `format_writers`; adding a format: docs/predict.md."""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping, NamedTuple, TextIO

from clinicode.errors import ConfigError, DataFormatError
from clinicode.file_inputs import LineTooLong, read_lines_bounded
from clinicode.format_streams import Upload, open_binary, suffix
from clinicode.format_writers import csv_done, csv_writer, fhir_document, fhir_writer, jsonl_done, jsonl_writer

MAX_RECORD_BYTES = 64 << 20  # bytes one record (JSONL line, table cell, .txt note) may hold
BATCH_ROWS = 1024  # rows parsed at a time from CSV and Parquet


class Row(NamedTuple):
    """One record of a file: `fields` as read, or `problem` (why it cannot be read; no location, no note text)."""

    n: int                                 # 1-based line (JSONL) or row (CSV, Parquet) number; 1 for a .txt note
    fields: dict[str, Any] | None
    problem: str | None = None


RowReader = Callable[..., Iterator[Row]]  # (binary stream, where, *, limit, fields, columns, strings) -> rows


@dataclass(frozen=True)
class Reader:
    """An input format: `rows(stream, where, **options)` yields its `Row`s.

    Options every reader takes (and may ignore): `limit` (bytes a record may hold), `fields` (the fields a record
    has, for messages), `columns` (the fields wanted; None: all) and `strings` (read table cells as text).
    """

    name: str
    suffixes: tuple[str, ...]  # file-name endings that pick it (lower case); none: chosen by name only
    rows: RowReader
    what: str  # for --help and messages
    text: bool = True  # a text format: .gz and a byte-order mark are handled before `rows` sees the bytes
    # What it can do, which consumers ask instead of names (`clinicode.conformance.check_reader` holds it to them):
    splits: bool = False  # reads coded notes (id, text, labels): `train --data`'s train.<ending>, dev..., test...
    example: Callable[[], bytes] | None = None  # a file of two notes, "n1" and "n2" (labelled when `splits`)


@dataclass(frozen=True)
class Writer:
    """An output format: `open(f, header=..., context=...)` gives the function that writes one record to text file f
    (`write(rec, note=None)`; NOTE: the input record it came from, for what a format carries beyond the output record).

    `context` carries what a format needs beyond the record (FHIR: `systems` and `source`, see `clinicode.fhir`).
    What it can do is declared, and consumers ask it instead of its name (`clinicode.conformance.check_writer`).
    """

    name: str
    suffixes: tuple[str, ...]
    media_type: str
    open: Callable[..., Callable[[Mapping[str, Any]], None]]
    what: str
    # resume: the ids of the records a partial file holds, as often as each was written (None: `predict --resume`
    # refuses the format); the file may hold a torn last record, whose id is not counted
    done_ids: Callable[[TextIO], Counter[str]] | None = None
    subjects: bool = False  # carries each note's subject (from `note`; serve passes them as context "subjects")
    app: bool = False       # offered by the app's downloads (needs a file ending)
    serve: bool = False     # offered by serve's ?format= (its answer to a batch: `document`)
    # a batch as one response body (serve) and its media type; None: the file `to_bytes` writes, as `media_type`
    document_of: Callable[[list[Mapping[str, Any]], Mapping[str, Any]], Any] | None = None
    document_type: str | None = None

    def to_bytes(self, records: Iterable[Mapping[str, Any]], *, context: Mapping[str, Any] | None = None) -> bytes:
        """The records as a whole file in memory, byte for byte what predict writes (UTF-8)."""
        buf = io.StringIO(newline="")
        write = self.open(buf, header=True, context=context or {})
        for r in records:
            write(r)
        return buf.getvalue().encode("utf-8")

    def document(self, records: list[Mapping[str, Any]], context: Mapping[str, Any]) -> Any:
        """A batch as serve answers it in this format: bytes, or a JSON value (`document_of`)."""
        if self.document_of is not None:
            return self.document_of(records, context)
        return self.to_bytes(records, context=context)


READERS: dict[str, Reader] = {}
WRITERS: dict[str, Writer] = {}


def register_reader(r: Reader) -> Reader:
    """Add (or replace) an input format; its name is then a choice of `--input-format`."""
    READERS[r.name] = r
    return r


def register_writer(w: Writer) -> Writer:
    """Add (or replace) an output format; its name is then a choice of predict's `--format`."""
    WRITERS[w.name] = w
    return w


def reader(name: str) -> Reader:
    """The input format NAME. Raises ConfigError (one line, naming the known formats) for any other name."""
    if name not in READERS:
        raise ConfigError(f"unknown input format {str(name)[:40]!r}; known formats: {', '.join(READERS)}.")
    return READERS[name]


def writer(name: str) -> Writer:
    """The output format NAME. Raises ConfigError (one line, naming the known formats) for any other name."""
    if name not in WRITERS:
        raise ConfigError(f"unknown output format {str(name)[:40]!r}; known formats: {', '.join(WRITERS)}.")
    return WRITERS[name]


def reader_for(name: str) -> Reader | None:
    """The input format a file name's ending picks ('.gz' of a text format included), or None."""
    end = suffix(name)
    gz = end.endswith(".gz")
    base = end[:-3] if gz else end
    return next((r for r in READERS.values() if base in r.suffixes and (r.text or not gz)), None)


def offered(where: str) -> list[Writer]:
    """The writers offered by WHERE ("app": its downloads; "serve": its ?format=), in registry order."""
    return [w for w in WRITERS.values() if getattr(w, where)]


def split_readers() -> list[Reader]:
    """The readers of training splits (`train --data`), in registry order: a split's first match wins."""
    return [r for r in READERS.values() if r.splits]


def writer_for(name: str, default: str = "jsonl") -> Writer:
    """The output format a file name's ending picks; DEFAULT for any other name (and for '-')."""
    end = suffix(name)
    return next((w for w in WRITERS.values() if end in w.suffixes), WRITERS[default])


def known_suffixes() -> str:
    """The file endings readers claim, for messages: '.jsonl, .json, .ndjson, .csv, .parquet, .txt'."""
    return ", ".join(s for r in READERS.values() for s in r.suffixes)


# ------------------------------------------------------------------ shared bounds
def size_text(n: int) -> str:
    """A byte count for messages: '64 MiB', or '4,096 bytes'."""
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n:,} bytes"


def too_big_problem(limit: int) -> str:
    return f"more than the {size_text(limit)} a record may hold; split or shorten the note"


def over_limit(value: Any, limit: int) -> bool:
    """True for a string whose UTF-8 form is over LIMIT bytes (counted only when it could be)."""
    if not isinstance(value, str) or len(value) * 4 <= limit:
        return False
    return len(value) > limit or len(value.encode("utf-8", "surrogatepass")) > limit


def read_rows(source: Path | str | Upload | BinaryIO, fmt: Reader | str | None = None, *, name: str | None = None,
              where: str | None = None, limit: int | None = None, **options: Any) -> Iterator[Row]:
    """The rows of SOURCE in format FMT (a Reader or its name; None: by the file name's ending); LIMIT: the bytes a
    record may hold (None: MAX_RECORD_BYTES, read at the call).

    Raises:
        DataFormatError: an unknown file ending. A reader's own file-level errors (gzip, pandas, pyarrow, undecodable
            bytes) pass through for the caller to word.
    """
    nm = name or (source.name if isinstance(source, Upload) else str(source) if isinstance(source, (str, Path))
                  else "")
    r = READERS[fmt] if isinstance(fmt, str) else fmt or reader_for(nm)
    if r is None:
        raise DataFormatError(f"{where or nm}: unknown file type {suffix(nm) or '(none)'!r}; expected "
                              f"{known_suffixes()} (optionally .gz).")
    with open_binary(source, nm, text=r.text, where=where) as f:
        yield from r.rows(f, where or Path(nm).name, limit=MAX_RECORD_BYTES if limit is None else limit, **options)


# ------------------------------------------------------------------ readers
def _fields_phrase(fields: tuple[str, ...]) -> str:
    quoted = [f"'{f}'" for f in fields]
    return " and ".join(quoted) if len(quoted) < 3 else ", ".join(quoted[:-1]) + f" and {quoted[-1]}"


def jsonl_rows(f: BinaryIO, where: str, *, limit: int = MAX_RECORD_BYTES, fields: tuple[str, ...] = ("id", "text"),
               **_: Any) -> Iterator[Row]:
    """One JSON object a line, decoded line by line: a line over LIMIT bytes, not UTF-8, not JSON or not an object
    is a bad row (the rest of the file is still read); blank lines are skipped.

    Raises:
        DataFormatError: the first non-blank line opens a JSON array (a pretty-printed `[...]` file), which is not
            JSONL; one line saying how to convert it.
    """
    first = True
    for n, line in enumerate(read_lines_bounded(f, limit), start=1):
        if isinstance(line, LineTooLong):
            yield Row(n, None, too_big_problem(limit))
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            yield Row(n, None, f"not UTF-8 text ({err.reason} at byte {err.start + 1} of the line); re-encode the "
                               "file as UTF-8")
            continue
        if text.startswith("\ufeff"):  # files joined with `cat`: the second one's byte-order mark starts a line
            text = text[1:]
        if not text.strip():
            continue
        if first and text.lstrip().startswith("["):
            raise DataFormatError(f"{where}: a JSON array, not JSONL (one JSON object a line, each with "
                                  f"{_fields_phrase(fields)}); convert it with `jq -c '.[]' {where} > notes.jsonl`.")
        first = False
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as err:  # a 4,301-digit number is a ValueError, 1,000 brackets recurse
            yield Row(n, None, "not valid JSON" if isinstance(err, json.JSONDecodeError) else
                      "JSON that Python cannot hold (a number of over 4,300 digits, or nesting too deep)")
            continue
        if not isinstance(obj, dict):
            yield Row(n, None, f"expected a JSON object with {_fields_phrase(fields)}")
            continue
        yield Row(n, obj)


def _table_rows(frames: Iterator[Any], *, limit: int) -> Iterator[Row]:
    n = 0
    for df in frames:
        cols = [str(c) for c in df.columns]
        for values in zip(*(df[c] for c in df.columns)) if len(cols) else ():
            n += 1
            if any(over_limit(v, limit) for v in values):
                yield Row(n, None, too_big_problem(limit))
            else:
                yield Row(n, dict(zip(cols, values)))


def check_columns(df: Any, where: str, require: tuple[str, ...]) -> None:
    """Raise a one-line DataFormatError when a table lacks a required column (names shown, never cells)."""
    for col in require:
        if col not in df.columns:
            raise DataFormatError(f"{where}: no {col!r} column (columns: {describe_columns(df.columns)}); "
                                  "add one holding the notes.")


def csv_rows(f: BinaryIO, where: str, *, limit: int = MAX_RECORD_BYTES, strings: bool = False,
             require: tuple[str, ...] = (), unique: tuple[str, ...] = (), **_: Any) -> Iterator[Row]:
    """CSV with a header row, BATCH_ROWS at a time; `id` (every column with STRINGS) is read as text. pandas'
    EmptyDataError and ParserError pass through for the caller to word."""
    import warnings

    import pandas as pd

    def frames() -> Iterator[Any]:
        # index_col=False: pandas would otherwise make the leading columns an index when the first data row has more
        # fields than the header (an unquoted comma in the text), so ids would be read as text; its warning that
        # data would be lost is the refusal
        chunks = pd.read_csv(f, dtype=str if strings else {"id": str}, chunksize=BATCH_ROWS, index_col=False,
                             keep_default_na=False, na_values=[], encoding="utf-8")
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("error", pd.errors.ParserWarning)
                try:
                    chunk = next(chunks, None)
                except pd.errors.ParserWarning:
                    raise DataFormatError(f"{where}: row 1 has more fields than the header (an unquoted comma in the "
                                          "text?); quote each text cell holding a comma (1,\"text, with a comma\"), "
                                          "as DataFrame.to_csv and csv.writer do.") from None
            if chunk is None:
                return
            check_columns(chunk, where, require)
            _check_duplicates(chunk.columns, where, ("id", "text", *require, *unique))  # UNIQUE: the caller's too
            yield chunk

    for row in _table_rows(frames(), limit=limit):
        if row.fields is not None and len(row.fields) > 1 and all(is_header_cell(v, k) for k, v in row.fields.items()):
            row = Row(row.n, None, "a repeated header row (files joined with `cat`?); keep only the first file's "
                                   "header, e.g. `tail -n +2 b.csv >> a.csv`")
        yield row


def is_header_cell(value: Any, name: str) -> bool:
    """Whether a CSV cell repeats its column's NAME: a header row of a second file joined with `cat`, with the
    byte-order mark a spreadsheet saves at its start ('\ufeffid') or without."""
    return isinstance(value, str) and value.lstrip("\ufeff") == name


def csv_error_row(err: BaseException) -> int | None:
    """The data row (1-based, the header not counted) a pandas ParserError names, or None: pandas counts records
    from the header ('Expected 2 fields in line 1502'), so a quoted cell spanning lines does not shift it."""
    m = re.search(r"\bline (\d+)", str(err))
    return int(m.group(1)) - 1 if m else None


def _check_duplicates(columns: Any, where: str, keys: tuple[str, ...]) -> None:
    """Raise a one-line DataFormatError when a CSV header names a column that matters (KEYS) twice: pandas renames the
    second 'text' to 'text.1', so one of the two would be ignored in silence."""
    names = [str(c) for c in columns]
    for key in keys:
        if f"{key}.1" in names and key in names:
            raise DataFormatError(f"{where}: the header names {key!r} twice (columns: {describe_columns(names)}); "
                                  "rename or drop one, so no column is ignored.")


def parquet_rows(f: BinaryIO, where: str, *, limit: int = MAX_RECORD_BYTES, columns: tuple[str, ...] | None = None,
                 require: tuple[str, ...] = (), **_: Any) -> Iterator[Row]:
    """Parquet, a row group's batch at a time (only COLUMNS that exist are read; None: all)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f)
    except (pa.ArrowException, OSError) as err:
        raise DataFormatError(f"{where}: not a readable parquet file ({type(err).__name__}); write it "
                              "again or use .jsonl/.csv.") from None
    cols = None if columns is None else [c for c in columns if c in pf.schema_arrow.names] or None
    batches = pf.iter_batches(batch_size=BATCH_ROWS, columns=cols)
    done = 0

    def frames() -> Iterator[Any]:
        nonlocal done
        while True:
            try:
                batch = next(batches, None)
                df = None if batch is None else batch.to_pandas(integer_object_nulls=True)  # ids 1, 3, not 1.0
            except (pa.ArrowException, OSError) as err:
                raise DataFormatError(f"{where}: damaged parquet file after row {done:,} ({type(err).__name__}); "
                                      "write it again or use .jsonl/.csv.") from None
            if df is None:
                return
            check_columns(df, where, require)
            done += len(df)
            yield df

    yield from _table_rows(frames(), limit=limit)


def txt_rows(f: BinaryIO, where: str, *, limit: int = MAX_RECORD_BYTES, **_: Any) -> Iterator[Row]:
    """A .txt file is one note: {'text'} (the caller names it), read to at most LIMIT + 1 bytes to tell an
    oversized one without holding it."""
    data = f.read(limit + 1)
    if len(data) > limit:
        yield Row(1, None, f"more than the {size_text(limit)} a note may hold; split or shorten it")
        return
    try:
        yield Row(1, {"text": data.decode("utf-8")})
    except UnicodeDecodeError:
        yield Row(1, None, "not UTF-8 text")


def fhir_rows(f: BinaryIO, where: str, *, limit: int = MAX_RECORD_BYTES, **_: Any) -> Iterator[Row]:
    """FHIR R4 DocumentReference resources, one JSON object a line (FHIR bulk data's NDJSON): each note's text from
    its base64 text/plain attachment (`clinicode.fhir.note_from_document_reference`); a line without an id gets none,
    so the caller names it by its line."""
    from clinicode.fhir import note_from_document_reference

    for row in jsonl_rows(f, where, limit=limit, fields=("resourceType", "content")):
        if row.fields is None:
            yield row
            continue
        try:
            note = note_from_document_reference(row.fields)
        except DataFormatError as err:
            yield Row(row.n, None, str(err).rstrip("."))
            continue
        yield Row(row.n, {"id": row.fields.get("id"), "text": note["text"], "subject": note["subject"],
                          "document": note["document"]})


_EXAMPLE = [{"id": "n1", "text": "fever and chills", "labels": ["A01"]},
            {"id": "n2", "text": "rash, \"itch\"", "labels": ["B02", "C03"]}]


def _jsonl_example() -> bytes:
    return "".join(json.dumps(r) + "\n" for r in _EXAMPLE).encode()


def _csv_example() -> bytes:
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(["id", "text", "labels"])
    w.writerows([r["id"], r["text"], ";".join(r["labels"])] for r in _EXAMPLE)
    return buf.getvalue().encode()


def _parquet_example() -> bytes:
    import pandas as pd

    buf = io.BytesIO()
    pd.DataFrame(_EXAMPLE).to_parquet(buf)
    return buf.getvalue()


def _fhir_example() -> bytes:
    import base64

    def doc(r: dict[str, Any]) -> dict[str, Any]:
        data = base64.b64encode(r["text"].encode()).decode()
        return {"resourceType": "DocumentReference", "id": r["id"], "status": "current",
                "content": [{"attachment": {"contentType": "text/plain", "data": data}}]}
    return "".join(json.dumps(doc(r)) + "\n" for r in _EXAMPLE).encode()


register_reader(Reader("jsonl", (".jsonl", ".json", ".ndjson"), jsonl_rows, "one JSON object a line", splits=True,
                       example=_jsonl_example))
register_reader(Reader("csv", (".csv",), csv_rows, "CSV with a header row", splits=True, example=_csv_example))
register_reader(Reader("parquet", (".parquet",), parquet_rows, "Parquet", text=False, splits=True,
                       example=_parquet_example))
register_reader(Reader("txt", (".txt",), txt_rows, "one note a .txt file (or a folder of them)"))
register_reader(Reader("fhir", (), fhir_rows, "FHIR R4 DocumentReference resources, one a line",
                       example=_fhir_example))


# ------------------------------------------------------------------ writers (their bodies: format_writers)
register_writer(Writer("jsonl", (".jsonl",), "application/x-ndjson", jsonl_writer,
                       "one JSON record a line", done_ids=jsonl_done, app=True))
register_writer(Writer("csv", (".csv",), "text/csv", csv_writer,
                       "CSV: id, predicted (';'-joined), scores (JSON), truncated, error, suggested (';'-joined)",
                       done_ids=csv_done, app=True))
register_writer(Writer("fhir", (), "application/fhir+ndjson", fhir_writer,
                       "one FHIR R4 Bundle a note and line (docs/serve.md)", subjects=True, serve=True,
                       document_of=fhir_document, document_type="application/fhir+json"))


# The service (`clinicode serve`) answers a batch in its own JSON envelope ("json") or in a writer it is offered
# (`Writer.serve`: "fhir", one FHIR R4 Bundle of all its notes).
SERVICE_ENVELOPE = "json"


def service_formats() -> list[str]:
    """serve's ?format= choices: its JSON envelope, then the writers offered to it."""
    return [SERVICE_ENVELOPE, *(w.name for w in offered("serve"))]


# ------------------------------------------------------------------ messages
_COLUMN_NAME = re.compile(r"[\w .:/()#+-]{1,32}")


def describe_columns(columns, *, limit: int = 12) -> str:
    """Column names for an error message, never a cell of note text.

    A file without a header row has its first data row read as column names; names that do not look like
    names (longer than 32 characters, more than three words, or unusual characters) are shown by length only.
    """
    cols = [str(c) for c in columns]
    shown = [c if _COLUMN_NAME.fullmatch(c) and len(c.split()) <= 3 else f"<{len(c)}-character name>"
             for c in cols[:limit]]
    text = ", ".join(shown) + (f" and {len(cols) - limit} more" if len(cols) > limit else "") if cols else "none"
    if any(s.startswith("<") for s in shown):
        text += "; is the header row missing?"
    return text
