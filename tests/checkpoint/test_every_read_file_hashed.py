"""Every file loading reads is hashed in the manifest and checked (#51): a mentions.json (or metrics file) planted in a
copied run, edited and dropped from the manifest, or linked to a file outside the folder is refused before anything
reads it; a mentions.json that is there and hashed but holds a blank phrase or a wrong type is one CheckpointError
line, and the app's run list shows the run as unhealthy. (The same rule over every registered kind, by using it:
`check_kind` in tests/checkpoint/test_conformance.py.)"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from clinicode.checkpoint import load_checkpoint, verify_checkpoint
from clinicode.config import TrainConfig
from clinicode.errors import CheckpointError
from clinicode.files import sha256_file
from clinicode.models.fused.mentions import MENTIONS_FILE
from clinicode.predict import Predictor
from clinicode.train import train

from conftest import TINY_MODEL
from helpers import fails

SIZES = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}
APP_DIR = Path(__file__).resolve().parents[2] / "app_streamlit"


@pytest.fixture(scope="module")
def fused_run(demo_data, tmp_path_factory) -> Path:
    """The default model trained on the demo data, which has no evidence spans: its checkpoint has no mentions.json."""
    run = tmp_path_factory.mktemp("fused") / "run"
    cfg = TrainConfig(model="fused", epochs=2, batch_size=16, lr=2e-2, w2v_epochs=1, patience=3, seed=7, device="cpu")
    train(out_dir=run, config=cfg, data_dir=demo_data, model_options=SIZES, progress=False)
    assert not (run / "checkpoint" / MENTIONS_FILE).exists()
    return run


@pytest.fixture
def ck(fused_run, tmp_path) -> Path:
    """A private copy of the fused run's checkpoint folder."""
    dst = tmp_path / "run" / "checkpoint"
    shutil.copytree(fused_run / "checkpoint", dst)
    return dst


def _manifest(ck: Path) -> dict:
    return json.loads((ck / "manifest.json").read_text(encoding="utf-8"))


def _write_manifest(ck: Path, m: dict) -> None:
    (ck / "manifest.json").write_text(json.dumps(m), encoding="utf-8")


def _mentions(code: str, *phrases) -> str:
    return json.dumps({"format": "clinicode.mentions", "format_version": 1, "phrases": {code: list(phrases)}})


def _with_mentions(ck: Path, text: str) -> None:
    """MENTIONS_FILE holding TEXT, hashed in the manifest as `save_checkpoint` hashes it."""
    (ck / MENTIONS_FILE).write_text(text, encoding="utf-8")
    m = _manifest(ck)
    m["files"][MENTIONS_FILE] = sha256_file(ck / MENTIONS_FILE)
    _write_manifest(ck, m)


@pytest.fixture
def planted(ck):
    """(a code, a note, a phrase of it) for a planted mention of a code the note is not scored for."""
    note = "Discharge summary: lipid panel drawn, patient stable."
    pred = Predictor.from_checkpoint(ck, device="cpu", suggest=False)
    scores = pred.score([note])[0]
    k = int(scores.argmin())
    return pred.labels.codes[k], note, "lipid panel", float(scores[k])


def test_a_planted_mentions_file_is_refused(ck, planted):
    code, _, phrase, _ = planted
    (ck / MENTIONS_FILE).write_text(_mentions(code, phrase), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"holds mentions\.json but manifest\.json lists no hash for it; .*"
                                              r"\(nothing was read\)"):
        verify_checkpoint(ck)
    fails(["predict", "--checkpoint", ck, "--input", ck / "labels.json", "--no-progress"],
          "holds mentions.json but manifest.json lists no hash for it")
    # the same file hashed, as a run trained with evidence spans writes it, is read: the check is what refused it
    _with_mentions(ck, _mentions(code, phrase))
    assert len(load_checkpoint(ck).model.mentions) == 1


