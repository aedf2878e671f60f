"""Inputs as clinicode reads them: `input_fingerprint` (to tell a replaced input) and `read_lines_bounded` (a file
without newlines cannot exhaust memory); standard library only."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, Iterator

HEAD_BYTES = 1 << 20  # bytes of an input hashed by `input_fingerprint`


def input_fingerprint(path: Path | str) -> dict[str, Any] | None:
    """{"size", "mtime_ns", "head_sha256"} of a regular file (its first HEAD_BYTES hashed), or, for a folder, the
    same of every regular file directly inside it, hashed together. None for anything else (stdin, a pipe)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        h = hashlib.sha256()
        with open(p, "rb") as f:
            h.update(f.read(HEAD_BYTES))
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "head_sha256": h.hexdigest()}
    if stat.S_ISDIR(st.st_mode):
        h = hashlib.sha256()
        size = 0
        latest = st.st_mtime_ns
        for q in sorted(p.iterdir()):
            sub = input_fingerprint(q) if q.is_file() else None
            if sub is not None:
                line = f"{q.name}\0{sub['size']}\0{sub['mtime_ns']}\0{sub['head_sha256']}\n"
                h.update(line.encode("utf-8", "surrogateescape"))
                size += sub["size"]
                latest = max(latest, sub["mtime_ns"])
        return {"size": size, "mtime_ns": latest, "head_sha256": h.hexdigest()}
    return None


class LineTooLong:
    """Yielded by `read_lines_bounded` in place of a line longer than its bound."""


def read_lines_bounded(f: BinaryIO, limit: int) -> Iterator[bytes | LineTooLong]:
    """Lines of a binary stream (with their newline), each at most LIMIT bytes; a longer line is yielded as a
    LineTooLong at once (a caller may stop there: /dev/zero never ends) and, if the caller reads on, skipped in
    chunks without being held, so a line without end costs LIMIT bytes of memory."""
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        del line
        yield LineTooLong()
        while True:  # the caller read on: skip to the end of this line without keeping it
            chunk = f.readline(1 << 20)
            if not chunk or chunk.endswith(b"\n"):
                break
