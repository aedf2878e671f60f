"""Low-level file safety shared by every command (and by anything that writes or reads user paths).

- `output_kind_problem`: an existing output path must be a regular file (checked with stat, never by opening it, so a
  FIFO is never read and a device never written).
- `new_private_file`: create a file that must not exist yet, owner-only (0600): for files holding note text.
- `locked_output`: an exclusive, non-blocking lock on an output in the making, so two writers refuse instead of mixing.
- `claim_folder`: a folder claimed by this process (created if new, locked), so two runs cannot write one folder.
- `input_fingerprint`: size, modification time and the hash of the head of an input, to tell a replaced file.
- `read_line_bounded`: one line of at most N bytes from a binary stream, so a file without newlines cannot exhaust
  memory.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from clinicode.errors import ConfigError

HEAD_BYTES = 1 << 20  # bytes of an input hashed by `input_fingerprint`


def path_kind(mode: int) -> str:
    """'file', 'folder', 'FIFO (named pipe)', 'device', 'socket' or 'special file' for a stat mode."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def output_kind_problem(path: Path | str) -> str | None:
    """None when PATH is absent, a regular file or a folder; else what it is (a device, FIFO, socket).

    Uses stat only: nothing is opened, so a FIFO cannot block the caller and a device is not touched.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError:
        return None  # a broken link or an unreadable parent: the caller's other checks say which
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return path_kind(mode)


def check_output_kind(path: Path | str, option: str) -> None:
    """Refuse an existing output that is not a regular file or folder (a device, FIFO or socket), before opening it.

    Raises:
        ConfigError: one line naming the path and what it is.
    """
    kind = output_kind_problem(path)
    if kind is not None:
        raise ConfigError(f"{option} {path} is a {kind}, not a regular file; outputs must be "
                          "regular files or new paths "
                          "(nothing was written).")


def new_private_file(path: Path | str, *, mode: int = 0o600) -> BinaryIO:
    """Open a NEW file for writing, owner-only by default; fails (FileExistsError) if anything exists at PATH.

    For files holding note text (exports, reviews): O_CREAT|O_EXCL|O_NOFOLLOW never follows a link planted at PATH
    and never truncates an existing file.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # the umask cannot widen it, and cannot narrow it below what was asked
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def locked_output(path: Path | str, *, what: str) -> tuple[int, bool]:
    """Open (creating if absent, never truncating) PATH and take an exclusive non-blocking lock on it.

    Returns:
        (file descriptor opened read-write with the lock held, whether this call created the file). Closing the
        descriptor releases the lock.
    Raises:
        ConfigError: another process holds the lock (WHAT names the output for the message); a created file is removed.
    """
    created = False
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
        created = True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if created:
            Path(path).unlink(missing_ok=True)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise ConfigError(f"{what} is being written by another running clinicode command ({Path(path).name} is "
                              "locked); wait for it to finish or choose another "
                              "output (nothing was written).") from None
        raise
    return fd, created


# ------------------------------------------------------------------------------------------------ claimed folders
_claims: dict[str, tuple[int, bool]] = {}  # real path -> (locked descriptor, created by this process)


def claim_folder(path: Path | str, *, option: str) -> bool:
    """Create PATH (and any missing parents) if it is new and hold an exclusive lock on it until `release_claims`
    (re-entrant per process).

    Two processes claiming one folder: the second gets a one-line ConfigError instead of both writing into it.

    Returns:
        True when this call took the claim (False: this process already held it).
    """
    real = os.path.realpath(path)
    if real in _claims:
        return False
    created = False
    os.makedirs(os.path.dirname(real), exist_ok=True)  # a new --out may name new parent folders (runs/demo)
    try:
        os.mkdir(real)  # atomic: of two runs racing for a new folder, one makes it
        created = True
    except FileExistsError:
        pass
    fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise ConfigError(f"{option} {path} is being written by another running clinicode command; wait for it or "
                              "choose another folder (nothing was written).") from None
        raise
    _claims[real] = (fd, created)
    return True


def release_claim(path: Path | str, *, remove_if_empty: bool = False) -> None:
    """Release this process's claim on PATH; with `remove_if_empty`, remove the folder if this process made it and it
    is still empty (a run that failed before writing anything leaves nothing behind)."""
    real = os.path.realpath(path)
    held = _claims.pop(real, None)
    if held is None:
        return
    fd, created = held
    try:
        if remove_if_empty and created:
            try:
                os.rmdir(real)
            except OSError:
                pass  # not empty: something was written, keep it
    finally:
        os.close(fd)


def releases_claims(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: claims taken during the call are released when it returns or raises (empty new folders removed on
    failure)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = set(_claims)
        ok = False
        try:
            out = fn(*args, **kwargs)
            ok = True
            return out
        finally:
            for real in [r for r in _claims if r not in before]:
                release_claim(real, remove_if_empty=not ok)

    return wrapper


# ------------------------------------------------------------------------------------------------ inputs
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


def is_readable_stream(path: Path | str) -> bool:
    """True for a FIFO or pipe (e.g. bash's `<(cmd)`, /dev/fd/N): readable once, front to back."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


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
