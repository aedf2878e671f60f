"""The review queue against hostile input (#36): the JSONL reader it shares with `predict` (bad records), the review
database's files (damaged, planted, another user's, read-only, a FIFO), codes as the model's code system spells and
names them, export with a base, and the stats.

Each refused case exits with status 1 and one line, and leaves what it did not create as it was. Synthetic notes
only."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_review import TEXT, _fake_db, _mode, _rec

from clinicode.records import read_records
from clinicode.review import open_db

from helpers import SECRET, fails, snapshot, succeeds

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}

LONE = "\\ud800"  # a lone UTF-16 surrogate as JSON writes it: legal JSON, but no character


# ------------------------------------------------------------------------------------------------ the JSONL reader
def _hostile_jsonl(path: Path) -> Path:
    lines = ['{"id": "ok1", "text": "hypertension and congestive heart failure"}',
             '{"id": "sur-text", "text": "atrial fibrillation ' + LONE + ' ' + SECRET + '"}',
             '{"id": "sur-id-' + LONE + '", "text": "acute kidney failure"}',
             '{"id": "big", "text": "' + SECRET + '", "n": 1' + "0" * 5000 + '}',   # over Python's 4,300 digits
             '{"id": "deep", "text": "' + SECRET + '", "x": ' + "[" * 5000 + "]" * 5000 + '}',
             '{"id": "ok2", "text": "pneumonia and sepsis"}']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_lone_surrogate_a_huge_number_or_deep_nesting_is_one_bad_record(tmp_path):
    recs = list(read_records(_hostile_jsonl(tmp_path / "in.jsonl")))
    assert [r.id for r in recs] == ["ok1", "sur-text", "line-3", "line-4", "line-5", "ok2"]
    assert [r.error is None for r in recs] == [True, False, False, False, False, True]
    assert "lone UTF-16 surrogate" in recs[1].error and "'id'" in recs[2].error
    assert "4,300 digits" in recs[3].error and "nesting too deep" in recs[4].error
    assert all(SECRET not in (r.error or "") for r in recs)


def test_predict_and_review_queue_report_those_records_and_score_the_rest(tiny_run, tmp_path):
    src = _hostile_jsonl(tmp_path / "in.jsonl")
    out = tmp_path / "out.jsonl"
    res = succeeds(["predict", "--checkpoint", tiny_run, "--input", src, "--output", out, "--device", "cpu",
                    "--no-progress"])
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [("error" in r) for r in rows] == [False, True, True, True, True, False]
    assert "scored 2 notes, 4 bad records" in res.stderr + res.stdout
    db = tmp_path / "q.sqlite"
    res = succeeds(["review", "queue", "--checkpoint", tiny_run, "--input", src, "--db", db])
    assert "queued 2 notes, 0 already in the queue (left unchanged), 4 bad records" in res.stdout
    assert res.stderr.count("bad record:") == 4 and SECRET not in res.stderr


# ------------------------------------------------------------------------------------------------ 1. integrity
def _reviewed_db(path: Path, n: int = 120) -> Path:
    _fake_db(path, n=n)
    with open_db(path) as db:
        for i in range(n):
            db.decide(f"n{i}", "ann", accept=["401.9", "428.0"], reject=["427.31"], add=["584.9"], done=True)
    return path


def _damage_the_decisions_index(path: Path) -> None:
    """Byte-edit the root page of `decisions_by_note` to claim one cell fewer: SQLite then silently misses every
    decision below the lost cell (no error on reading), which only an integrity check reveals."""
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'decisions_by_note'").fetchone()[0]
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    raw = bytearray(path.read_bytes())
    at = (root - 1) * page_size
    assert raw[at] == 0x02, "an interior index page (the fixture needs more than one page of decisions)"
    cells = int.from_bytes(raw[at + 3:at + 5], "big")
    raw[at + 3:at + 5] = (cells - 1).to_bytes(2, "big")
    path.write_bytes(bytes(raw))


def test_a_damaged_index_stops_stats_and_export_instead_of_partial_counts(tmp_path):
    db = _reviewed_db(tmp_path / "r.sqlite")
    assert json.loads(succeeds(["review", "stats", "--db", db, "--json"]).stdout)["overall"]["accepted"] == 240
    _damage_the_decisions_index(db)
    with open_db(db, readonly=True) as rdb:  # what stats counted before the check: fewer rows, no error at all
        assert sum(len(n["state"]) for n in rdb.finished()) < 120 * 4
    before = snapshot(tmp_path)
    for args in (["stats"], ["stats", "--json"], ["export", "--out", tmp_path / "corrections"]):
        res = fails(["review", *args, "--db", db], "is damaged (integrity check: ")
        assert "page" in res.stderr and "nothing was reported or exported" in res.stderr and res.stdout == ""
    assert snapshot(tmp_path) == before  # no export folder, and the damaged file as it was


# ------------------------------------------------------------------------------------------------ 3. ownership
def _review_cmds(db: Path, tmp_path: Path, run: Path | str = "no-run") -> list[list]:
    notes = tmp_path / "in.jsonl"
    if not notes.exists():
        notes.write_text(json.dumps({"id": "x", "text": "hypertension " + SECRET}) + "\n")
    return [["review", "queue", "--db", db, "--checkpoint", run, "--input", notes],
            ["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--accept", "401.9"],
            ["review", "stats", "--db", db],
            ["review", "export", "--db", db, "--out", tmp_path / "out"]]


def test_an_empty_file_readable_by_others_is_never_adopted(tiny_run, tmp_path):
    db = tmp_path / "shared.sqlite"
    db.touch(mode=0o644)
    os.chmod(db, 0o644)
    cmds = _review_cmds(db, tmp_path, tiny_run)
    before = snapshot(tmp_path)
    for args in cmds[:3]:  # (export fails on the same line)
        res = fails(args, f"--db {db} can be read or written by others (mode 0644)")
        assert f"chmod 600 {db}" in res.stderr
    assert snapshot(tmp_path) == before and db.stat().st_size == 0 and _mode(db) == 0o644


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("planted", ["mode 0666", "another owner", "a link"])
def test_a_companion_file_planted_by_someone_else_is_refused_before_sqlite_opens(tmp_path, suffix, planted):
    db = _fake_db(tmp_path / "r.sqlite")
    comp = Path(f"{db}{suffix}")
    if planted == "a link":
        comp.symlink_to(tmp_path / "elsewhere")
    else:
        comp.touch()
        os.chmod(comp, 0o666 if planted == "mode 0666" else 0o600)
        if planted == "another owner":
            if os.geteuid() != 0:
                pytest.skip("giving a file to another user needs root")
            os.chown(comp, 65534, 65534)
    cmds = _review_cmds(db, tmp_path)
    before = snapshot(tmp_path)
    why = {"mode 0666": f"can be read or written by others ({comp.name} mode 0666)",
           "another owner": f"{comp} is owned by another user (uid 65534)",
           "a link": f"{comp} is a symbolic link"}[planted]
    for args in cmds:
        res = fails(args, why)
        assert "nothing was opened" in res.stderr
        assert (f"`chmod 600 {comp}`" in res.stderr) == (planted == "mode 0666")  # the fix that keeps its data
    assert snapshot(tmp_path) == before  # no note text, no schema, not even SQLite's lock bytes went into it


def test_a_database_of_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    db = _fake_db(tmp_path / "r.sqlite")
    os.chown(db, 65534, 65534)
    for args in _review_cmds(db, tmp_path):
        fails(args, "belongs to another user (uid 65534)")


def test_read_only_commands_open_read_only_and_never_create_or_write(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch(mode=0o600)
    for args in (["stats"], ["export", "--out", tmp_path / "out"]):
        fails(["review", *args, "--db", empty], "is empty: it holds no review database yet")
    assert empty.stat().st_size == 0 and not (tmp_path / "out").exists()
    old = tmp_path / "v1.sqlite"
    open_db(old, _target=1).close()                  # a schema-1 file: reading it must not migrate it
    db = _reviewed_db(tmp_path / "r.sqlite", n=3)
    for path in (old, db):
        before = path.read_bytes()
        if path == old:
            fails(["review", "stats", "--db", path], "has review schema 1, from an older clinicode")
        else:
            succeeds(["review", "stats", "--db", path])
            succeeds(["review", "export", "--db", path, "--out", tmp_path / "out"])
        assert path.read_bytes() == before
    with open_db(db, readonly=True) as rdb:
        with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
            rdb.con.execute("INSERT INTO notes (id, text, queued_at) VALUES ('x', 'y', 'z')")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_as_db_is_refused_at_once(tmp_path, kind):
    """Before the fix a FIFO hung `stats` and `queue` for ever reading its header (the timeout fails the test
    instead)."""
    if kind == "fifo":
        db = tmp_path / "r.sqlite"
        os.mkfifo(db)
        what = "a FIFO (named pipe), not a regular file"
    else:
        db, what = Path("/dev/null"), "a character device, not a regular file"
    for args in _review_cmds(db, tmp_path):
        proc = subprocess.run([sys.executable, "-m", "clinicode", *map(str, args)], capture_output=True, text=True,
                              timeout=60, env=ENV, cwd=ROOT)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and what in lines[0], proc.stderr
    assert stat.S_ISFIFO(db.stat().st_mode) if kind == "fifo" else stat.S_ISCHR(db.stat().st_mode)


def test_a_failed_queue_leaves_no_database_behind(tiny_run, tmp_path):
    db = tmp_path / "new.sqlite"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    fails(["review", "queue", "--db", db, "--checkpoint", tiny_run, "--input", tmp_path / "missing.jsonl"],
          "no such file")
    fails(["review", "queue", "--db", db, "--checkpoint", tiny_run, "--input", empty], "no records")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl"]
    _fake_db(db)  # an existing database is never removed, even when a queue into it fails
    fails(["review", "queue", "--db", db, "--checkpoint", tiny_run, "--input", empty], "no records")
    with open_db(db) as rdb:
        assert len(rdb.notes()) == 3


@pytest.fixture
def read_only_medium(tmp_path):
    """A small tmpfs, remounted read-only by the test (needs root and mount; skipped elsewhere)."""
    mnt = tmp_path / "medium"
    mnt.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)]
    if os.geteuid() != 0 or not shutil.which("mount") or subprocess.run(mount, capture_output=True).returncode:
        pytest.skip("needs root and mount to make a read-only file system")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_read_only_medium_gives_a_clear_line_and_reports_still_read_it(read_only_medium, tiny_run, tmp_path):
    db = _reviewed_db(read_only_medium / "r.sqlite", n=3)
    subprocess.run(["mount", "-o", "remount,ro", str(read_only_medium)], check=True)
    fails(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--accept", "401.9"],
          "is on a read-only file system, so this command cannot save anything")
    fails(["review", "queue", "--db", read_only_medium / "new.sqlite", "--checkpoint", tiny_run, "--input",
           _review_cmds(db, tmp_path)[0][-1]], "its folder is on a read-only file system")
    js = json.loads(succeeds(["review", "stats", "--db", db, "--json"]).stdout)
    assert (js["overall"]["notes"], js["overall"]["accepted"]) == (3, 6)
    succeeds(["review", "export", "--db", db, "--out", tmp_path / "out"])
    assert sorted(p.name for p in read_only_medium.iterdir()) == ["r.sqlite"]


# ------------------------------------------------------------------------------------------------ 2. one code per code
ICD10_CODES = ("Y92.230", "I50.9", "N17.9", "I10")


def _icd10_db(path: Path, n: int = 3) -> Path:
    """A queue scored by an ICD-10 model: every note suggests Y92.230, I50.9 and N17.9."""
    with open_db(path) as db:
        db.add_model("a" * 64, "/runs/icd10", [(c, f"title of {c}") for c in ICD10_CODES])
        db.add_notes([(f"n{i}", TEXT, _rec(*ICD10_CODES[:3])) for i in range(n)], sha256="a" * 64,
                     checkpoint="/runs/icd10")
    return path


def _coded_notes(folder: Path, splits: dict[str, list[tuple[str, list[str]]]]) -> Path:
    folder.mkdir()
    for name, rows in splits.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"id": i, "text": f"note {i} heart failure",
                                                                  "labels": labels}) + "\n" for i, labels in rows))
    return folder


def test_a_code_is_one_code_whatever_its_case_or_dots(tmp_path):
    db = _icd10_db(tmp_path / "r.sqlite")
    d = ["review", "decide", "--db", db, "--reviewer", "ann", "--id", "n0"]
    assert "codes now: Y92.230" in succeeds([*d, "--accept", "y92.230"]).stdout
    succeeds([*d, "--add", "e11.65"])
    res = succeeds([*d, "--add", "E1165", "--reject", "i50.9", "--accept", "N17.9", "--done"])
    assert "finished; codes now: E11.65, N17.9, Y92.230" in res.stdout
    fails([*d[:-1], "n1", "--add", "e11.65", "--add", "E11.65"],
          "code E11.65 is given more than once")
    fails([*d[:-1], "n1", "--add", "y92230"], "Y92.230 is already suggested; use --accept Y92.230")
    with open_db(db) as rdb:
        assert [r["code"] for r in rdb.note("n0")["log"] if r["code"]] == ["Y92.230", "E11.65", "N17.9", "I50.9",
                                                                          "E11.65"]
        s = rdb.stats()
        assert s["per_code"]["E11.65"]["added"] == 1 and "e11.65" not in s["per_code"]
        rdb.decide("n1", "bob", accept=["Y92.230", "I50.9"], reject=["N17.9"], done=True)
    base = _coded_notes(tmp_path / "base", {"train": [("t1", ["I50.9"]), ("t2", ["I10"])], "dev": [("d1", ["I10"])],
                                            "test": [("x1", ["I50.9"])]})
    out = tmp_path / "with-base"
    succeeds(["review", "export", "--db", db, "--out", out, "--base", base])
    labels = [e["code"] for e in json.loads((out / "labels.json").read_text())]
    assert labels.count("E11.65") == 1 and not [c for c in labels if c != c.upper()]
    train = {json.loads(x)["id"]: json.loads(x)["labels"] for x in (out / "train.jsonl").read_text().splitlines()}
    assert sorted(train["n0"]) == ["E11.65", "N17.9", "Y92.230"]


def test_added_codes_follow_the_models_code_system(tmp_path):
    icd10 = _icd10_db(tmp_path / "icd10.sqlite")
    d10 = ["review", "decide", "--db", icd10, "--reviewer", "ann", "--id", "n0"]
    assert "codes now: 02HV33Z, E11.65" in succeeds([*d10, "--add", "02hv33z", "--add", "E11.65"]).stdout  # PCS too
    fails([*d10, "--add", "428.0"], "428.0 is a code of ICD-9-CM, but the model that scored this note codes in "
          "ICD-10-CM/PCS")
    fails([*d10, "--add", "Z99.999"], "not in the CMS tables")  # the shape of ICD-10-CM, but no such code
    icd9 = _fake_db(tmp_path / "icd9.sqlite")
    d9 = ["review", "decide", "--db", icd9, "--reviewer", "ann", "--id", "n0"]
    res = succeeds([*d9, "--add", "25000", "--add", "v58.61", "--add", "38.93"])  # outside the model's codes
    assert "codes now: 250.00, 38.93, V58.61" in res.stdout
    for code, system in (("I50.9", "ICD-10-CM"), ("02HV33Z", "ICD-10-PCS")):
        res = fails([*d9, "--add", code], f"{code} is a code of {system}, but the model that scored this note codes "
                    "in ICD-9-CM; add the ICD-9-CM code (such as 401.9) instead.")
    with open_db(icd9) as rdb:
        assert rdb.code_system("n0").name == "ICD-9-CM" and rdb.code_system().name == "ICD-9-CM"


def test_a_mesh_id_is_never_called_an_icd10_pcs_code(tmp_path):
    # 'D009369' has the shape of an undotted ICD-10-PCS code too; the registry asks MeSH first
    icd9 = _fake_db(tmp_path / "icd9.sqlite")
    res = fails(["review", "decide", "--db", icd9, "--reviewer", "ann", "--id", "n0", "--add", "D009369"],
                "D009369 is a code of MeSH, but the model that scored this note codes in ICD-9-CM")
    assert "ICD-10-PCS" not in res.stderr + res.stdout


def test_queue_records_the_checkpoints_code_system(tiny_run, tmp_path):
    notes = tmp_path / "in.jsonl"
    notes.write_text(json.dumps({"id": "a", "text": "hypertension and congestive heart failure"}) + "\n")
    db = tmp_path / "q.sqlite"
    succeeds(["review", "queue", "--db", db, "--checkpoint", tiny_run, "--input", notes])
    with open_db(db) as rdb:
        assert rdb.con.execute("SELECT system FROM models").fetchall()[0][0] == "ICD-9-CM"


# ------------------------------------------------------------------------------------------------ 4. misleading
def test_export_with_base_keeps_the_bases_dev_and_test_labels(tmp_path):
    db = _icd10_db(tmp_path / "r.sqlite", n=0)
    with open_db(db) as rdb:  # reviewed notes carrying the ids of a base train, dev and test note, and a new one
        rdb.add_notes([(i, TEXT, _rec(*ICD10_CODES[:3])) for i in ("t1", "d1", "x1", "new")], sha256="a" * 64,
                      checkpoint="/runs/icd10")
        for i in ("t1", "d1", "x1", "new"):
            rdb.decide(i, "ann", accept=["Y92.230"], reject=["I50.9", "N17.9"], done=True)
    base = _coded_notes(tmp_path / "base", {"train": [("t1", ["I50.9"]), ("t2", ["I10"])], "dev": [("d1", ["I10"])],
                                            "test": [("x1", ["I50.9"])]})
    out = tmp_path / "combined"
    res = succeeds(["review", "export", "--db", db, "--out", out, "--base", base])
    assert "2 reviewed notes are in the base's dev or test split: left out" in res.stdout

    def split(name: str) -> dict:
        return {json.loads(x)["id"]: json.loads(x)["labels"] for x in (out / f"{name}.jsonl").read_text().splitlines()}

    assert split("dev") == {"d1": ["I10"]} and split("test") == {"x1": ["I50.9"]}  # exactly the base's
    assert split("train") == {"t1": ["Y92.230"], "t2": ["I10"], "new": ["Y92.230"]}  # coders replace train labels


def test_ctrl_c_in_review_queue_advises_a_command_that_exists(tiny_run, tmp_path, monkeypatch):
    from clinicode import review
    from clinicode.cli import app

    from helpers import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(review, "queue", interrupted)
    notes = _review_cmds(tmp_path / "q.sqlite", tmp_path)[0][-1]
    res = runner().invoke(app, ["review", "queue", "--db", str(tmp_path / "q.sqlite"), "--checkpoint", str(tiny_run),
                                "--input", str(notes)])
    assert res.exit_code == 130 and "--resume" not in res.stderr
    assert "Run the same `clinicode review queue` command again" in res.stderr
    assert not (tmp_path / "q.sqlite").exists()  # created by this run and never filled: not left behind
    monkeypatch.setattr(review.ReviewDB, "stats", interrupted)
    _fake_db(tmp_path / "r.sqlite")
    res = runner().invoke(app, ["review", "stats", "--db", str(tmp_path / "r.sqlite")])
    assert res.exit_code == 130 and "--resume" not in res.stderr and "interrupted" in res.stderr


# ------------------------------------------------------------------------------------------------ 5. what it teaches
def _pairs() -> list[tuple[float, bool]]:
    """40 suggestions scored 0.99 .. 0.60: accepted down to 0.75 except the one at 0.95, rejected below."""
    return [(round(1 - i / 100, 2), i <= 25 and i != 5) for i in range(1, 41)]


def test_route_threshold_is_the_lowest_score_whose_suggestions_reach_95_percent():
    from clinicode.review import route_threshold

    t = route_threshold(_pairs())
    # by hand: the top n hold n - 1 accepted for 5 <= n <= 25, so (n - 1) / n >= 0.95 from n = 20 to 25 (24/25 = 0.96);
    # the 26th is rejected (24/26 < 0.95): the lowest such score is the 25th, 0.75
    assert (t["threshold"], t["decisions"], t["accepted"], t["all_decisions"]) == (0.75, 25, 24, 40)
    assert t["rate"] == pytest.approx(0.96) and t["share"] == pytest.approx(25 / 40)
    assert t["lower_bound"] == pytest.approx(0.8046, abs=1e-4)  # the 95% Wilson interval of 24/25 starts there
    tied = route_threshold([*_pairs(), (0.75, False)])  # a cut never splits one score: 0.75 now holds 24 of 26
    assert (tied["threshold"], tied["decisions"], tied["accepted"]) == (0.76, 24, 23)
    few = route_threshold([(0.9, True)] * 19)  # 19 straight accepts back no score
    assert few["threshold"] is None and few["all_decisions"] == 19
    never = route_threshold([(0.9 - i / 100, i % 10 != 0) for i in range(40)])  # 90% accepted at every cut
    assert never["threshold"] is None


def test_stats_report_accept_and_missed_rates_and_the_routing_score_per_code(tmp_path):
    db = tmp_path / "r.sqlite"
    with open_db(db) as rdb:
        rdb.add_model("f" * 64, "/runs/fake", [("428.0", "CHF"), ("401.9", "HTN"), ("584.9", "AKI")])
        rdb.add_notes([(f"n{i}", TEXT, {"predicted": [{"code": "428.0", "score": s}, {"code": "401.9", "score": 0.5}]})
                       for i, (s, _) in enumerate(_pairs())], sha256="f" * 64, checkpoint="/runs/fake")
        for i, (_, ok) in enumerate(_pairs()):
            rdb.decide(f"n{i}", "ann", accept=["428.0"] if ok else [], reject=([] if ok else ["428.0"]) + ["401.9"],
                       add=["584.9"] if i % 4 == 0 else [], done=True)
        s = rdb.stats()
    chf, aki, htn = s["per_code"]["428.0"], s["per_code"]["584.9"], s["per_code"]["401.9"]
    assert (chf["suggested"], chf["coded"], chf["missed_rate"]) == (40, 24, 0.0)
    assert chf["accept_rate"] == pytest.approx(24 / 40) and htn["accept_rate"] == 0.0
    assert (aki["suggested"], aki["accept_rate"], aki["coded"], aki["missed_rate"]) == (0, None, 10, 1.0)
    routing = s["routing"]
    assert (routing["target"], routing["min_decisions"]) == (0.95, 20)
    codes = routing["by_checkpoint"]["f" * 64]["codes"]
    assert set(codes) == {"428.0", "401.9"}  # 584.9 was never suggested: no score to route by
    assert (codes["428.0"]["threshold"], codes["428.0"]["decisions"]) == (0.75, 25)
    assert codes["401.9"]["threshold"] is None and codes["401.9"]["all_decisions"] == 40
    out = succeeds(["review", "stats", "--db", db]).stdout
    assert "what the queue teaches" in out and "nothing is accepted without a coder" in out
    assert any(line.split()[:4] == ["428.0", "0.750", "25", "96.0%"] for line in out.splitlines())
    assert any(line.split()[:3] == ["584.9", "0", "-"] for line in out.splitlines())
    with open_db(db) as rdb:  # a report only: no decision was made by it
        assert rdb.con.execute("SELECT COUNT(*) FROM decisions WHERE reviewer != 'ann'").fetchone()[0] == 0
