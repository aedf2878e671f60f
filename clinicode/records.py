"""Note records to score (`Record`, `read_records`) from the formats' readers: the CLI, the app, review, clusters.

Files are streamed; an unscorable record keeps its place with an `error`; messages never hold note text."""

from __future__ import annotations

import gzip
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from clinicode import formats
from clinicode.errors import DataFormatError
from clinicode.file_inputs import LineTooLong, read_lines_bounded
from clinicode.files import is_readable_stream, path_kind
from clinicode.format_streams import Upload, open_binary
from clinicode.formats import BATCH_ROWS, Row  # noqa: F401  (BATCH_ROWS is read from here too)

# bytes one record (JSONL line, table cell, .txt note) may hold; a longer one is a bad record, never loaded whole.
# The formats' shared bound, read from here at each call (so a test can lower it for the notes predict reads).
MAX_LINE_BYTES = formats.MAX_RECORD_BYTES


@dataclass
class Record:
    """An input record: `text` is None and `error` set when it cannot be scored."""

    id: str
    text: Any
    error: str | None = None
    subject: Any = None          # FHIR input: the DocumentReference's subject (a Reference), for FHIR output
    document: str | None = None  # FHIR input: 'DocumentReference/<id>', cited by FHIR output's Conditions


def text_error(rid: str, text: Any) -> str | None:
    """Why a note cannot be scored (not a string, blank, or holding a lone surrogate), or None. The one rule, for
    readers and `Predictor`."""
    if is_missing(text):
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


def _row_records(rows: Iterator[Row], source: str, *, fhir: bool = False) -> Iterator[Record]:
    """Records of a JSONL-like reader's rows: a bad row keeps its place as `line-N` with its problem."""
    for row in rows:
        n = row.n
        if row.fields is None:
            yield Record(f"line-{n}", None, f"line {n} of {source}: {row.problem}")
            continue
        obj = row.fields
        bad_id = id_problem(obj.get("id"))
        if bad_id is not None:
            yield Record(f"line-{n}", None, f"line {n} of {source}: the 'id' is {bad_id}; an id is a string or an "
                                            "integer (\"n1\" or 17)")
            continue
        rid = f"line-{n}" if obj.get("id") is None else str(obj["id"])
        if not is_unicode(rid):  # the id goes into messages and outputs: it must be text, so it is not quoted here
            yield Record(f"line-{n}", None, f"line {n} of {source}: the 'id' holds a lone UTF-16 surrogate "
                                            "(a \\ud800-\\udfff escape without its pair); fix the escape")
            continue
        if "text" not in obj:
            yield Record(rid, None, f"record {rid!r} (line {n}): no 'text' field")
            continue
        rec = _record(rid, obj["text"])
        if fhir:  # checked by the fhir reader (`clinicode.fhir.note_from_document_reference`); JSONL's are not
            rec.subject, rec.document = obj.get("subject"), obj.get("document")
        yield rec


def id_problem(rid: Any) -> str | None:
    """What a JSON id is when it is no string or integer ('true', 'an object', ...), or None (None: no id)."""
    if rid is None or isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
        return None
    if isinstance(rid, bool):
        return f"{str(rid).lower()} (a boolean)"
    if isinstance(rid, float):
        return "a number that is not an integer (a fraction, an exponent or out of range)"
    return {dict: "an object", list: "a list"}.get(type(rid), type(rid).__name__)


def _jsonl_records(f: BinaryIO, source: str, reader: str = "jsonl") -> Iterator[Record]:
    """Records of a binary JSONL stream, decoded line by line: a line that is not UTF-8 or longer than MAX_LINE_BYTES
    is a bad record with its line number (the rest of the file is still read), never a whole-file failure."""
    yield from _row_records(formats.READERS[reader].rows(f, source, limit=MAX_LINE_BYTES), source,
                            fhir=reader == "fhir")


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


def is_missing(value: Any) -> bool:
    """A table cell holding no value: None, NaN, or pandas' NA of a nullable column (`Int64`, `string`), whose truth
    value cannot be asked."""
    if value is None:
        return True
    if isinstance(value, float):
        return value != value  # NaN
    return type(value).__name__ in ("NAType", "NaTType")  # asked by name: this module does not import pandas


