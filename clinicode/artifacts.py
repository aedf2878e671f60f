"""Atomic writes, file hashes and manifest.json for every stage's output folder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
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
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial", dir=out_dir.parent))
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
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)


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
