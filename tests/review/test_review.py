"""The review queue (clinicode/review/ and `clinicode review ...`): database, queue, decisions, claims, export,
stats, concurrency and faults. Synthetic notes only."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clinicode import review
from clinicode.cli import app
from clinicode.review import ClaimedError, ReviewError, open_db

from helpers import SECRET, fails, runner, snapshot, succeeds

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Patient with hypertension and congestive heart failure; atrial fibrillation on coumadin. " + SECRET


def _rec(*codes: str) -> dict:
    """A `Prediction.to_dict()`-shaped record suggesting CODES (scores falling from 0.9)."""
    return {"predicted": [{"code": c, "description": f"title of {c}", "score": 0.9 - 0.1 * i}
                          for i, c in enumerate(codes)],
            "evidence": {"spans": [], "codes": {c: [{"start": 13, "end": 25, "weight": 1.0}] for c in codes}}}


def _fake_db(path: Path, n: int = 3, codes=("401.9", "428.0", "427.31")) -> Path:
    with open_db(path) as db:
        db.add_model("f" * 64, "/runs/fake", [(c, f"title of {c}") for c in ("401.9", "428.0", "427.31", "584.9",
                                                                             "486")])
        db.add_notes([(f"n{i}", TEXT, _rec(*codes)) for i in range(n)], sha256="f" * 64, checkpoint="/runs/fake")
    return path


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


# ------------------------------------------------------------------------------------------------ the database
def test_new_database_is_owner_only_wal_and_versioned(tmp_path):
    path = _fake_db(tmp_path / "r.sqlite")
    with open_db(path) as db:
        db.decide("n0", "ann", accept=["401.9"])  # a write, so the -wal file exists while open
        for suffix in ("", "-wal", "-shm"):
            f = Path(str(path) + suffix)
            assert f.exists() and _mode(f) == 0o600, (suffix, oct(_mode(f)))
        assert db.con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.con.execute("PRAGMA user_version").fetchone()[0] == review.SCHEMA_VERSION == 7  # 6: spans, 7: #50
        assert db.con.execute("PRAGMA application_id").fetchone()[0] == review.APPLICATION_ID


def test_the_env_variable_chooses_the_file_and_a_missing_path_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(review.DB_ENV, raising=False)
    fails(["review", "stats"], "pass --db FILE or set CLINICODE_REVIEW_DB")
    monkeypatch.setenv(review.DB_ENV, str(tmp_path / "nothing.sqlite"))
    fails(["review", "stats"], "no review database at")
    assert not (tmp_path / "nothing.sqlite").exists()  # stats never creates one
    _fake_db(tmp_path / "env.sqlite")
    monkeypatch.setenv(review.DB_ENV, str(tmp_path / "env.sqlite"))
    assert "0 finished notes, 3 still open" in succeeds(["review", "stats"]).stdout


def test_a_version_1_file_is_migrated_keeping_its_rows(tmp_path):
    path = tmp_path / "v1.sqlite"
    with open_db(path, _target=1) as db:  # what a clinicode with schema 1 wrote
        assert db.con.execute("PRAGMA user_version").fetchone()[0] == 1
        assert not db.con.execute("SELECT name FROM sqlite_master WHERE name = 'models'").fetchall()
        db.con.execute("INSERT INTO notes (id, text, status, queued_at) VALUES ('a', ?, "
                       "'pending', '2026-01-01T00:00:00Z')",
                       (TEXT,))
        db.con.execute("INSERT INTO suggestions VALUES ('a', 'abc', '/runs/old', '401.9', "
                       "'Hypertension', 0.8, '[]', 1)")
        db.con.execute("INSERT INTO decisions (note, code, action, reviewer, at) VALUES "
                       "('a', '401.9', 'accept', 'ann', '2026-01-01T00:00:01Z')")
    with open_db(path) as db:
        assert db.con.execute("PRAGMA user_version").fetchone()[0] == review.SCHEMA_VERSION
        assert db.note("a")["suggestions"][0]["source"] == "model"  # v4: every earlier suggestion is the model's
        assert db.model_codes("a") == [("401.9", "Hypertension")]  # v2's models table filled from v1's suggestions
        assert db.code_system("a").name == "ICD-9-CM"              # v3's code system inferred from those codes
        note = db.note("a")
        assert note["text"] == TEXT and note["state"] == {"401.9": "accept"}
        db.decide("a", "ann", done=True)
        assert db.stats()["overall"]["accepted"] == 1


def test_decisions_are_append_only(tmp_path):
    path = _fake_db(tmp_path / "r.sqlite")
    with open_db(path) as db:
        db.decide("n0", "ann", accept=["401.9"], reject=["428.0"])
        for sql in ("UPDATE decisions SET action = 'reject'", "DELETE FROM decisions"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                db.con.execute(sql)
        assert [r["action"] for r in db.note("n0")["log"]] == ["accept", "reject"]


# ------------------------------------------------------------------------------------------------ queue
@pytest.fixture(scope="module")
def notes_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("review_in") / "notes.jsonl"
    lines = [json.dumps({"id": f"q{i}",
                         "text": f"Hypertension and congestive heart failure, visit {i}. Acute kidney failure."})
             for i in range(5)]
    lines.insert(2, json.dumps({"id": "blank", "text": "  "}))
    lines.insert(4, "{not json " + SECRET)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_queue_scores_like_predict_and_requeuing_changes_nothing(tiny_run, notes_file, tmp_path):
    from clinicode.predict import Predictor

    db = tmp_path / "q.sqlite"
    res = succeeds(["review", "queue", "--checkpoint", tiny_run, "--input", notes_file, "--db", db])
    assert "queued 5 notes, 0 already in the queue (left unchanged), 2 bad records" in res.stdout
    bad = [line for line in res.stderr.splitlines() if line.startswith("bad record:")]
    assert len(bad) == 2 and any("'blank'" in b for b in bad) and any("line 5" in b for b in bad)
    assert SECRET not in res.stderr
    pred = Predictor.from_checkpoint(tiny_run, device="cpu")
    texts = [json.loads(line)["text"] for line in notes_file.read_text().splitlines()[:2]]
    expected = pred.predict(texts, ids=["q0", "q1"], explain=5)[0].to_dict()
    with open_db(db) as rdb:
        note = rdb.note("q0")
        assert note["text"] == texts[0] and note["status"] == "pending"
        assert [(s["code"], pytest.approx(s["score"])) for s in note["suggestions"]] == \
            [(p["code"], pytest.approx(p["score"])) for p in expected["predicted"]]
        assert note["suggestions"], "the tiny model suggests codes for this note"
        for s in note["suggestions"]:
            assert s["evidence"] == expected["evidence"]["codes"][s["code"]]
            assert all(0 <= e["start"] < e["end"] <= len(texts[0]) for e in s["evidence"])
        assert len(rdb.model_codes()) == 50
    before = snapshot_table(db)
    res = succeeds(["review", "queue", "--checkpoint", tiny_run, "--input", notes_file, "--db", db])
    assert "queued 0 notes, 5 already in the queue (left unchanged), 2 bad records" in res.stdout
    assert snapshot_table(db) == before


def snapshot_table(db: Path) -> list:
    with open_db(db) as rdb:
        return [tuple(r) for t in ("notes", "suggestions", "decisions")
                for r in rdb.con.execute(f"SELECT * FROM {t} ORDER BY 1, 2")]


# ------------------------------------------------------------------------------------------------ decisions
def test_decide_accept_reject_add_done_and_what_it_refuses(tmp_path):
    db = _fake_db(tmp_path / "r.sqlite")
    d = ["review", "decide", "--db", db, "--reviewer", "ann"]
    fails([*d, "--id", "nope", "--accept", "401.9"], "no note 'nope'")
    fails([*d, "--id", "n0", "--accept", "584.9"], "is not a suggested code, so it cannot be accepted; use --add 584.9")
    fails([*d, "--id", "n0", "--add", "401.9"], "401.9 is already suggested; use --accept 401.9")
    fails([*d, "--id", "n0", "--add", "ZZZ.9"], "neither one of the model's codes nor a valid ICD-9-CM code")
    fails([*d, "--id", "n0", "--add", "I50.9"], "I50.9 is a code of ICD-10-CM, but the model that scored this note "
          "codes in ICD-9-CM")
    fails([*d, "--id", "n0", "--accept", "401.9", "--reject", "401.9"], "given more than once")
    fails([*d, "--id", "n0", "--accept", "401.9", "--done"], "2 suggested code(s) have no decision yet")
    with open_db(db) as rdb:
        assert rdb.note("n0")["log"] == []  # refused calls saved nothing, not even part of themselves
    res = succeeds([*d, "--id", "n0", "--accept", "401.9", "--accept", "427.31", "--reject", "428.0",
                    "--add", "584.9", "--add", "250.00"])  # a model code and an ICD-9-CM code outside them
    assert "accepted 2, rejected 1, added 2; codes now: 250.00, 401.9, 427.31, 584.9" in res.stdout
    succeeds([*d, "--id", "n0", "--reject", "250.00"])  # withdraws an addition
    res = succeeds([*d, "--id", "n0", "--done"])
    assert "finished; codes now: 401.9, 427.31, 584.9" in res.stdout
    fails([*d, "--id", "n0", "--accept", "401.9"], "note 'n0' is finished")
    with open_db(db) as rdb:
        log = rdb.note("n0")["log"]
        assert [(r["code"], r["action"]) for r in log] == [("401.9", "accept"), ("427.31", "accept"),
                                                           ("428.0", "reject"),
                                                           ("584.9", "add"), ("250.00", "add"), ("250.00", "reject"),
                                                           (None, "done")]
        assert {r["reviewer"] for r in log} == {"ann"} and all(r["at"].endswith("Z") for r in log)


def test_claims_keep_two_reviewers_apart_and_expire(tmp_path):
    db = _fake_db(tmp_path / "r.sqlite")
    with open_db(db) as a, open_db(db) as b:  # two sessions
        t0 = 1_000_000.0
        a.claim("n0", "ann", minutes=10, now=t0)
        assert [n["claimed_by"] for n in b.notes(now=t0 + 1) if n["id"] == "n0"] == ["ann"]
        assert b.notes(status=["in progress"], now=t0 + 1)[0]["id"] == "n0"
        with pytest.raises(ClaimedError, match="being reviewed by ann"):
            b.claim("n0", "bob", now=t0 + 60)
        with pytest.raises(ClaimedError):
            b.decide("n0", "bob", accept=["401.9"], now=t0 + 60)
        a.decide("n0", "ann", accept=["401.9"], now=t0 + 120)  # the holder decides (and renews the claim)
        b.claim("n1", "bob", now=t0)
        later = t0 + (review.CLAIM_MINUTES + 3) * 60
        b.claim("n0", "bob", now=later)  # ann's claim went stale: bob may take the note over
        with pytest.raises(ClaimedError, match="bob"):
            a.decide("n0", "ann", reject=["428.0"], now=later + 1)
        assert b.note("n0")["state"] == {"401.9": "accept"}  # ann's decision is kept
        b.release("n0", "bob")
        assert [n["claimed_by"] for n in a.notes(now=later + 2) if n["id"] == "n0"] == [None]


def test_two_processes_deciding_at_once_store_all_20_decisions(tmp_path):
    db = _fake_db(tmp_path / "r.sqlite", n=20)
    go = tmp_path / "go"
    child = textwrap.dedent("""
        import os, sys, time
        from typer.testing import CliRunner
        from clinicode.cli import app
        db, go, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
        while not os.path.exists(go):
            time.sleep(0.001)
        r = CliRunner()
        for i in range(first, first + 10):
            for args in (["--accept", "401.9", "--reject", "428.0"], ["--add", "584.9"],
                         ["--accept", "427.31", "--done"]):
                res = r.invoke(app, ["review", "decide", "--db", db, "--id", f"n{i}", "--reviewer", f"p{first}", *args])
                sys.stdout.write(res.stdout)
                sys.stderr.write(res.stderr if hasattr(res, "stderr") else "")
                if res.exit_code != 0:
                    sys.stderr.write(f"exit {res.exit_code} {res.exception!r}\\n")
                    sys.exit(1)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", child, str(db), str(go), str(first)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for first in (0, 10)]
    go.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert "locked" not in out + err and "busy" not in out + err
        assert out.count("finished") == 10
    with open_db(db) as rdb:
        assert rdb.con.execute("SELECT COUNT(*) FROM decisions WHERE action = 'done'").fetchone()[0] == 20
        assert rdb.con.execute("SELECT COUNT(*) FROM decisions").fetchone()[0] == 20 * 5
        assert all(n["status"] == "done" for n in rdb.notes())
        s = rdb.stats()["overall"]
        assert (s["notes"], s["accepted"], s["rejected"], s["added"]) == (20, 40, 20, 20)


