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
from typing import Any, Callable, Iterator, Mapping

from clinicode import __version__
from clinicode.constants import MANIFEST_FILE, RUN_DATA_DIR, RUN_FILE, SCHEMA_VERSION
from clinicode.environment import environment_hash
from clinicode.errors import ConfigError
from clinicode.safe_io import check_output_kind


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


def write_safetensors_atomic(path: Path, tensors: dict[str, Any], *, metadata: dict[str, str] | None = None) -> None:
    """Write torch tensors as a safetensors file atomically, with the umask's normal file mode.

    `safetensors.torch.save_file` creates its file with mode 0600, which other users (the Docker image's non-root
    user, a shared run folder) cannot read; serialising to bytes and writing them here gives the usual 0644.
    """
    from safetensors.torch import save

    write_bytes_atomic(path, save(tensors, metadata=metadata))


def write_json_atomic(path: Path, obj: Any) -> None:
    """Serialise `obj` as indented JSON and write it atomically."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@contextmanager
def atomic_dir(out_dir: Path, *, replaces: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `out_dir`, on failure it is removed.

    A crash therefore never leaves a half-written `out_dir`: readers see the old folder or the new one.

    Args:
        out_dir: the folder to create or replace.
        replaces: recognises a folder this command wrote earlier. An existing `out_dir` is replaced only when
            it is empty or `replaces(out_dir)` is true; anything else (a file, a folder of other files) raises
            ConfigError before anything is written. None: replace any folder (for folders inside a run that
            only clinicode writes, such as RUN/state).
    Raises:
        ConfigError: `out_dir` exists and is not something this command may replace.
    """
    out_dir = Path(out_dir)
    _check_replaceable(out_dir, replaces)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.{_owner()}.", suffix=".partial", dir=out_dir.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700, which would hide the folder from other users
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out_dir.exists() or out_dir.is_symlink():
        try:
            _check_replaceable(out_dir, replaces)  # again: something may have appeared there meanwhile
        except ConfigError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
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


def _check_replaceable(out_dir: Path, replaces: Callable[[Path], bool] | None) -> None:
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise ConfigError(f"{out_dir} is an existing file or link, not a folder; pass a new folder "
                          "name (nothing was written).")
    if replaces is None or not out_dir.is_dir():
        return
    if any(True for _ in out_dir.iterdir()) and not replaces(out_dir):
        raise ConfigError(
            f"{out_dir} already holds files that this command did not write; pass a new or empty "
            "folder (nothing was written)."
        )
    foreign = foreign_entries(out_dir)  # [] for an empty folder or one without a manifest
    if foreign:
        raise ConfigError(f"{out_dir} holds {_names(foreign)}, which the earlier output there did not write; move them "
                          "out, or pass a new folder (nothing was written).")


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
        "environment": environment_hash(),  # installed packages + Python (clinicode.environment); see `make lock`
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """Write FOLDER/manifest.json, listing under "outputs" every file and folder now in FOLDER (call it last): a
    later run replacing the folder removes only those (`foreign_entries`)."""
    folder = Path(folder)
    listed = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                    if p.name != MANIFEST_FILE or p.parent != folder)
    write_json_atomic(folder / MANIFEST_FILE, {**manifest, "outputs": listed})


def foreign_entries(folder: Path) -> list[str]:
    """Paths inside FOLDER (an earlier output with a manifest.json) that its manifest does not list as its own; []
    for a folder without a manifest.json.

    A manifest without an "outputs" list (older versions, or a checkpoint's "files" table) lists its top-level files
    by "files"; with neither, every entry but the manifest counts as foreign, so nothing unknown is ever replaced.
    """
    folder = Path(folder)
    if not (folder / MANIFEST_FILE).is_file():
        return []  # not a manifest-described output (a run folder: train writes inside it, never replaces it)
    try:
        data = read_json(folder / MANIFEST_FILE)
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    own: set[str] = {MANIFEST_FILE}
    listed = data.get("outputs")
    if isinstance(listed, list):
        own.update(str(x) for x in listed)
        present = {str(p.relative_to(folder)) for p in folder.rglob("*")}
    else:
        files = data.get("files")
        if isinstance(files, dict):
            own.update(str(x) for x in files)
        present = {p.name for p in folder.iterdir()}
    return sorted(present - own)


def _names(paths: list[str]) -> str:
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return shown


# ------------------------------------------------------------------------------------------------ where outputs go
def manifest_kind(folder: Path, name: str = MANIFEST_FILE) -> str | None:
    """The `kind` of FOLDER/NAME (a manifest written by clinicode), or None when absent or unreadable."""
    try:
        data = read_json(Path(folder) / name)
    except (OSError, ValueError):
        return None
    return data.get("kind") if isinstance(data, dict) and isinstance(data.get("kind"), str) else None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(path))))


