"""Atomic writes, file hashes and manifest.json for every stage's output folder."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from clinicode import __version__
from clinicode.constants import MANIFEST_FILE, SCHEMA_VERSION


def sha256_file(path: Path, *, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, fsync, then rename over it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; artefacts should get normal file modes
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """Serialise `obj` as indented JSON and write it atomically."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@contextmanager
def atomic_dir(out_dir: Path, *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `out_dir`, on failure it is removed.

    A crash therefore never leaves a half-written `out_dir`: readers see the old folder or the new one.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.{_owner()}.", suffix=".partial", dir=out_dir.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700, which would hide the folder from other users
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out_dir.exists():
        if not overwrite:
            shutil.rmtree(tmp, ignore_errors=True)
            raise FileExistsError(out_dir)
        if _exchange(tmp, out_dir):
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the previous folder
            return
        # No atomic exchange here: two renames, with a moment in which out_dir is absent.
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)


def _owner() -> str:
    """host-pid, embedded in temporary folder names so a later run can tell whose leftovers they are."""
    return f"{socket.gethostname().replace('.', '_')}-{os.getpid()}"


def _sweep_stale(out_dir: Path) -> None:
    """Remove `out_dir`'s temporary siblings left by killed writers on this host (their process is gone).

    Only names this module makes are touched (`.NAME.HOST-PID.*.partial`, `.NAME.old-PID`); folders of live
    processes and of other hosts (a shared file system) are left alone.
    """
    host = socket.gethostname().replace(".", "_")
    pat = re.compile(rf"\.{re.escape(out_dir.name)}\.(?:{re.escape(host)}-(\d+)\.[^/]*\.partial|old-(\d+))")
    try:
        siblings = list(out_dir.parent.iterdir())
    except OSError:
        return
    for p in siblings:
        m = pat.fullmatch(p.name)
        if not m or not p.is_dir() or p.is_symlink():
            continue
        pid = int(m.group(1) or m.group(2))
        if pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_renameat2: Any = None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported.

    Replacing a folder otherwise takes two renames, and a kill -9 between them would leave no folder at all.
    """
    global _renameat2
    if _renameat2 is None:
        _renameat2 = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fn = libc.renameat2
                fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
                fn.restype = ctypes.c_int
                _renameat2 = fn
            except (OSError, AttributeError):
                pass
    if not _renameat2:
        return False
    rc = _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False  # the file system or kernel cannot exchange; fall back to two renames
    raise OSError(err, os.strerror(err), str(b))


def make_manifest(kind: str, **fields: Any) -> dict[str, Any]:
    """A manifest dict with schema and package versions, creation time and any stage-specific fields."""
    return {
        "kind": kind,
        "schema_version": SCHEMA_VERSION,
        "clinicode_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    write_json_atomic(Path(folder) / MANIFEST_FILE, manifest)
