"""Clinicode's files on disk: path kinds, atomic writes, marks of what is ours, `PartialFile` and the output rule.

The one room for file ownership (docs/architecture.md), with `file_locks` and `file_inputs`: standard library only."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from clinicode.constants import MANIFEST_FILE
from clinicode.errors import ConfigError

# read from here by cli (claims), review (private files) and codes (bounded lines)
from clinicode.file_inputs import LineTooLong as LineTooLong, read_lines_bounded as read_lines_bounded
from clinicode.file_locks import (
    claim_folder as claim_folder,
    locked_output,
    new_private_file as new_private_file,
    releases_claims as releases_claims,
)

# ------------------------------------------------------------------------------------------------ path kinds
_KINDS = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO (named pipe)"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"),
          (stat.S_ISLNK, "symbolic link"))


def path_kind(mode: int, *, devices: bool = False) -> str:
    """What a stat (or lstat) mode is: 'file', 'folder', 'FIFO (named pipe)', 'device', 'socket', 'symbolic link' or
    'special file'; with `devices`, a device is a 'character device' or a 'block device'."""
    kind = next((name for test, name in _KINDS if test(mode)), "special file")
    return "device" if kind.endswith(" device") and not devices else kind


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


def is_readable_stream(path: Path | str) -> bool:
    """True for a FIFO or pipe (e.g. bash's `<(cmd)`, /dev/fd/N): readable once, front to back."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


# ------------------------------------------------------------------------------------- hashes, reads, atomic writes
def sha256_file(path: Path, *, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


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


# ------------------------------------------------------------------------------------------------ marks
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


def manifest_kind(folder: Path, name: str = MANIFEST_FILE) -> str | None:
    """The `kind` of FOLDER/NAME (a manifest written by clinicode), or None when absent or unreadable."""
    try:
        data = read_json(Path(folder) / name)
    except (OSError, ValueError):
        return None
    return data.get("kind") if isinstance(data, dict) and isinstance(data.get("kind"), str) else None


def own_json(path: Path, kind: str) -> bool | None:
    """None when PATH is absent; True when it is a regular file holding clinicode's JSON of KIND; else False."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return False
    return manifest_kind(path.parent, path.name) == kind


def file_marker(out: Path) -> Path:
    """The hidden file beside a finished output file that says clinicode wrote it: `.OUT.clinicode.json`."""
    out = Path(out)
    return out.with_name(f".{out.name}.clinicode.json")


def is_marked_file(path: Path, kind: str) -> bool:
    """True for a file a clinicode command marked as its output of KIND, or an empty regular file (nothing to lose).

    Recognised by its marker (`file_marker`), which records the run id and the output's size and SHA-256 when it
    was written: a file edited or replaced since, or any file without a marker, is not recognised, whatever its
    records look like.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if st.st_size == 0:
        return True
    try:
        mark = read_json(file_marker(p))
    except (OSError, ValueError):
        return False
    return (isinstance(mark, dict) and mark.get("kind") == kind and mark.get("size") == st.st_size
            and mark.get("sha256") == sha256_file(p))


# ------------------------------------------------------------------------------------------- file outputs in the making
class PartialFile:
    """A file output OUT in the making: written as OUT.partial (locked while a run writes it), beside OUT.partial.json,
    the writer's record (a sidecar of kind `partial_kind`), and finished by `publish`: the marker `.OUT.clinicode.json`
    of kind `kind`, then the rename to OUT. A killed run leaves no half-written OUT; a second run to the same OUT
    refuses; an OUT.partial, sidecar or marker that this command did not write is never touched.

    Use: `check()` (before any work), `lock()`, then write to `fd`; `abandon()` on a failure before writing,
    `publish(run_id)` at the end (the caller closes `fd` after it, releasing the lock), `drop_sidecar()`.
    """

    def __init__(self, out: Path | str, *, kind: str, partial_kind: str, command: str, option: str) -> None:
        self.out = Path(out)
        self.partial = self.out.with_name(self.out.name + ".partial")
        self.sidecar = self.out.with_name(self.out.name + ".partial.json")
        self.marker = file_marker(self.out)
        self.kind = kind
        self.partial_kind = partial_kind
        self.command = command
        self.option = option
        self.fd: int | None = None
        self.created = False  # `lock` made OUT.partial
        self.existed = False  # OUT.partial was there before `lock` (an interrupted run's)

    def check(self) -> None:
        """Refuse an OUT.partial, sidecar or marker that is not a regular file or not this command's own.

        Raises:
            ConfigError: one line naming the path (nothing was written).
        """
        for p in (self.partial, self.sidecar, self.marker):
            check_output_kind(p, self.option)
        if own_json(self.marker, self.kind) is False:
            raise self._not_ours(self.marker)
        own_sidecar = own_json(self.sidecar, self.partial_kind)
        if own_sidecar is False:
            raise self._not_ours(self.sidecar)
        partial = self.partial
        if (partial.exists() or partial.is_symlink()) and (partial.is_symlink() or not partial.is_file()
                                                           or not own_sidecar):
            raise self._not_ours(partial)

    def _not_ours(self, path: Path) -> ConfigError:
        return ConfigError(f"{path} exists and was not written by `clinicode {self.command}`; move "
                           "it away or choose another "
                           f"{self.option} (nothing was written).")

    def lock(self) -> int:
        """Open OUT.partial (created if absent, never truncated) with its lock held (`locked_output`)."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.existed = self.partial.is_file()
        self.fd, self.created = locked_output(self.partial, what=f"{self.option} {self.out}")
        return self.fd

    def abandon(self) -> None:
        """Release the lock before anything was written; remove OUT.partial if `lock` made it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.created:
            self.partial.unlink(missing_ok=True)

    def publish(self, run_id: str) -> None:
        """Mark OUT.partial (kind, run id, size, SHA-256) and rename it to OUT; the lock stays held until the caller
        closes `fd`."""
        # The marker first: a kill between the two steps leaves an output without a matching marker, which is
        # then refused rather than overwritten (the safe side).
        write_json_atomic(self.marker, {
            "kind": self.kind, "run_id": run_id, "size": self.partial.stat().st_size,
            "sha256": sha256_file(self.partial)})
        os.replace(self.partial, self.out)

    def drop_sidecar(self) -> None:
        self.sidecar.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------ the output rule
def real_path(path: Path | str) -> Path:
    """PATH with ~ expanded and every link resolved: what the output rule compares."""
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
    real = real_path(given)
    kind = "folder" if folder else "file"
    for name, inp in inputs.items():
        if inp is None or str(inp) == "-":
            continue
        src = real_path(Path(inp))
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