def _within(child: Path, parent: Path) -> bool:
    return child == parent or child.is_relative_to(parent)


def check_output(
    path: Path,
    *,
    option: str,
    command: str,
    folder: bool,
    inputs: Mapping[str, Path | str | None] = {},
    recognise: Callable[[Path], bool] | None = None,
) -> Path:
    """Refuse an output path that could destroy or alter anything the command did not write; call before any work.

    The rule every writing command follows: the output may be new, an empty folder, or an earlier output of the
    same command (`recognise`); never an input, a folder holding an input, a place inside an input folder, a file
    where a folder is wanted (or a folder where a file is wanted), or something else that already exists. A
    missing parent folder is fine (it is created when the output is written); one that is a file, or a location
    that cannot be written, is refused now rather than after minutes of work.

    Args:
        path: the output (folder or file) as the user gave it.
        option: the option's name for messages, e.g. "--out".
        command: the clinicode command, for messages ("prepare").
        folder: True when the output is a folder, False for a file.
        inputs: option name -> input path (files or folders; None entries are skipped).
        recognise: true for an existing output this command wrote earlier (then it may be replaced).
    Returns:
        The resolved output path.
    Raises:
        ConfigError: a one-line message naming the path, what it is, and what to pass instead.
    """
    given = Path(path)
    real = _real(given)
    kind = "folder" if folder else "file"
    for name, inp in inputs.items():
        if inp is None or str(inp) == "-":
            continue
        src = _real(Path(inp))
        if real == src:
            raise ConfigError(f"{option} {given} is the input {name} {inp}; pass a new {kind} for the output so "
                              "the input stays untouched.")
        if _within(src, real):
            raise ConfigError(f"{option} {given} contains the input {name} {inp}; writing there could replace it. Pass "
                              f"a new {kind} outside the inputs.")
        if src.is_dir() and _within(real, src):
            raise ConfigError(f"{option} {given} lies inside the input folder {name} {inp}; write outputs "
                              "outside the input folders.")
    if given.is_symlink() and not given.exists():
        raise ConfigError(f"{option} {given} is a broken symbolic link; pass a new {kind} name.")
    check_output_kind(given, option)  # a device, FIFO or socket: refused by stat, before anything opens it
    if real.exists():
        if folder and not real.is_dir():
            raise ConfigError(f"{option} {given} is an existing file; pass a new folder name (nothing was written).")
        if not folder and real.is_dir():
            raise ConfigError(f"{option} {given} is a folder; pass a file name inside it "
                              "instead (nothing was written).")
        empty = folder and not any(True for _ in real.iterdir())
        if not empty and not (recognise is not None and recognise(real)):
            what = "holds files that" if folder else "exists and is a file that"
            raise ConfigError(f"{option} {given} already {what} `clinicode {command}` did not write; "
                              f"pass a new {kind} name (nothing was written).")
        foreign = foreign_entries(real) if folder and not empty else []
        if foreign:
            raise ConfigError(f"{option} {given} is an earlier `clinicode {command}` output, but {_names(foreign)} "
                              "inside it were not written by it; move them out, or pass a new "
                              "folder (nothing was written).")
    ancestor = real.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{option} {given}: {ancestor} is a file, not a folder; pass a path under a folder.")
    _probe_writable(ancestor, option, given)
    return real


def _probe_writable(folder: Path, option: str, given: Path) -> None:
    """Create and remove a hidden file in FOLDER: catches read-only and virtual file systems (/proc) up front."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".clinicode-probe.", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise ConfigError(f"{option} {given}: cannot write in {folder} ({err.strerror}); "
                          "pass a writable location.") from None


def is_run_folder(folder: Path) -> bool:
    """A folder written by `clinicode train`: run.json, (older runs) state/state.json or a checkpoint, or a run in
    the making that so far holds only its own prepared dataset in RUN/data."""
    folder = Path(folder)
    if manifest_kind(folder, RUN_FILE) == "run" or holds_training(folder):
        return True
    try:
        entries = [p.name for p in folder.iterdir() if not p.name.startswith(".")]
    except OSError:
        return False
    return entries == [RUN_DATA_DIR] and manifest_kind(folder / RUN_DATA_DIR) == "prepared-dataset"


def holds_training(folder: Path) -> bool:
    """A run folder in which training has made progress: a state (an epoch ended) or a checkpoint.

    A run.json alone (a run that failed or was killed before its first epoch ended) is not: a plain re-run may start
    over there, as it would in a new folder.
    """
    folder = Path(folder)
    return (folder / "state" / "state.json").is_file() or manifest_kind(folder / "checkpoint") == "checkpoint"


def is_run_data(run: Path, data_dir: Path | None) -> bool:
    """True when DATA_DIR is RUN's own prepared dataset (RUN/data), which may sit inside the run folder."""
    return data_dir is not None and _real(Path(data_dir)) == _real(Path(run) / RUN_DATA_DIR)

