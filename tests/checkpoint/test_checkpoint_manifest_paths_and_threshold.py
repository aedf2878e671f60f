"""Checkpoints (#42): manifest.json cannot make loading read files outside the checkpoint folder, and a
threshold.json without its threshold is one clear line. Each tampered copy re-hashes what it changed, so the check
behind the hash is what stops it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from clinicode.checkpoint import load_checkpoint, verify_checkpoint
from clinicode.errors import CheckpointError
from clinicode.files import sha256_file

from helpers import fails


@pytest.fixture
def ck(tiny_run, tmp_path) -> Path:
    dst = tmp_path / "run" / "checkpoint"
    shutil.copytree(tiny_run / "checkpoint", dst)
    return dst


def _edit_manifest(ck: Path, edit) -> None:
    m = json.loads((ck / "manifest.json").read_text(encoding="utf-8"))
    edit(m)
    (ck / "manifest.json").write_text(json.dumps(m), encoding="utf-8")


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside the checkpoint, readable by us, whose reading the test can notice."""
    p = tmp_path / "secret.txt"
    p.write_text("not a checkpoint file\n")
    return p


def _spy_reads(monkeypatch, path: Path) -> list:
    """Record every open of PATH through the hashing and JSON readers."""
    import clinicode.checkpoint as ckmod
    import clinicode.files as files

    seen: list = []
    real_sha, real_json = files.sha256_file, files.read_json

    def sha(p, *a, **k):
        if os.path.realpath(p) == os.path.realpath(path):
            seen.append(p)
        return real_sha(p, *a, **k)

    def rj(p, *a, **k):
        if os.path.realpath(p) == os.path.realpath(path):
            seen.append(p)
        return real_json(p, *a, **k)

    monkeypatch.setattr(ckmod, "sha256_file", sha)
    monkeypatch.setattr(ckmod, "read_json", rj)
    return seen


@pytest.mark.parametrize("how", ["dot-dot", "absolute", "sub-folder"])
def test_a_manifest_naming_a_path_outside_the_folder_is_refused_before_reading_it(ck, outside, monkeypatch, how):
    name = {"dot-dot": os.path.relpath(outside, ck), "absolute": str(outside), "sub-folder": "sub/x.json"}[how]
    if how == "dot-dot":
        assert name.startswith("..")  # e.g. ../../secret.txt, as ../../../etc/passwd
    digest = hashlib.sha256(outside.read_bytes()).hexdigest()
    _edit_manifest(ck, lambda m: m["files"].__setitem__(name, digest))
    seen = _spy_reads(monkeypatch, outside)
    with pytest.raises(CheckpointError, match=r"manifest\.json lists .*expected the name of a file inside the "
                                              r"checkpoint folder .*nothing was read"):
        verify_checkpoint(ck)
    assert seen == []
    fails(["predict", "--checkpoint", ck, "--input", outside, "--no-progress"], "expected the name of a file inside")


def test_etc_passwd_through_dot_dot_is_refused(ck):
    _edit_manifest(ck, lambda m: m["files"].__setitem__("../../../etc/passwd", "0" * 64))
    with pytest.raises(CheckpointError, match=r"lists '\.\./\.\./\.\./etc/passwd', expected the name of a file"):
        load_checkpoint(ck)


@pytest.mark.parametrize("name", ["threshold.json", "metrics_dev.json", "extra.json"])
def test_a_symlink_leading_outside_is_refused_before_reading_it(ck, outside, monkeypatch, name):
    target = outside.with_name("planted.json")
    target.write_text(json.dumps({"threshold": 0.5}))
    (ck / name).unlink(missing_ok=True)
    (ck / name).symlink_to(target)
    _edit_manifest(ck, lambda m: m["files"].__setitem__(name, sha256_file(target)))
    seen = _spy_reads(monkeypatch, target)
    with pytest.raises(CheckpointError, match=rf"'{name}' is a symbolic link leading outside the checkpoint folder"):
        load_checkpoint(ck)
    assert seen == []


def test_a_symlink_inside_the_folder_still_loads(ck):
    (ck / "threshold-copy.json").write_bytes((ck / "threshold.json").read_bytes())
    (ck / "threshold.json").unlink()
    (ck / "threshold.json").symlink_to("threshold-copy.json")
    assert 0 <= load_checkpoint(ck).threshold <= 1


@pytest.mark.parametrize("content, said", [
    ({}, "holds no 'threshold' key"), ({"threshold": "high"}, "holds threshold high"),
    ([0.5], "holds a JSON list"), ({"threshold": None}, "holds threshold None"),
])
def test_a_threshold_json_without_a_threshold_is_one_clear_line(ck, tiny_run, content, said):
    (ck / "threshold.json").write_text(json.dumps(content))
    _edit_manifest(ck, lambda m: m["files"].__setitem__("threshold.json", sha256_file(ck / "threshold.json")))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(ck)
    msg = str(err.value)
    assert said in msg and 'expected {"threshold": a probability from 0 to 1}' in msg, msg
    assert "\n" not in msg and msg != "'threshold'"
    fails(["predict", "--checkpoint", ck, "--input", ck / "threshold.json", "--no-progress"], said)
