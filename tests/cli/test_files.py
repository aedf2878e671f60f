"""clinicode.files, the room for file ownership: path kinds, and a file output claimed, locked, marked and recognised
(`PartialFile`, `is_marked_file`) without any model, so the rule is checked on its own."""

from __future__ import annotations

import os
import stat

import pytest

from clinicode.errors import ConfigError
from clinicode.files import PartialFile, file_marker, is_marked_file, path_kind


def test_path_kind_names_every_kind_and_devices_only_when_asked(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert path_kind(os.stat(tmp_path).st_mode) == "folder"
    assert path_kind(os.lstat(link).st_mode) == "symbolic link"
    assert path_kind(os.stat(fifo).st_mode) == "FIFO (named pipe)"
    assert path_kind(stat.S_IFCHR) == "device" and path_kind(stat.S_IFBLK) == "device"
    assert path_kind(stat.S_IFCHR, devices=True) == "character device"
    assert path_kind(stat.S_IFBLK, devices=True) == "block device"
    assert path_kind(stat.S_IFSOCK) == "socket" and path_kind(stat.S_IFREG) == "file"


def _claim(out):
    return PartialFile(out, kind="test-output", partial_kind="test-partial", command="test", option="--output")


def test_a_published_file_is_recognised_until_it_changes(tmp_path):
    out = tmp_path / "o.jsonl"
    claim = _claim(out)
    claim.check()
    fd = claim.lock()
    assert claim.created and not claim.existed
    os.write(fd, b'{"id": "1"}\n')
    claim.publish("run-1")
    os.close(fd)
    assert out.read_bytes() == b'{"id": "1"}\n' and not claim.partial.exists()
    assert is_marked_file(out, "test-output") and not is_marked_file(out, "other-output")
    out.write_bytes(b'{"id": "2"}\n')  # edited since: no longer ours
    assert not is_marked_file(out, "test-output")
    file_marker(out).unlink()
    out.write_bytes(b"")
    assert is_marked_file(out, "test-output")  # an empty file: nothing to lose


def test_a_partial_file_another_run_holds_or_that_is_not_ours_is_refused(tmp_path):
    out = tmp_path / "o.jsonl"
    first = _claim(out)
    first.lock()
    with pytest.raises(ConfigError, match="being written by another running clinicode command"):
        _claim(out).lock()
    first.abandon()
    assert not first.partial.exists()  # abandoned before writing: the file it made is gone

    first.partial.write_text("someone else's\n")  # an OUT.partial without its writer's sidecar
    with pytest.raises(ConfigError, match="o.jsonl.partial exists and was not written by `clinicode test`"):
        _claim(out).check()
    first.sidecar.write_text('{"kind": "something else"}')
    with pytest.raises(ConfigError, match="o.jsonl.partial.json exists and was not written by `clinicode test`"):
        _claim(out).check()
    assert first.partial.read_text() == "someone else's\n"


def test_every_module_of_the_file_ownership_room_is_held_to_its_contract():
    """files, file_locks and file_inputs (and any file_* module split out later) import only the standard library:
    each is a source of the contract that says so, and files still offers what other rooms import from it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from pathlib import Path

    import clinicode.files as files

    root = Path(__file__).resolve().parents[2]
    contracts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    rule = next(c for c in contracts if c["name"].startswith("file ownership imports only the standard library"))
    room = {f"clinicode.{p.stem}" for p in (root / "clinicode").glob("file*.py")}
    assert {"clinicode.files", "clinicode.file_locks", "clinicode.file_inputs"} <= room
    assert room <= set(rule["source_modules"]), sorted(room - set(rule["source_modules"]))
    for name in ("claim_folder", "releases_claims", "new_private_file", "LineTooLong", "read_lines_bounded"):
        assert callable(getattr(files, name)), name  # cli, review and codes import them from clinicode.files