# ------------------------------------------------------------------------------------------------ stats
def test_stats_count_agreement_overall_per_code_and_per_day(tmp_path):
    db = _fake_db(tmp_path / "r.sqlite", n=2)
    with open_db(db) as rdb:
        rdb.decide("n0", "ann", accept=["401.9", "428.0"], reject=["427.31"], add=["584.9"], done=True)
        rdb.decide("n1", "bob", accept=["401.9"], reject=["428.0", "427.31"], done=True)
        s = rdb.stats()
    o = s["overall"]
    assert (o["notes"], o["accepted"], o["rejected"], o["added"]) == (2, 3, 3, 1)
    assert o["precision"] == pytest.approx(3 / 6) and o["recall"] == pytest.approx(3 / 4)
    assert s["per_code"]["401.9"]["precision"] == 1.0 and s["per_code"]["427.31"]["precision"] == 0.0
    assert s["per_code"]["584.9"]["added"] == 1 and s["per_code"]["584.9"]["recall"] == 0.0
    assert len(s["over_time"]) == 1 and list(s["over_time"].values())[0]["notes"] == 2
    res = succeeds(["review", "stats", "--db", db, "--by", "week"])
    assert "2 finished notes, 0 still open" in res.stdout and "-W" in res.stdout
    assert "  50.0%" in res.stdout and "  75.0%" in res.stdout
    js = json.loads(succeeds(["review", "stats", "--db", db, "--json"]).stdout)
    assert js["overall"]["accepted"] == 3
    fails(["review", "stats", "--db", db, "--by", "month"], "--by must be day or week")