def _table_record(n: int, fields: dict[str, Any]) -> Record:
    rid = fields.get("id")
    ok = not is_missing(rid) and str(rid).strip()
    return _record(str(rid) if ok else f"row-{n}", fields.get("text"))


def frame_records(df: Any, source: str, offset: int = 0) -> Iterator[Record]:
    """Records of a pandas DataFrame with columns `text` and (optionally) `id`; rows without an id get `row-N`.

    Raises:
        DataFormatError: the frame has no `text` column.
    """
    formats.check_columns(df, source, ("text",))
    has_id = "id" in df.columns
    for i, (rid, text) in enumerate(zip(df["id"] if has_id else [None] * len(df), df["text"])):
        yield _table_record(offset + i + 1, {"id": rid, "text": text})


def _table_records(rows: Iterator[Row], where: str, counted: list[int]) -> Iterator[Record]:
    """Records of a table reader's rows (CSV, Parquet); a cell over the bound is a bad record `row-N`."""
    for row in rows:
        counted[0] = row.n
        if row.fields is None:
            yield Record(f"row-{row.n}", None, f"row {row.n} of {where}: {row.problem}")
        else:
            yield _table_record(row.n, row.fields)


def _csv_records(src: Any, where: str) -> Iterator[Record]:
    import pandas as pd

    offset = [0]
    try:
        yield from _table_records(formats.csv_rows(src, where, limit=MAX_LINE_BYTES, require=("text",)), where, offset)
    except pd.errors.EmptyDataError:
        raise DataFormatError(f"{where}: empty file; expected a CSV header with columns "
                              "id,text and one row per note.") from None
    except pd.errors.ParserError as err:
        row = formats.csv_error_row(err)
        at = f"at row {row:,} ({_csv_problem(err)})" if row is not None else f"after row {offset[0]:,}"
        raise DataFormatError(f"{where}: not a readable CSV {at}; expected columns "
                              "id,text with the note text quoted.") from None


def _csv_problem(err: BaseException) -> str:
    """pandas' reason for a CSV parse error without its location ('expected 2 fields, saw 3'), never a cell."""
    import re

    m = re.search(r"Expected (\d+) fields in line \d+, saw (\d+)", str(err))
    return f"expected {m.group(1)} fields, saw {m.group(2)}" if m else type(err).__name__


def _parquet_records(src: Any, where: str) -> Iterator[Record]:
    yield from _table_records(formats.parquet_rows(src, where, limit=MAX_LINE_BYTES, columns=("id", "text"),
                                                   require=("text",)), where, [0])


def read_records(source: str | Path | Upload, fmt: str | None = None) -> Iterator[Record]:
    """Stream the records of SOURCE: a file or folder path, '-' (JSONL on stdin), or an in-memory `Upload`.

    FMT names the input format (`clinicode.formats.READERS`: jsonl, csv, parquet, txt, fhir); None picks it by the
    name: .jsonl/.ndjson/.json lines, .csv, .parquet, .txt (one note; the id is the file name), each text format
    optionally .gz, or a folder of .txt files (any case: NOTE.TXT too). A pipe (`<(cmd)`) without a known extension
    is read as JSONL, like stdin. A byte-order mark is dropped. A record (JSONL line, table cell, .txt note) of more
    than MAX_LINE_BYTES, or one that is not UTF-8, is a bad record (with its line number), not a failure.

    Raises:
        DataFormatError: a missing path, unknown extension, undecodable bytes, unreadable CSV/Parquet or a table
            without a `text` column (one line naming the file, never its text).
        ConfigError: an unknown FMT.
    """
    chosen = formats.reader(fmt) if fmt is not None else None
    stream = False
    if isinstance(source, Upload):
        where, name = source.name, source.name
    elif str(source) == "-":
        yield from _stdin_records(chosen)
        return
    else:
        p = Path(source)
        where, name = f"--input {p}", p.name
        if p.is_dir():
            yield from _folder_records(p)
            return
        stream = is_readable_stream(p)  # a pipe, e.g. bash's <(cmd) as /dev/fd/N
        if not p.is_file() and not stream:
            raise DataFormatError(f"--input {p}: no such file or folder." if not p.exists() else
                                  f"--input {p}: not a regular file, folder or pipe; pass a notes file or folder.")
    reader = chosen or formats.reader_for(name)
    if reader is None and stream:
        reader = formats.READERS["jsonl"]  # a pipe has no file type of its own: JSONL, like stdin
    if reader is None:
        raise DataFormatError(f"{where}: unknown file type {formats.suffix(name) or '(none)'!r}; expected "
                              ".jsonl, .csv, .parquet, .txt "
                              "or a folder of .txt files.")
    src: Any = source if isinstance(source, Upload) else Path(source)
    gz = reader.text and formats.suffix(name).endswith(".gz")

    try:
        if reader.name == "txt":
            yield _txt_record(Path(name[:-3] if gz else name).stem, src, name)
        else:
            with open_binary(src, name, text=reader.text, where=where) as f:
                if reader.name == "parquet":
                    yield from _parquet_records(f, where)
                elif reader.name == "csv":
                    yield from _csv_records(f, where)
                else:
                    yield from _jsonl_records(f, name, reader.name)
    except UnicodeDecodeError as err:
        line = None if stream else _first_bad_line(lambda: open_binary(src, name))
        at = f"line {line}" if line is not None else f"byte {err.start}"
        raise DataFormatError(f"{where}: not UTF-8 text ({err.reason} at {at}); re-encode the file as UTF-8.") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise DataFormatError(f"{where}: damaged or truncated file ({type(err).__name__}); write it again.") from None


