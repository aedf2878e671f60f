"""The review queue (#42): advice that never loses decisions, codes as the checkpoint's code system spells them,
export's codes without training notes, `queue --input-format`, nothing left behind by a refused first open, one
--explain bound, an owner-only export manifest, printable reviewer names.

Each refused case exits with status 1 and one line, and leaves what it did not create as it was. Synthetic notes
only."""

from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_review import TEXT, _fake_db, _mode, _rec

from clinicode.codes.systems import ICD9_CM, ICD10, MESH_OMIM
from clinicode.errors import ConfigError
from clinicode.review import ReviewError, open_db, queue
from clinicode.review.export import _split_of

from helpers import SECRET, fails, snapshot, succeeds

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}


def _db_with(path: Path, system, codes: list[str], suggested: list[str], n: int = 1) -> Path:
    """A review database whose one checkpoint codes in SYSTEM with CODES; notes n0.. suggest SUGGESTED."""
    with open_db(path) as db:
        db.add_model("a" * 64, "/runs/x", [(c, "") for c in codes], system)
        db.add_notes([(f"n{i}", TEXT, _rec(*suggested)) for i in range(n)], sha256="a" * 64, checkpoint="/runs/x")
    return path


def _log(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT note, code, action, reviewer FROM decisions ORDER BY id").fetchall()
    finally:
        con.close()


# ------------------------------------------------------------------------------------------------ 1. data loss
CRASH = """
import os, sys
from clinicode.review import open_db
db = open_db(sys.argv[1])
for i in range(10):
    db.decide(f"n{i}", "ann", accept=["401.9", "428.0"], reject=["427.31"], done=True)
os._exit(0)  # a crash: the connection is never closed, so the committed decisions stay in the -wal
"""


def test_following_the_advice_for_a_shared_wal_keeps_every_decision(tmp_path):
    db = _fake_db(tmp_path / "r.sqlite", n=10)
    subprocess.run([sys.executable, "-c", CRASH, str(db)], check=True, env=ENV, cwd=ROOT, timeout=300)
    wal, shm = Path(f"{db}-wal"), Path(f"{db}-shm")
    assert wal.stat().st_size > 0  # the 10 finished notes are in the -wal only
    os.chmod(wal, 0o644)           # e.g. `chmod -R g+r` on the folder
    os.chmod(shm, 0o644)
    res = fails(["review", "stats", "--db", db], "can be read or written by others")
    line = res.stderr
    assert "remove" not in line.replace("removing one loses", "")  # never advise removing a file holding data
    advice = re.search(r"`(chmod 600 [^`]+)`", line)
    assert advice and str(wal) in advice.group(1) and str(shm) in advice.group(1), line
    subprocess.run(advice.group(1), shell=True, check=True)  # do what the line says
    stats = json.loads(succeeds(["review", "stats", "--db", db, "--json"]).stdout)
    assert stats["overall"]["notes"] == 10 and stats["overall"]["accepted"] == 20


def test_a_planted_companion_is_refused_without_advising_its_removal(tmp_path):
    db = _fake_db(tmp_path / "r.sqlite")
    Path(f"{db}-wal").symlink_to(tmp_path / "elsewhere")
    res = fails(["review", "stats", "--db", db], f"{db}-wal is a symbolic link")
    assert "remove" not in res.stderr and "nothing was opened" in res.stderr


# ------------------------------------------------------------------------------------------------ 2. code systems
def test_undotted_icd10_cm_is_the_dotted_code_and_added_once(tmp_path):
    db = _db_with(tmp_path / "r.sqlite", ICD10, ["J18.9", "I10", "02HV33Z"], ["J18.9"])
    res = succeeds(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--add", "S72001A"])
    assert "codes now: S72.001A" in res.stdout  # not an ICD-10-PCS code 'S72001A' by its shape
    succeeds(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--add", "S72.001A",
              "--accept", "J189", "--done"])
    assert {c for _, c, a, _ in _log(db) if a == "add"} == {"S72.001A"}
    with open_db(db, readonly=True) as rdb:
        assert rdb.finished()[0]["labels"] == ["J18.9", "S72.001A"]


def test_a_code_of_no_system_is_refused_even_in_a_pcs_shape(tmp_path):
    db = _db_with(tmp_path / "r.sqlite", ICD10, ["J18.9", "02HV33Z"], ["J18.9"])
    before = _log(db)
    for code in ("ZZZZZZZ", "SZZZZZZ"):
        fails(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--add", code],
              f"--add {code} is neither one of the model's codes nor a valid ICD-10-CM/PCS code")
    succeeds(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--add", "0bj08zz"])
    assert _log(db)[len(before):] == [("n0", "0BJ08ZZ", "add", "ann")]


def test_icd9_undotted_digits_are_the_diagnosis_and_never_withdraw_through_the_procedure(tmp_path):
    db = _db_with(tmp_path / "r.sqlite", ICD9_CM, ["401.9", "428.0", "38.93"], ["401.9"])
    succeeds(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--add", "0040"])
    fails(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--reject", "00.40"],
          "00.40 is neither suggested nor added")
    res = succeeds(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--add", "00.40",
                    "--accept", "401.9", "--done"])
    assert "codes now: 00.40, 004.0, 401.9" in res.stdout  # a diagnosis and a procedure: two codes
    assert [c for _, c, a, _ in _log(db) if a == "add"] == ["004.0", "00.40"]


def test_mesh_and_omim_ids_are_codes_of_a_mesh_run(tmp_path):
    db = _db_with(tmp_path / "r.sqlite", MESH_OMIM, ["D009369", "D003920", "OMIM:312080"], ["D009369"])
    res = succeeds(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--add", "omim:312080",
                    "--add", "MESH:C535662", "--add", "d006331"])
    assert "codes now: D006331, MESH:C535662, OMIM:312080" in res.stdout
    fails(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--add", "J18.9"],
          "--add J18.9 is a code of ICD-10-CM, but the model that scored this note codes in MeSH/OMIM")


@pytest.mark.parametrize("code", ["", "401.9\x1b[2J", "x" * 41])
def test_a_code_that_no_system_could_hold_is_one_line(tmp_path, code):
    db = _db_with(tmp_path / "r.sqlite", ICD9_CM, ["401.9"], ["401.9"])
    fails(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--add", code], "is not a code")
    assert _log(db) == []


# ------------------------------------------------------------------------------------------------ 3. export
def _finish(db: Path, ids: list[str], add: dict[str, list[str]]) -> None:
    with open_db(db) as rdb:
        for i in ids:
            rdb.decide(i, "ann", accept=["401.9"], reject=["428.0", "427.31"], add=add.get(i, []), done=True)


def test_export_with_base_leaves_codes_without_training_notes_out_of_labels_json(demo_data, tmp_path):
    from clinicode.data.prepared import load_dataset

    base = load_dataset(demo_data)
    dev_id = str(base.splits["dev"]["id"].iloc[0])
    assert "004.0" not in base.labels and "005.0" not in base.labels
    db = tmp_path / "r.sqlite"
    with open_db(db) as rdb:
        rdb.add_model("f" * 64, "/runs/fake", [(c, "") for c in ("401.9", "428.0", "427.31")], ICD9_CM)
        rdb.add_notes([(i, TEXT, _rec("401.9", "428.0", "427.31")) for i in (dev_id, "new1")], sha256="f" * 64,
                      checkpoint="/runs/fake")
    _finish(db, [dev_id, "new1"], {dev_id: ["004.0"], "new1": ["005.0"]})
    out = tmp_path / "combined"
    res = succeeds(["review", "export", "--db", db, "--out", out, "--base", demo_data])
    labels = [e["code"] for e in json.loads((out / "labels.json").read_text())]
    assert "005.0" in labels and "004.0" not in labels  # 004.0's only note is in the base's dev: no training note
    assert ("1 reviewed codes have no training note in this export (their notes are all in dev or test, or kept out): "
            "left out of labels.json" in res.stdout) and "(004.0;" in res.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["codes_without_training_notes"] == ["004.0"]
    # the base's notes were never coded for 005.0: training learns it from the reviewed notes alone
    assert manifest["partly_coded"] == {"codes": ["005.0"], "notes": sorted([dev_id, "new1"])}
    ds = load_dataset(out)  # still a dataset training reads
    assert "005.0" in ds.labels and "004.0" not in ds.labels


def test_export_alone_names_the_codes_whose_notes_all_fell_in_dev_or_test(tmp_path):
    ids = [f"n{i}" for i in range(40)]
    held = next(i for i in ids if _split_of(i)[1] == "test")
    db = _fake_db(tmp_path / "r.sqlite", n=40)
    _finish(db, ids, {held: ["004.0"]})
    out = tmp_path / "x"
    res = succeeds(["review", "export", "--db", db, "--out", out])
    assert "1 reviewed codes have no training note in this export (their notes are all in dev or test)" in res.stdout
    assert json.loads((out / "manifest.json").read_text())["codes_without_training_notes"] == ["004.0"]


# ------------------------------------------------------------------------------------------------ 4. --input-format
def test_review_queue_reads_document_references_as_predict_does(tiny_run, tmp_path):
    docs = tmp_path / "docs.ndjson"
    lines = []
    for i in range(3):
        text = f"Hypertension and congestive heart failure, visit {i}. Acute kidney failure."
        lines.append(json.dumps({"resourceType": "DocumentReference", "id": f"doc-{i}", "status": "current",
                                 "content": [{"attachment": {"contentType": "text/plain",
                                                             "data": base64.b64encode(text.encode()).decode()}}]}))
    docs.write_text("\n".join(lines) + "\n")
    db = tmp_path / "q.sqlite"
    res = succeeds(["review", "queue", "--checkpoint", tiny_run, "--input", docs, "--db", db,
                    "--input-format", "fhir"])
    assert "queued 3 notes, 0 already in the queue (left unchanged), 0 bad records" in res.stdout
    with open_db(db, readonly=True) as rdb:
        assert sorted(n["id"] for n in rdb.notes()) == ["doc-0", "doc-1", "doc-2"]
        assert "congestive heart failure, visit 1" in rdb.note("doc-1")["text"]
    fails(["review", "queue", "--checkpoint", tiny_run, "--input", docs, "--db", tmp_path / "new.sqlite",
           "--input-format", "xml"], "unknown input format 'xml'")
    assert not (tmp_path / "new.sqlite").exists()


# ------------------------------------------------------------------------------------------------ 5. nothing left
@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_refused_planted_companion_leaves_no_new_database_behind(tmp_path, suffix):
    db = tmp_path / "new.sqlite"
    comp = Path(f"{db}{suffix}")
    comp.write_bytes(b"")
    os.chmod(comp, 0o666)
    before = snapshot(tmp_path)
    with pytest.raises(ReviewError, match="can be read or written by others"):
        open_db(db)
    assert snapshot(tmp_path) == before and not db.exists()


def test_review_queue_refused_by_a_planted_wal_leaves_nothing(tiny_run, tmp_path):
    notes = tmp_path / "in" / "notes.jsonl"
    notes.parent.mkdir()
    notes.write_text(json.dumps({"id": "a", "text": "hypertension"}) + "\n")
    db = tmp_path / "q.sqlite"
    Path(f"{db}-wal").symlink_to(tmp_path / "collect")
    before = snapshot(tmp_path)
    fails(["review", "queue", "--checkpoint", tiny_run, "--input", notes, "--db", db], "is a symbolic link")
    assert snapshot(tmp_path) == before and not db.exists()


# ------------------------------------------------------------------------------------------------ 6. --explain
@pytest.mark.parametrize("value", ["-1", "0"])
def test_explain_has_one_bound_and_one_message(tmp_path, value):
    db = tmp_path / "q.sqlite"
    fails(["review", "queue", "--checkpoint", tmp_path / "no-run", "--input", tmp_path / "x.jsonl", "--db", db,
           "--explain", value], f"--explain must be an integer >= 1 (evidence phrases stored per suggested code), "
                                f"got {value}; e.g. --explain 5.")
    assert not db.exists()
    with pytest.raises(ConfigError, match=f"--explain must be an integer >= 1 .*got {value}"):
        queue(None, None, "x.jsonl", explain=int(value))  # the library says the same line


# ------------------------------------------------------------------------------------------------ 7. manifest mode
def test_the_export_manifest_is_owner_only_like_every_file_of_the_folder(tmp_path):
    db = _fake_db(tmp_path / "r.sqlite", n=4)
    _finish(db, [f"n{i}" for i in range(4)], {})
    out = tmp_path / "x"
    succeeds(["review", "export", "--db", db, "--out", out])
    assert {f.name: _mode(f) for f in out.iterdir()} == {f.name: 0o600 for f in out.iterdir()}
    assert (out / "manifest.json").exists() and _mode(out) == 0o700


# ------------------------------------------------------------------------------------------------ 8. reviewer names
@pytest.mark.parametrize("name, char", [("ann\x1b[31m", "U+001B"), ("ann\nbob", "U+000A"), ("ann\tbob", "U+0009"),
                                        ("ann\u202ebob", "U+202E"), ("ann\rroot", "U+000D")])
def test_a_reviewer_name_with_control_characters_is_refused(tmp_path, name, char):
    db = _fake_db(tmp_path / "r.sqlite")
    res = fails(["review", "decide", "--db", db, "--id", "n0", "--reviewer", name, "--accept", "401.9"],
                f"holds the control character {char}")
    assert "\x1b" not in res.stderr and "\u202e" not in res.stderr
    assert _log(db) == []
    with open_db(db) as rdb:
        with pytest.raises(ReviewError, match=re.escape(char)):
            rdb.claim("n0", name)
        rdb.decide("n0", "Ann O'Brien-Smith (coder 2)", accept=["401.9"])  # printable names still work
    assert _log(db) == [("n0", "401.9", "accept", "Ann O'Brien-Smith (coder 2)")]
    assert SECRET not in res.stderr