# ------------------------------------------------------------------------------------------------ export
def test_export_writes_an_owner_only_coded_notes_folder_and_follows_the_output_rule(tmp_path):
    from clinicode.data.prepared import load_dataset

    db = _fake_db(tmp_path / "r.sqlite", n=12)
    fails(["review", "export", "--db", db, "--out", tmp_path / "x"], "0 finished note(s)")
    with open_db(db) as rdb:
        for i in range(12):
            rdb.decide(f"n{i}", "ann", accept=["401.9", "427.31"], reject=["428.0"], add=["584.9"] if i % 2 else [],
                       done=True)
    out = tmp_path / "corrections"
    res = succeeds(["review", "export", "--db", db, "--out", out])
    assert "wrote 12 finished notes" in res.stdout
    assert _mode(out) == 0o700
    for f in out.iterdir():
        if f.suffix in (".jsonl", ".tsv"):
            assert _mode(f) == 0o600, f.name
    ds = load_dataset(out)
    rows = {r["id"]: list(r["labels"]) for split in ("train", "dev") for _, r in ds.splits[split].iterrows()}
    assert len(ds.splits["train"]) >= 1 and len(ds.splits["dev"]) >= 1
    assert sum(len(ds.splits[s]) for s in ds.splits) == 12
    for i in range(12):
        if f"n{i}" in rows:
            assert sorted(rows[f"n{i}"]) == (["401.9", "427.31", "584.9"] if i % 2 else ["401.9", "427.31"])
    assert "584.9\ttitle of 584.9" in (out / "descriptions.tsv").read_text()
    succeeds(["review", "export", "--db", db, "--out", out])  # its own earlier export may be replaced
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    before = snapshot(other)
    fails(["review", "export", "--db", db, "--out", other], "did not write")
    assert snapshot(other) == before