def test_an_edited_mentions_file_dropped_from_the_manifest_is_refused(ck, planted):
    code, _, phrase, _ = planted
    _with_mentions(ck, _mentions(code, "zzyzx"))
    load_checkpoint(ck)
    (ck / MENTIONS_FILE).write_text(_mentions(code, phrase), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"mentions\.json does not match the hash"):
        load_checkpoint(ck)
    m = _manifest(ck)
    del m["files"][MENTIONS_FILE]
    _write_manifest(ck, m)
    with pytest.raises(CheckpointError, match=r"holds mentions\.json but manifest\.json lists no hash"):
        load_checkpoint(ck)


@pytest.mark.parametrize("name", ["metrics_test.json", "metrics_dev.json", "train_counts.json"])
def test_an_edited_optional_checkpoint_file_dropped_from_the_manifest_is_refused(ck, name):
    (ck / name).write_text(json.dumps({"micro_f1": 0.99}), encoding="utf-8")
    m = _manifest(ck)
    del m["files"][name]
    _write_manifest(ck, m)
    with pytest.raises(CheckpointError, match=rf"holds {name.replace('.', '[.]')} but manifest\.json lists no hash"):
        verify_checkpoint(ck)


@pytest.mark.parametrize("hashed", [False, True])
@pytest.mark.parametrize("target", ["planted", "system"])
def test_a_mentions_link_leading_outside_is_refused_before_reading_it(ck, planted, tmp_path, monkeypatch, target,
                                                                      hashed):
    code, _, phrase, _ = planted
    if target == "planted":
        outside = tmp_path / "mentions-elsewhere.json"
        outside.write_text(_mentions(code, phrase), encoding="utf-8")
    else:
        outside = Path("/etc/hostname") if Path("/etc/hostname").is_file() else Path("/etc/passwd")
    (ck / MENTIONS_FILE).symlink_to(outside)
    if hashed:
        m = _manifest(ck)
        m["files"][MENTIONS_FILE] = sha256_file(outside)
        _write_manifest(ck, m)
    seen = []
    real_open = open

    def spy(file, *a, **k):
        if os.path.realpath(file) == os.path.realpath(outside):
            seen.append(file)
        return real_open(file, *a, **k)

    import builtins
    import io

    monkeypatch.setattr(builtins, "open", spy)
    monkeypatch.setattr(io, "open", spy)
    with pytest.raises(CheckpointError, match=r"'mentions\.json' is a symbolic link leading outside the checkpoint"):
        load_checkpoint(ck)
    assert seen == []


@pytest.mark.parametrize("phrases, said", [
    (["   "], "phrase 1 of code {code!r} is blank"),
    (["", "fever"], "phrase 1 of code {code!r} is blank"),
    (["fever", 7], "phrase 2 of code {code!r} is not a string (int)"),
    ("fever", "the phrases of code {code!r} are not a list (str)"),
])
def test_a_hashed_mentions_file_with_a_blank_phrase_or_a_wrong_type_is_one_line(ck, planted, tmp_path, phrases,
                                                                                said):
    code = planted[0]
    _with_mentions(ck, json.dumps({"format": "clinicode.mentions", "format_version": 1, "phrases": {code: phrases}}))
    said = said.format(code=code)
    for check in (verify_checkpoint, load_checkpoint):  # verify: what the app's run list and `serve` check first
        with pytest.raises(CheckpointError) as err:
            check(ck)
        msg = str(err.value)
        assert said in msg and "restore the checkpoint or retrain" in msg and "\n" not in msg, msg
        assert '{"format": "clinicode.mentions", "phrases": {code: [non-blank phrases]}};' in msg, msg
    notes = tmp_path / "notes.jsonl"
    notes.write_text(json.dumps({"id": "n1", "text": "fever and cough"}) + "\n")
    fails(["predict", "--checkpoint", ck, "--input", notes, "--no-progress"], said)


def test_the_apps_run_list_shows_a_run_with_a_blank_mention_as_unhealthy(ck, planted):
    sys.path.insert(0, str(APP_DIR))
    import state

    assert state.run_problem(ck.parent) is None
    _with_mentions(ck, _mentions(planted[0], " "))
    problem = state.run_problem(ck.parent)
    assert problem is not None and "phrase 1 of code" in problem and "is blank" in problem, problem
