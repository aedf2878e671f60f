"""Opening the review database safely: where it is (--db, else $CLINICODE_REVIEW_DB), the file rules before SQLite
sees it, then a migration (or, read-only, a version check) in one transaction."""

from __future__ import annotations

import os
import random
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import TypeVar

from clinicode.errors import ConfigError
from clinicode.review.store.errors import BUSY_MS, RETRIES, ReviewError, is_busy, translate
from clinicode.review.store.file_rules import (
    COMPANIONS,
    check_companions,
    check_db_file,
    check_header,
    check_private,
    create_owner_only,
    on_read_only_medium,
    remove_created,
)
from clinicode.review.store.handle import ReviewStore
from clinicode.review.store.schema import SCHEMA_VERSION, check_readable, migrate

DB_ENV = "CLINICODE_REVIEW_DB"
Handle = TypeVar("Handle", bound=ReviewStore)


def db_path(db: str | Path | None) -> Path:
    """--db, else $CLINICODE_REVIEW_DB."""
    value = db if db not in (None, "") else os.environ.get(DB_ENV)
    if not value:
        raise ConfigError(f"no review database given; pass --db FILE or set {DB_ENV}.")
    return Path(value).expanduser()


def open_store(db: str | Path | None = None, *, create: bool = True, readonly: bool = False,
               handle: type[Handle] = ReviewStore, _target: int = SCHEMA_VERSION) -> Handle:
    """Open (creating when `create`, owner-only) and migrate the review database at --db / $CLINICODE_REVIEW_DB, as a
    HANDLE (`ReviewStore`, or a subclass such as `clinicode.review.ReviewDB`).

    Before SQLite sees the path: it must be a regular file (a FIFO or a device is refused at once, never opened) of
    this user that no one else may read, and any -wal, -shm or -journal beside it likewise. `readonly` (reports,
    exports) opens it with SQLite's mode=ro: it is never created, migrated or written (an empty file stays empty).

    Raises:
        ConfigError: no path given, or a folder. ReviewError: missing (create=False or readonly), not ours, shared
            with others, a special file, on a read-only medium (for writing), damaged, newer, or older (readonly).
    """
    path = db_path(db)
    created = False
    try:
        st = path.stat()
    except FileNotFoundError:
        if readonly or not create:
            raise ReviewError(f"no review database at {path}; queue notes into it first with `clinicode review "
                              "queue`.") from None
        if on_read_only_medium(path.parent if path.parent.exists() else Path(path.anchor or ".")):
            raise ReviewError(f"cannot create the review database {path}: its folder is on a read-only file system; "
                              "pass a --db path on a writable disk.") from None
        created = create_owner_only(path)
        st = path.stat()
    if not created:
        return _open_existing(path, st, handle, readonly=readonly, target=_target)
    companions = {s for s in COMPANIONS if os.path.lexists(f"{path}{s}")}  # planted before us: never ours to remove
    try:
        return _open_existing(path, st, handle, readonly=readonly, target=_target, created=True)
    except BaseException:
        remove_created(path, st, companions)  # a refused or failed first open leaves nothing it created
        raise


def _open_existing(path: Path, st: os.stat_result, handle: type[Handle], *, readonly: bool, target: int,
                   created: bool = False) -> Handle:
    check_db_file(path, st)
    check_header(path, st)
    check_private(path, st)
    check_companions(path)
    read_only_medium = on_read_only_medium(path)
    if readonly and st.st_size == 0:
        raise ReviewError(f"{path} is empty: it holds no review database yet (nothing was changed); queue notes into "
                          "it with `clinicode review queue`.")
    if read_only_medium and not readonly:
        raise ReviewError(f"review database {path} is on a read-only file system, so this command cannot save "
                          "anything; copy the file to a writable disk (or remount it read-write) and pass that "
                          "--db. `review stats` and `review export` can read it where it is.")
    uri = None
    if readonly:
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
        if read_only_medium:  # SQLite cannot make its -shm there; nothing can change the file, so read it as is
            wal = Path(f"{path}-wal")
            if wal.exists() and wal.stat().st_size:
                raise ReviewError(f"review database {path} is on a read-only file system with changes still in "
                                  f"{wal.name}; copy both files to a writable disk and pass that --db.")
            uri += "&immutable=1"
    old = os.umask(0o077)  # the -wal and -shm files (they hold note text too) are owner-only as well
    try:
        con = sqlite3.connect(uri or path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False,
                              uri=uri is not None)
        con.row_factory = sqlite3.Row
        try:
            con.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            if readonly:
                con.execute("PRAGMA query_only = ON")
                check_readable(con, path)
            else:
                _open_for_writing(con, path, target=target)
        except sqlite3.Error as err:
            con.close()
            raise translate(err, path) from None
        except BaseException:
            con.close()
            raise
    finally:
        os.umask(old)
    return handle(path, con, created=created, readonly=readonly)


def _open_for_writing(con: sqlite3.Connection, path: Path, *, target: int) -> None:
    for attempt in range(RETRIES):
        try:
            migrate(con, path, target=target)
            if con.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                con.execute("PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError as err:
            if not is_busy(err) or attempt + 1 == RETRIES:
                raise
            time.sleep(random.uniform(0.01, 0.2) * (attempt + 1))
    con.execute("PRAGMA synchronous = NORMAL")   # WAL: durable at checkpoints, never corrupt
    con.execute("PRAGMA foreign_keys = ON")