# ------------------------------------------------------------------------------------------------ faults
def test_a_text_file_or_a_foreign_sqlite_file_is_refused_untouched(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("just some text " + SECRET)
    foreign = tmp_path / "other.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    for path, msg in ((text, "not a clinicode review database (not an SQLite file)"),
                      (foreign, "an SQLite database of another program")):
        before = path.read_bytes()
        fails(["review", "stats", "--db", path], msg)
        fails(["review", "queue", "--db", path, "--checkpoint", tmp_path, "--input", text], msg)
        assert path.read_bytes() == before
    res = runner().invoke(app, ["review", "queue", "--db", str(tmp_path / "new.sqlite"), "--checkpoint", str(tmp_path),
                                "--input", str(text)])
    assert res.exit_code == 1 and not (tmp_path / "new.sqlite").exists()  # no database for a checkpoint that failed


def test_a_newer_or_damaged_database_is_one_clear_line(tmp_path):
    newer = _fake_db(tmp_path / "newer.sqlite")
    with open_db(newer) as rdb:
        rdb.con.execute("PRAGMA user_version = 99")
    fails(["review", "stats", "--db", newer], "written by a newer clinicode (review schema 99")
    damaged = _fake_db(tmp_path / "damaged.sqlite", n=40)
    raw = bytearray(damaged.read_bytes())
    assert len(raw) > 3 * 4096
    raw[4096:] = os.urandom(len(raw) - 4096)  # header intact, every table page garbage
    damaged.write_bytes(bytes(raw))
    before = damaged.read_bytes()
    fails(["review", "stats", "--db", damaged], "is damaged")
    fails(["review", "decide", "--db", damaged, "--id", "n0", "--reviewer", "a", "--accept", "401.9"], "damaged")
    assert damaged.read_bytes() == before


