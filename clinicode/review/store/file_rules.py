"""The file rules, checked before SQLite opens a path: a regular owner-only file of this user, its -wal, -shm and
-journal likewise, an SQLite header of ours; and creating (and, after a failed first open, removing) it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from clinicode.errors import ConfigError
from clinicode.files import new_private_file, path_kind
from clinicode.review.store.errors import ReviewError
from clinicode.review.store.schema import APPLICATION_ID

SQLITE_MAGIC = b"SQLite format 3\x00"
COMPANIONS = ("-wal", "-shm", "-journal")  # SQLite's files beside the database; they hold note text too


def create_owner_only(path: Path) -> bool:
    """Create the empty file 0600 before SQLite touches it (O_EXCL: never an existing file). True when this call made
    it, so a command that then fails may remove it again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        new_private_file(path).close()
    except FileExistsError:
        return False  # another process created it a moment ago; it is checked like any existing file
    return True


def check_db_file(path: Path, st: os.stat_result) -> None:
    """The database must be a regular file of ours that no one else may read: note text goes into it. Checked with
    stat only, so a FIFO or a device is refused at once, never opened."""
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"--db {path} is a folder; pass a file name for the review database.")
    if not stat.S_ISREG(st.st_mode):
        raise ReviewError(f"--db {path} is a {path_kind(st.st_mode, devices=True)}, not a regular file; pass a file "
                          "name for the review database (nothing was opened).")
    if st.st_uid != os.geteuid():
        raise ReviewError(f"--db {path} belongs to another user (uid {st.st_uid}); the review database holds note "
                          "text and must be your own file: pass a new --db path, which clinicode creates owner-only "
                          "(nothing was opened).")


def check_private(path: Path, st: os.stat_result) -> None:
    if st.st_mode & 0o077:
        raise ReviewError(f"--db {path} can be read or written by others (mode {stat.S_IMODE(st.st_mode):04o}); the "
                          "review database holds note text and must be owner-only: if the file is yours, `chmod 600 "
                          f"{path}`, or pass a new --db path, which clinicode creates owner-only (nothing was opened).")


def check_companions(path: Path) -> None:
    """A -wal, -shm or -journal file that clinicode did not make for this user (another owner, others may read it, a
    link or a FIFO) is refused before SQLite opens the database: SQLite would write note text into it. The advice
    never removes one: a -wal may hold committed decisions that are in no other file (after a crash, or while the app
    has the database open), so a shared one is made owner-only again with chmod, as the database itself is."""
    loose, other = [], []
    for suffix in COMPANIONS:
        comp = Path(f"{path}{suffix}")
        try:
            st = comp.lstat()
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            other.append(f"{comp} is a {path_kind(st.st_mode, devices=True)}")
        elif st.st_uid != os.geteuid():
            other.append(f"{comp} is owned by another user (uid {st.st_uid})")
        elif st.st_mode & 0o077:
            loose.append((comp, stat.S_IMODE(st.st_mode)))
    if other:
        raise ReviewError(f"{'; '.join(other)}: not the review database's own file, and SQLite would write note text "
                          "into it (it may also hold decisions not yet in the database, so keep it); pass another "
                          "--db path, or ask whoever made it (nothing was opened).")
    if loose:
        names = " ".join(str(c) for c, _ in loose)
        modes = ", ".join(f"{c.name} mode {m:04o}" for c, m in loose)
        raise ReviewError(f"the review database's own files can be read or written by others ({modes}); they hold "
                          f"note text and may hold decisions not yet in {path.name}: if they are yours, "
                          f"`chmod 600 {names}` (keep them: removing one loses those decisions), or pass another "
                          "--db path (nothing was opened).")


def on_read_only_medium(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_header(path: Path, st: os.stat_result) -> None:
    # O_NONBLOCK: should the path have become a FIFO since the stat, opening it still returns at once
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise ReviewError(f"--db {path} was replaced while it was being opened; repeat the command.")
        head = os.read(fd, 100)  # SQLite's file header
    finally:
        os.close(fd)
    if head and head[:len(SQLITE_MAGIC)] != SQLITE_MAGIC:
        raise ReviewError(f"{path} is not a clinicode review database (not an SQLite file); pass another --db path "
                          "(nothing was changed).")
    if len(head) == 100:  # told from the header alone, before SQLite opens the file
        app_id, pages = int.from_bytes(head[68:72], "big"), int.from_bytes(head[28:32], "big")
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and pages > 1):
            raise ReviewError(f"{path} is an SQLite database of another program, not a clinicode review database; "
                              "pass another --db path (nothing was changed).")


def remove_created(path: Path, st: os.stat_result, kept: set[str]) -> None:
    """Remove the database file this process created a moment ago (only if it is still that file), and the SQLite
    companions that appeared with it; companions that were there before stay."""
    try:
        now = path.lstat()
    except OSError:
        return
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        return  # replaced meanwhile: not ours any more
    for suffix in COMPANIONS:
        if suffix not in kept:
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.unlink(missing_ok=True)
