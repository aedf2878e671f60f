"""Opening an input's bytes with the bounds every text reader shares: a `.gz` name or gzip's magic read through gzip,
zip, bzip2, xz, zstd or Parquet bytes under a text name refused, a UTF-8 byte-order mark dropped, UTF-16/32 refused."""

from __future__ import annotations

import codecs
import gzip
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from clinicode.errors import DataFormatError


@dataclass(frozen=True)
class Upload:
    """A file held in memory (an upload in the app): its name decides the format."""

    name: str
    data: bytes


def suffix(name: str) -> str:
    """The format-deciding ending of a file name, lower case: '.csv', or '.csv.gz' for a gzipped one."""
    p = Path(str(name).lower())
    return "".join(p.suffixes[-2:]) if p.suffix == ".gz" else p.suffix


def open_binary(source: Path | str | Upload | BinaryIO, name: str | None = None, *, text: bool = True,
                where: str | None = None) -> BinaryIO:
    """A binary stream over SOURCE (a path, an `Upload` or an open stream) with the shared bounds applied: a name
    ending in .gz is read through gzip, and so is a text format's stream that starts with gzip's magic bytes
    whatever its name (stdin, a pipe, a misnamed file); a text format's leading UTF-8 byte-order mark is dropped.

    Raises:
        DataFormatError: a text format's stream (or a .gz name's raw bytes) starts like a zip, bzip2, xz, zstd or
            Parquet file: one line saying what it is and how to fix it.
        DataFormatError: a text format's stream starts with a UTF-16 or UTF-32 byte-order mark (named by WHERE, else
            by the name), which no reader can decode line by line; one line saying how to re-encode it.
    """
    if isinstance(source, Upload):
        name = name or source.name
    elif isinstance(source, (str, Path)):
        name = name or str(source)
    gz = text and suffix(name or "").endswith(".gz")
    if isinstance(source, Upload):
        f: BinaryIO = io.BytesIO(source.data)
    elif isinstance(source, (str, Path)):
        f = open(source, "rb")
    else:
        f = source
    if text:
        other = _binary_kind(_head(f, 10))
        if other is not None:
            if isinstance(source, (str, Path)):
                f.close()
            what, fix = other
            shown = Path(name).name if name else "FILE"
            raise DataFormatError(f"{where or name or 'input'}: {what}, not {'gzip-compressed ' if gz else ''}text "
                                  f"(its first bytes say so); {fix.replace('FILE', shown)}.")
    if gz:  # a path we opened is closed with the gzip stream over it
        f = _GzipOwning(f) if isinstance(source, (str, Path)) else gzip.GzipFile(fileobj=f)
    elif text and _head(f, 2) == GZIP_MAGIC:
        f = _GzipOwning(f) if isinstance(source, (str, Path)) else gzip.GzipFile(fileobj=f)  # a pipe: not reopened
    if text:
        _skip_bom(f)
        head = _head(f, 4)
        wide = next((enc for bom, enc in _WIDE_BOMS if head.startswith(bom)), None)
        if wide is not None:
            if isinstance(source, (str, Path, Upload)):
                f.close()
            raise DataFormatError(f"{where or name or 'input'}: {wide} text (its byte-order mark says so), not "
                                  f"UTF-8; re-encode the file as UTF-8 (e.g. iconv -f {wide} -t UTF-8).")
    return f


GZIP_MAGIC = b"\x1f\x8b"
# Files that are no text however they are named: (first bytes, what the file is, how to fix; FILE: its name).
_BINARY_MAGIC = (
    (b"PK\x03\x04", "a zip archive", "unzip it (`unzip FILE`) and pass the file inside"),
    (b"PK\x05\x06", "an empty zip archive", "unzip it (`unzip FILE`) and pass the file inside"),
    (b"\xfd7zXZ\x00", "xz-compressed data", "decompress it (`unxz -k FILE`), or compress it with gzip instead "
                                         "(a .gz name is read as it is)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data", "decompress it (`unzstd FILE`), or compress it with gzip instead"),
    (b"PAR1", "a Parquet file", "name it .parquet (or pass --input-format parquet)"),
)
_BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")  # bzip2's header and first block's magic


def _binary_kind(head: bytes) -> tuple[str, str] | None:
    """(what the file is, how to fix) for the first bytes of a zip, bzip2, xz, zstd or Parquet file, else None."""
    if _BZIP2.match(head):
        return "bzip2-compressed data", ("decompress it (`bunzip2 -k FILE`), or compress it with gzip instead "
                                         "(a .gz name is read as it is)")
    for magic, what, fix in _BINARY_MAGIC:
        # Parquet's "PAR1" is followed by binary page headers; a text file may start with the word "PAR1"
        if head.startswith(magic) and (magic != b"PAR1" or (len(head) > 4 and head[4] < 0x20 and head[4] not in
                                                             b"\t\n\r")):
            return what, fix
    return None


# UTF-32 first: its little-endian mark starts with UTF-16's.
_WIDE_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"), (codecs.BOM_UTF16_LE, "UTF-16"),
              (codecs.BOM_UTF16_BE, "UTF-16"))


class _GzipOwning(gzip.GzipFile):
    """gzip over a file we opened (a misnamed file or a pipe, already peeked at): closing it closes that file."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw)
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _head(f: BinaryIO, n: int) -> bytes:
    """The first N bytes still to be read from F, without consuming them (b"" for a stream that can neither peek
    nor seek)."""
    if hasattr(f, "peek"):
        return f.peek(n)[:n]
    if f.seekable():
        start = f.tell()
        data = f.read(n)
        f.seek(start)
        return data
    return b""


def _skip_bom(f: BinaryIO) -> None:
    if _head(f, len(codecs.BOM_UTF8)) == codecs.BOM_UTF8:
        f.read(len(codecs.BOM_UTF8))
