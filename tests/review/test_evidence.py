"""A coder's decision keeps the words it was made on (#44): evidence spans stored with an accept or an add (schema 6),
checked against the note and the decision's codes, read back for the final codes, and carried into `review retrain`
and `review export`, so the default model learns the reviewed notes' mentions. Synthetic notes only."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from clinicode.review import SCHEMA_VERSION, ReviewError, export, open_db
from clinicode.review.audit import adjudicate, assign, audit_log
from clinicode.review.export import retrain_data

from helpers import fails, succeeds

SHA = "e" * 64
TEXT = "Known hypertension; new congestive heart failure with edema. Seen today."
HTN = (TEXT.index("hypertension"), TEXT.index("hypertension") + len("hypertension"))
CHF = (TEXT.index("congestive"), TEXT.index("failure") + len("failure"))
EDEMA = (TEXT.index("edema"), TEXT.index("edema") + len("edema"))


def _db(path: Path, n: int = 3) -> Path:
    """N notes of TEXT, each suggesting 401.9 and 428.0 (584.9 is a checkpoint code to add)."""
    with open_db(path) as db:
        db.add_model(SHA, "/runs/m", [(c, f"title {c}") for c in ("401.9", "428.0", "584.9")])
        db.add_notes([(f"n{i}", TEXT, {"predicted": [{"code": c, "score": 0.8} for c in ("401.9", "428.0")],
                                       "evidence": {"codes": {}}}) for i in range(n)], sha256=SHA, checkpoint="/r")
    return path


def _spans(db) -> list:
    return db.read("SELECT code, action, spans FROM decisions ORDER BY id")


def test_a_version_5_file_migrates_keeping_its_decisions_and_gains_spans(tmp_path):
    path = tmp_path / "v5.sqlite"
    with open_db(path, _target=5) as db:                 # what clinicode wrote before spans
        db.con.execute("INSERT INTO notes (id, text, status, queued_at) VALUES ('a', 'text', 'pending', "
                       "'2026-01-01T00:00:00Z')")
        db.con.execute("INSERT INTO decisions (note, code, action, reviewer, at, source) VALUES "
                       "('a', '401.9', 'accept', 'ann', '2026-01-02T00:00:00Z', 'model'), "
                       "('a', '428.0', 'add', 'ann', '2026-01-02T00:00:01Z', 'person')")
        assert "spans" not in {r[1] for r in db.con.execute("PRAGMA table_info(decisions)")}
    with open_db(path) as db:
        assert db.con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        assert "spans" in {r[1] for r in db.con.execute("PRAGMA table_info(decisions)")}
        assert [tuple(r) for r in _spans(db)] == [("401.9", "accept", None), ("428.0", "add", None)]
        assert db.note("a")["evidence"] == [] and [r["spans"] for r in db.note("a")["log"]] == [None, None]
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):   # still append-only
            db.con.execute("UPDATE decisions SET spans = '[[0, 1]]'")


def test_decide_stores_the_spans_and_finished_reads_them_back(tmp_path):
    with open_db(_db(tmp_path / "r.sqlite")) as db:
        r = db.decide("n0", "ann", accept=["401.9", "428.0"], add=["584.9"],
                      evidence={"4019": [HTN], "428.0": [CHF, EDEMA, CHF], "584.9": [(0, 5)]}, done=True)
        assert r["evidence"] == {"401.9": [list(HTN)], "428.0": [list(CHF), list(EDEMA)], "584.9": [[0, 5]]}
        assert [(c, a, s and json.loads(s)) for c, a, s in _spans(db)] == [
            ("401.9", "accept", [list(HTN)]), ("428.0", "accept", [list(CHF), list(EDEMA)]),
            ("584.9", "add", [[0, 5]]), (None, "done", None)]
        ev = db.finished()[0]["evidence"]
        assert ev == [{"code": "401.9", "start": HTN[0], "end": HTN[1]}, {"code": "428.0", "start": CHF[0],
                      "end": CHF[1]}, {"code": "428.0", "start": EDEMA[0], "end": EDEMA[1]},
                      {"code": "584.9", "start": 0, "end": 5}]
        assert [TEXT[m["start"]:m["end"]] for m in ev] == ["hypertension", "congestive heart failure", "edema",
                                                           "Known"]
        assert db.note("n0")["evidence"] == ev
        assert [d["spans"] for d in audit_log(db)] == [[list(HTN)], [list(CHF), list(EDEMA)], [[0, 5]], None]


def test_the_latest_span_row_of_a_final_code_wins_and_a_withdrawn_code_keeps_none(tmp_path):
    with open_db(_db(tmp_path / "r.sqlite")) as db:
        db.decide("n0", "ann", accept=["401.9"], add=["584.9"], evidence={"401.9": [(0, 5)], "584.9": [EDEMA]})
        db.decide("n0", "ann", reject=["401.9", "584.9"])                      # 584.9 withdrawn
        db.decide("n0", "ann", accept=["401.9"], evidence={"401.9": [HTN]})    # again, on other words
        db.decide("n0", "ann", reject=["401.9"])
        db.decide("n0", "ann", accept=["401.9", "428.0"], done=True)           # once more, without spans
        assert db.finished()[0]["labels"] == ["401.9", "428.0"]
        assert db.finished()[0]["evidence"] == [{"code": "401.9", "start": HTN[0], "end": HTN[1]}]


def test_an_adjudicated_note_takes_the_spans_of_the_coders_who_kept_the_code(tmp_path):
    with open_db(_db(tmp_path / "r.sqlite")) as db:
        assign(db, ["n0"], ["ann", "bob"])
        db.decide("n0", "ann", accept=["401.9", "428.0"], add=["584.9"],
                  evidence={"401.9": [HTN], "428.0": [CHF], "584.9": [(0, 5)]}, done=True)
        db.decide("n0", "bob", accept=["401.9"], evidence={"401.9": [HTN, (0, 5)]})
        db.decide("n0", "bob", reject=["428.0"], done=True)
        assert db.note("n0", reviewer="bob")["evidence"] == [               # blind: bob sees his own spans only
            {"code": "401.9", "start": HTN[0], "end": HTN[1]}, {"code": "401.9", "start": 0, "end": 5}]
        adjudicate(db, "n0", "cat", ["401.9", "428.0"])         # 584.9 rejected; 428.0 kept, as ann said
        assert db.finished()[0]["evidence"] == [
            {"code": "401.9", "start": HTN[0], "end": HTN[1]}, {"code": "401.9", "start": 0, "end": 5},
            {"code": "428.0", "start": CHF[0], "end": CHF[1]}]


def test_the_adjudicators_spans_replace_the_coders_and_are_checked(tmp_path):
    with open_db(_db(tmp_path / "r.sqlite")) as db:
        assign(db, ["n0"], ["ann", "bob"])
        db.decide("n0", "ann", accept=["401.9", "428.0"], evidence={"401.9": [HTN], "428.0": [CHF]}, done=True)
        db.decide("n0", "bob", accept=["401.9"], reject=["428.0"], evidence={"401.9": [(0, 5)]}, done=True)
        with pytest.raises(ReviewError, match="evidence for 584.9, which this decision neither accepts nor adds; "
                                              "give evidence only with --code 584.9"):
            adjudicate(db, "n0", "cat", ["401.9"], evidence={"584.9": [(0, 5)]})
        with pytest.raises(ReviewError, match="outside the note's"):
            adjudicate(db, "n0", "cat", ["401.9"], evidence={"401.9": [(0, len(TEXT) + 1)]})
        assert db.note("n0", reviewer="cat")["status"] != "done"                 # nothing saved
        adjudicate(db, "n0", "cat", ["401.9", "428.0"], evidence={"401.9": [HTN]})
        assert db.finished()[0]["evidence"] == [                # 401.9: the adjudicator's; 428.0: ann's, who kept it
            {"code": "401.9", "start": HTN[0], "end": HTN[1]}, {"code": "428.0", "start": CHF[0], "end": CHF[1]}]


def test_the_adjudicate_command_takes_evidence(tmp_path):
    db = _db(tmp_path / "r.sqlite")
    with open_db(db) as rdb:
        assign(rdb, ["n0"], ["ann", "bob"])
        rdb.decide("n0", "ann", accept=["401.9"], reject=["428.0"], done=True)
        rdb.decide("n0", "bob", accept=["401.9", "428.0"], done=True)
    fails(["review", "adjudicate", "--db", db, "--id", "n0", "--reviewer", "cat", "--code", "401.9",
           "--evidence", "401.9=5"], "expected CODE=START:END")
    succeeds(["review", "adjudicate", "--db", db, "--id", "n0", "--reviewer", "cat", "--code", "401.9",
              "--evidence", f"401.9={HTN[0]}:{HTN[1]}"])
    with open_db(db) as rdb:
        assert [TEXT[m["start"]:m["end"]] for m in rdb.finished()[0]["evidence"]] == ["hypertension"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(accept=["401.9"], reject=["428.0"], evidence={"428.0": [CHF]}),
     "evidence for 428.0, which this decision neither accepts nor adds"),
    (dict(accept=["401.9"], evidence={"584.9": [(0, 5)]}), "evidence for 584.9, which this decision"),
    (dict(accept=["401.9"], evidence={"401.9": [(0, len(TEXT) + 1)]}),
     f"evidence span 0:{len(TEXT) + 1} for 401.9 is outside the note's {len(TEXT)} characters"),
    (dict(accept=["401.9"], evidence={"401.9": [(5, 5)]}), "expected 0 <= start < end"),
    (dict(accept=["401.9"], evidence={"401.9": [(-1, 3)]}), "expected 0 <= start < end"),
    (dict(accept=["401.9"], evidence={"401.9": [(1.0, 3)]}), "is not a pair of character offsets"),
    (dict(accept=["401.9"], evidence={"401.9": [(True, 3)]}), "is not a pair of character offsets"),
    (dict(accept=["401.9"], evidence={"401.9": [(1, 2, 3)]}), "is not a pair of character offsets"),
    (dict(accept=["401.9"], evidence={"401.9": "0:5"}), "is not a pair of character offsets"),
    (dict(accept=["401.9"], evidence={"401.9": [(i, i + 1) for i in range(51)]}), "at most 50 a code"),
    (dict(accept=["401.9"], evidence={" ": [(0, 5)]}), "is not a code"),
    (dict(done=True, evidence={"401.9": [HTN]}), "evidence for 401.9"),
])
def test_bad_evidence_is_refused_and_nothing_is_saved(tmp_path, kwargs, message):
    with open_db(_db(tmp_path / "r.sqlite")) as db:
        before = [tuple(r) for r in db.read("SELECT * FROM notes")], db.read("SELECT COUNT(*) FROM work")[0][0]
        with pytest.raises(ReviewError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
            db.decide("n0", "ann", **kwargs)
        assert "\n" not in str(err.value)
        assert str(err.value).endswith("(nothing was saved).") or "is not a code" in str(err.value)
        assert _spans(db) == []
        assert ([tuple(r) for r in db.read("SELECT * FROM notes")], db.read("SELECT COUNT(*) FROM work")[0][0]) \
            == before


def test_fifty_spans_a_code_are_kept_and_a_repeated_span_counts_once(tmp_path):
    with open_db(_db(tmp_path / "r.sqlite")) as db:
        fifty = [(i, i + 1) for i in range(50)]
        r = db.decide("n0", "ann", accept=["401.9"], evidence={"401.9": fifty + fifty[:10]})
        assert r["evidence"] == {"401.9": [list(p) for p in fifty]}


def test_retrain_data_and_export_carry_the_spans_of_kept_codes(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    for split in ("train", "dev", "test"):
        (base / f"{split}.jsonl").write_text("".join(json.dumps({"id": f"{split}{i}", "text": "old note",
                                                                 "labels": ["401.9"]}) + "\n" for i in range(3)))
    with open_db(_db(tmp_path / "r.sqlite")) as db:
        db.decide("n0", "ann", accept=["401.9", "428.0"], add=["584.9"],
                  evidence={"401.9": [HTN], "584.9": [EDEMA]}, done=True)
        db.decide("n1", "ann", accept=["401.9"], reject=["428.0"], done=True)        # no spans: no evidence key
        retrain_data(db, tmp_path / "retrain", base=base, labels=[("401.9", ""), ("428.0", "")])
        export(db, tmp_path / "export")
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "retrain" / "train.jsonl").read_text().splitlines())}
    assert rows["n0"]["labels"] == ["401.9", "428.0"]                           # 584.9 is outside the label set
    assert rows["n0"]["evidence"] == [{"code": "401.9", "start": HTN[0], "end": HTN[1]}]
    assert "evidence" not in rows["n1"] and "evidence" not in rows["train0"]
    exported = {r["id"]: r for split in ("train", "dev", "test") if (tmp_path / "export" / f"{split}.jsonl").exists()
                for r in map(json.loads, (tmp_path / "export" / f"{split}.jsonl").read_text().splitlines())}
    assert exported["n0"]["evidence"] == [{"code": "401.9", "start": HTN[0], "end": HTN[1]},
                                          {"code": "584.9", "start": EDEMA[0], "end": EDEMA[1]}]
    audit = json.loads((tmp_path / "export" / "audit.json").read_text())["decisions"]
    assert [d["spans"] for d in audit if d["note"] == "n0"] == [[list(HTN)], None, [list(EDEMA)], None]
    assert TEXT not in (tmp_path / "export" / "audit.json").read_text()       # offsets, never the words


def test_the_decide_command_takes_evidence_and_refuses_a_bad_form(tmp_path):
    db = _db(tmp_path / "r.sqlite")
    res = succeeds(["review", "decide", "--db", db, "--id", "n0", "--reviewer", "ann", "--accept", "401.9",
                    "--accept", "428.0", "--evidence", f"401.9={HTN[0]}:{HTN[1]}", "--evidence",
                    f"428.0={CHF[0]}:{CHF[1]}", "--evidence", f" 428.0 = {EDEMA[0]}:{EDEMA[1]}", "--done"])
    assert "(3 evidence spans)" in res.stdout and "finished" in res.stdout
    with open_db(db) as rdb:
        assert [TEXT[m["start"]:m["end"]] for m in rdb.finished()[0]["evidence"]] == [
            "hypertension", "congestive heart failure", "edema"]
    for bad in ("401.9", "401.9=", "401.9=5", "401.9=a:9", "=1:5", "401.9=1:²", "401.9=-1:5", "401.9=1.5:7"):
        fails(["review", "decide", "--db", db, "--id", "n1", "--reviewer", "ann", "--accept", "401.9",
               "--evidence", bad], "expected CODE=START:END")
    fails(["review", "decide", "--db", db, "--id", "n1", "--reviewer", "ann", "--accept", "401.9",
           "--evidence", "401.9=0:999"], f"outside the note's {len(TEXT)} characters")
    fails(["review", "decide", "--db", db, "--id", "n1", "--reviewer", "ann", "--reject", "401.9",
           "--evidence", "401.9=0:5"], "neither accepts nor adds")
    with open_db(db) as rdb:
        assert rdb.note("n1")["log"] == []


PHRASES = {"C1": "glorp fever", "C2": "vantic syndrome", "C3": "zelmic palsy", "C4": "hurdic anaemia",
           "C5": "plimsy gout", "C6": "crovan rash"}
FILLER = ("patient presented with history of the and was seen in clinic today after review notes stable plan follow "
          "up discussed family work walking sleep daily routine medication given").split()


def _note(rng, codes: list[str]) -> str:
    words = [rng.choice(FILLER) for _ in range(30)]
    for k, code in enumerate(codes):
        words.insert(8 + 12 * k, PHRASES[code] + ",")
    return " ".join(words)


def test_a_fused_retrain_learns_the_mention_a_coder_marked(tmp_path):
    """The base notes carry no evidence, so the checkpoint knows no mention; coders mark 'crovan rash' for C6 on the
    reviewed notes, and the retrained checkpoint finds it again (its mentions.json holds the phrase)."""
    import random

    from clinicode.config import TrainConfig
    from clinicode.models.fused.mentions import MENTIONS_FILE
    from clinicode.train import train

    from conftest import TINY_MODEL

    rng = random.Random(0)
    base = tmp_path / "base"
    base.mkdir()
    for split, n in (("train", 100), ("dev", 30), ("test", 20)):
        rows = [{"id": f"{split}{i}", "text": _note(rng, codes), "labels": codes}
                for i in range(n) for codes in [sorted(rng.sample(sorted(PHRASES), 2))]]
        (base / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    sizes = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}
    train(out_dir=run, config=TrainConfig(model="fused", epochs=1, batch_size=16, lr=2e-2, w2v_epochs=1, seed=3,
                                          device="cpu", min_doc_freq=1), data_dir=base, model_options=sizes,
          progress=False)
    old = run / "checkpoint" / MENTIONS_FILE
    assert not old.exists() or "C6" not in json.loads(old.read_text())["phrases"]
    texts = {f"new{i}": _note(rng, ["C6", other]) for i, other in enumerate(["C1", "C2", "C3", "C4", "C5"] * 2)}
    (tmp_path / "notes.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()))
    db = tmp_path / "r.sqlite"
    succeeds(["review", "queue", "--checkpoint", run, "--input", tmp_path / "notes.jsonl", "--db", db])
    with open_db(db) as rdb:
        for note_id, text in texts.items():
            gold = {"C6", next(c for c in PHRASES if c != "C6" and PHRASES[c] in text)}
            suggested = {s["code"] for s in rdb.note(note_id)["suggestions"]}
            at = text.index(PHRASES["C6"])
            rdb.decide(note_id, "ann", accept=sorted(suggested & gold), reject=sorted(suggested - gold),
                       add=sorted(gold - suggested), evidence={"C6": [(at, at + len(PHRASES["C6"]))]}, done=True)
    out = tmp_path / "retrained"
    succeeds(["review", "retrain", "--checkpoint", run, "--data", base, "--out", out, "--db", db, "--epochs", "1",
              "--sample", "30", "--device", "cpu"])
    train_rows = [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()]
    assert sum("evidence" in r for r in train_rows) == 10
    held = json.loads((out / "checkpoint" / MENTIONS_FILE).read_text())
    assert held["phrases"] == {"C6": ["crovan rash"]}
