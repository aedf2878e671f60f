"""SQLite's errors as one `ReviewError` line each (never the SQL, never note text), and the busy rule: how long a
writer waits and how often a busy transaction is retried."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from clinicode.errors import ClinicodeError

BUSY_MS = 10_000                     # SQLite waits this long for another writer before reporting busy
RETRIES = 6                          # then we retry the whole transaction this many times (with jitter)


class ReviewError(ClinicodeError):
    """A review database problem or a refused decision (one line, no note text)."""


class ClaimedError(ReviewError):
    """The note is being reviewed by someone else (their claim has not expired)."""


def _code_of(err: sqlite3.Error) -> int | None:
    code = getattr(err, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF  # primary result code


def is_busy(err: sqlite3.Error) -> bool:
    return _code_of(err) in (5, 6) or "locked" in str(err) or "busy" in str(err)


def translate(err: sqlite3.Error, path: Path) -> ReviewError:
    """One line for an SQLite error (never the SQL, never note text)."""
    code, text = _code_of(err), str(err)
    where = Path(os.path.abspath(path)).parent  # the folder to free space in
    if code == 13 or "disk is full" in text:  # SQLITE_FULL: the file is intact, the change rolled back
        return ReviewError(f"review database {path}: the disk is full, so this change was not saved (everything saved "
                           f"before is intact); free some space on the disk holding {where} and repeat the command.")
    if code == 10 or "disk I/O error" in text:  # SQLITE_IOERR: a write or the -shm map failed (a full or failing disk)
        return ReviewError(f"review database {path}: disk I/O error, so the disk holding {where} is full or failing; "
                           "this command saved nothing and everything saved before is intact: free some space there "
                           "(or check the disk) and repeat the command.")
    if code in (11, 26) or "malformed" in text or "not a database" in text:
        return ReviewError(f"review database {path} is damaged ({text}); restore it from a "
                           "copy, or pass a new --db file.")
    if code == 14 or "unable to open" in text:
        return ReviewError(f"review database {path}: SQLite could not open it or its -wal/-shm files (the file or its "
                           "folder cannot be read or written); check their permissions and that the disk is "
                           "writable.")
    if code == 8 or "readonly" in text:
        return ReviewError(f"review database {path} cannot be written (read-only file or "
                           "folder); check its permissions.")
    if is_busy(err):
        return ReviewError(f"review database {path} stayed busy with another process's changes for over a minute; "
                           "nothing was saved by this command, repeat it.")
    if "append-only" in text:
        return ReviewError(f"review database {path}: decisions are append-only and cannot be changed or removed.")
    return ReviewError(f"review database {path}: {type(err).__name__}: {text}; check the "
                       "file, or pass a new --db file.")
