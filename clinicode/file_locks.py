"""Claims and locks on outputs: one run per folder (`claim_folder`), an output file in the making locked
(`locked_output`), and new owner-only files for note text (`new_private_file`); standard library only."""

from __future__ import annotations

import errno
import fcntl
import functools
import os
from pathlib import Path
from typing import Any, BinaryIO, Callable

from clinicode.errors import ConfigError


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