def test_a_full_disk_while_saving_loses_nothing_saved_before(tiny_run, tmp_path, monkeypatch):
    db = _fake_db(tmp_path / "r.sqlite", n=2)
    with open_db(db) as rdb:
        rdb.decide("n0", "ann", accept=["401.9"])
    real_open = review.open_db

    def tiny_disk(*args, **kw):  # SQLite's own size cap: a write beyond it fails with SQLITE_FULL, as on a full disk
        d = real_open(*args, **kw)
        pages = d.con.execute("PRAGMA page_count").fetchone()[0]
        d.con.execute(f"PRAGMA max_page_count = {pages}")
        return d

    with tiny_disk(db) as d:
        with pytest.raises(ReviewError, match="the disk is full"):
            d.add_notes([(f"b{i}", "word " * 4000, _rec("401.9")) for i in range(5)], sha256="f" * 64, checkpoint="x")
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({"id": f"b{i}", "text": "hypertension " * 3000}) + "\n" for i in range(5)))
    monkeypatch.setattr(review, "open_db", tiny_disk)
    fails(["review", "queue", "--db", db, "--checkpoint", tiny_run, "--input", big], "the disk is full, so this change "
          "was not saved (everything saved before is intact)")
    monkeypatch.setattr(review, "open_db", real_open)
    with open_db(db) as rdb:
        assert [n["id"] for n in rdb.notes()] == ["n0", "n1"]
        assert rdb.note("n0")["state"] == {"401.9": "accept"}
        assert rdb.con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# ------------------------------------------------------------------------------------------------ learning from it