def _stdin_records(chosen: formats.Reader | None) -> Iterator[Record]:
    """The records of JSONL (or fhir) on stdin; a damaged gzip or an unreadable stdin is one line."""
    if chosen is not None and chosen.name not in ("jsonl", "fhir"):
        raise DataFormatError(f"--input -: stdin is read as JSONL (or fhir: DocumentReferences a line), not "
                              f"{chosen.name}; pass a file, or drop --input-format.")
    try:
        # not closed: stdin is the process's, not ours
        f = open_binary(sys.stdin.buffer, "stdin", where="--input -")
        yield from _jsonl_records(f, "stdin", chosen.name if chosen and chosen.name == "fhir" else "jsonl")
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:  # gzip on stdin, cut short or damaged
        raise DataFormatError(f"--input -: damaged or truncated gzip on stdin ({type(err).__name__}); "
                              "send it again.") from None
    except OSError as err:
        raise DataFormatError("--input -: stdin could not be read "
                              f"({err.strerror or type(err).__name__}).") from None


def _folder_records(p: Path) -> Iterator[Record]:
    """One record a .txt note of folder P (sorted by name); an entry that is no regular file is a bad record."""
    files = sorted(q for q in p.iterdir() if formats.reader_for(q.name) is formats.READERS["txt"])
    if not files:
        raise DataFormatError(f"--input {p}: folder holds no .txt files; put one note per .txt file in it.")
    for q in files:
        rid = Path(q.stem).stem if q.suffix.lower() == ".gz" else q.stem
        # a FIFO, a link loop or a sub-folder named like a note is a bad record: never opened, never dropped
        if not q.is_file():
            yield Record(rid, None, _not_a_note_file(q))
            continue
        try:
            yield _txt_record(rid, q, q.name)
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:  # one damaged .txt.gz: its record, not the end
            yield Record(rid, None, f"file {q.name}: damaged or truncated gzip ({type(err).__name__}); "
                                    "write it again")


def _not_a_note_file(q: Path) -> str:
    """Why a folder entry named like a .txt note is not one (found by stat; a FIFO is never opened)."""
    try:
        kind = path_kind(q.stat().st_mode)
    except OSError as err:
        kind = "broken or looping symbolic link" if q.is_symlink() else (err.strerror or type(err).__name__)
    return f"file {q.name}: a {kind}, not a regular file; put the note in a plain .txt file"


def _txt_record(rid: str, src: Path | Upload, name: str) -> Record:
    """One .txt note (read to at most MAX_LINE_BYTES + 1 bytes, so an oversized one is told, not loaded whole)."""
    try:
        f = open_binary(src, name, where=f"file {name}")
    except DataFormatError as err:  # a UTF-16 note in a folder is one bad record, not the end of the folder
        return Record(rid, None, str(err))
    with f:
        row = next(formats.txt_rows(f, name, limit=MAX_LINE_BYTES))
    if row.fields is None:
        return Record(rid, None, f"file {name}: {row.problem}")
    return _record(rid, row.fields["text"])