@pytest.mark.slow
def test_export_then_train_then_evaluate_on_the_corrections(tiny_run, demo_data, tmp_path):
    """Coders correct the tiny model to the gold codes; the export trains a new model and evaluates."""
    import pandas as pd

    from clinicode.data.prepared import read_split

    from conftest import TINY_CLI

    df = pd.concat([read_split(demo_data, "dev"), read_split(demo_data, "test")]).head(60)
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"id": str(r.id), "text": r.text}) + "\n" for r in df.itertuples()))
    gold = {str(r.id): set(r.labels) for r in df.itertuples()}
    db = tmp_path / "r.sqlite"
    assert "queued 60 notes" in succeeds(["review", "queue", "--checkpoint", tiny_run, "--input", notes, "--db",
                                          db]).stdout
    with open_db(db) as rdb:
        for note_id, codes in gold.items():
            suggested = {s["code"] for s in rdb.note(note_id)["suggestions"]}
            rdb.decide(note_id, "coder", accept=sorted(suggested & codes), reject=sorted(suggested - codes),
                       add=sorted(codes - suggested), done=True)
        s = rdb.stats()["overall"]
    assert s["notes"] == 60 and s["accepted"] + s["added"] == sum(len(c) for c in gold.values())
    out = tmp_path / "corrections"
    succeeds(["review", "export", "--db", db, "--out", out])
    exported = {}
    for f in out.glob("*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            exported[r["id"]] = set(r["labels"])
    assert exported == gold  # labels = accepted + added = what the coders decided
    run = tmp_path / "retrained"
    flags = [a if a != "8" else "1" for a in TINY_CLI]  # --epochs 1
    succeeds(["train", "--data", out, "--out", run, "--descriptions", out / "descriptions.tsv", "--min-doc-freq", "1",
              *flags])
    res = succeeds(["evaluate", "--checkpoint", run, "--data", out, "--split", "dev"])
    assert "micro" in res.stdout.lower()


def test_export_with_base_keeps_its_splits_and_adds_the_reviewed_notes_to_train(demo_data, tmp_path):
    from clinicode.data.prepared import load_dataset

    db = _fake_db(tmp_path / "r.sqlite", n=3)
    with open_db(db) as rdb:
        for i in range(3):
            rdb.decide(f"n{i}", "ann", accept=["401.9"], reject=["428.0", "427.31"], add=["250.00"] if i == 0 else [],
                       done=True)
    base = load_dataset(demo_data)
    out = tmp_path / "combined"
    res = succeeds(["review", "export", "--db", db, "--out", out, "--base", demo_data])
    assert "wrote 3 finished notes with --base" in res.stdout
    ds = load_dataset(out)
    assert len(ds.splits["train"]) == len(base.splits["train"]) + 3
    for split in ("dev", "test"):
        assert ds.splits[split]["id"].tolist() == base.splits[split]["id"].tolist()
    assert ds.labels.codes[:len(base.labels)] == base.labels.codes and "250.00" in ds.labels
    train = ds.splits["train"].set_index("id")
    assert sorted(train.loc["n0", "labels"]) == ["250.00", "401.9"] and list(train.loc["n1", "labels"]) == ["401.9"]
    fails(["review", "export", "--db", db, "--out", demo_data / "inside", "--base", demo_data],
          "inside the input folder")


def test_add_a_code_search_finds_model_codes_then_icd10_cm_by_code_or_title_words_for_icd10_models():
    from clinicode.codes.search import code_matches
    from clinicode.review import search_codes

    assert code_matches("428", "428.0", "") and code_matches("4280", "428.0", "") and code_matches("428.0", "428.0", "")
    title = "Congestive heart failure"
    assert code_matches("HEART fail", "428.0", title) and not code_matches("heart x", "428.0", title)
    assert not code_matches("  ", "428.0", "Congestive heart failure")
    hits = search_codes("heart failure", [("I50.9", "Heart failure, unspecified"), ("I10", "Hypertension")], limit=5)
    assert hits[0] == ("I50.9", "Heart failure, unspecified", "model") and len(hits) == 5
    assert all(src == "ICD-10-CM" and "heart failure" in title.lower() for _, title, src in hits[1:])
    # an ICD-9 model's coders are offered its own codes: ICD-10-CM codes would be refused on its notes
    icd9 = [("428.0", "Congestive heart failure"), ("401.9", "Hypertension")]
    assert search_codes("heart failure", icd9, limit=5) == [("428.0", "Congestive heart failure", "model")]
    assert search_codes("", [("428.0", "Congestive heart failure")]) == []


def test_suggestions_from_the_title_are_queued_marked_and_counted_apart(tmp_path):
    """#43: a record's `suggested` codes join the note's suggestions marked source 'title'; decisions on them are
    counted in stats' `from_title`, never in the model's precision, recall, per-code rates or routing."""
    rec = _rec("401.9", "428.0")
    rec["suggested"] = [{"code": "584.8", "title": "Acute renal failure", "score": 1.2, "source": "title",
                         "reason": "title in the note", "spans": [{"start": 0, "end": 7}]},
                        {"code": "999.1", "title": "Air embolism", "score": 0.4, "source": "title",
                         "reason": "title in the note", "spans": [{"start": 8, "end": 12}]}]
    path = tmp_path / "t.sqlite"
    with open_db(path) as db:
        db.add_model("f" * 64, "/runs/fake", [(c, f"title of {c}") for c in ("401.9", "428.0")])
        db.add_notes([("n0", TEXT, rec)], sha256="f" * 64, checkpoint="/runs/fake")
        sugg = db.note("n0")["suggestions"]
        assert [(s["code"], s["source"]) for s in sugg] == [("401.9", "model"), ("428.0", "model"),
                                                             ("584.8", "title"), ("999.1", "title")]
        assert sugg[2]["evidence"] == [{"start": 0, "end": 7, "weight": 1.0}]
        db.decide("n0", "ann", accept=["401.9", "584.8"], reject=["428.0", "999.1"], done=True)
        s = db.stats()
    o = s["overall"]
    assert (o["accepted"], o["rejected"], o["added"]) == (1, 1, 0) and o["precision"] == 0.5
    assert set(s["per_code"]) == {"401.9", "428.0"}
    assert s["from_title"]["accepted"] == 1 and s["from_title"]["rejected"] == 1
    assert s["from_title"]["per_code"] == {"584.8": {"accepted": 1, "rejected": 0},
                                           "999.1": {"accepted": 0, "rejected": 1}}
    out = succeeds(["review", "stats", "--db", path]).stdout
    assert "suggested from the title (codes the model lacks; not in the counts above): 1 accepted, 1 rejected" in out
