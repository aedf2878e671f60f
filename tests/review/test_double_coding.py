"""Double coding and the audit trail (clinicode/review/audit.py, `review assign / adjudicate / agreement`): two
coders blind to each other, Cohen's kappa equal to scikit-learn's, adjudication, who changed what from what to what
and its source, time per note, all exported with the decisions."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score

from clinicode.review import ClaimedError, ReviewError, export, open_db
from clinicode.review.audit import adjudicate, agreement, assign, audit_log, kappa, work_times

from helpers import fails, succeeds

SHA = "d" * 64
CODES = ["401.9", "428.0", "427.31", "584.9"]
MODEL = CODES + ["486", "250.00"]


def _db(path: Path, n: int = 20) -> Path:
    with open_db(path) as db:
        db.add_model(SHA, "/runs/m", [(c, f"title {c}") for c in MODEL])
        db.add_notes([(f"n{i:02d}", f"note {i}",
                       {"predicted": [{"code": c, "description": "", "score": 0.8} for c in CODES[:2]],
                        "evidence": {"codes": {}}}) for i in range(n)], sha256=SHA, checkpoint="/runs/m")
    return path


def _code(db, note: str, who: str, codes: set[str], now: float) -> None:
    """A coder's decisions: suggestions accepted when in CODES, rejected otherwise; other codes added."""
    sugg = set(CODES[:2])
    db.decide(note, who, accept=sorted(sugg & codes), reject=sorted(sugg - codes), add=sorted(codes - sugg),
              done=True, now=now)


@pytest.fixture
def coded(tmp_path):
    """20 notes double coded by ann and bob with known disagreement (bob differs on a seeded 25% of cells)."""
    path = _db(tmp_path / "r.sqlite")
    rng = random.Random(4)
    truth = {f"n{i:02d}": {c for c in CODES if rng.random() < 0.4} for i in range(20)}
    bob = {n: {c for c in CODES if (c in s) != (rng.random() < 0.25)} for n, s in truth.items()}
    with open_db(path) as db:
        assert assign(db, sorted(truth), ["ann", "bob"]) == 20
        for i, n in enumerate(sorted(truth)):
            db.claim(n, "ann", now=1000.0 + i)
            _code(db, n, "ann", truth[n], now=1030.0 + i + i)           # ann: 30 s + i per note
            _code(db, n, "bob", bob[n], now=2000.0)
    return path, truth, bob


def test_kappa_per_code_and_per_coder_equals_scikit_learn(coded):
    path, ann, bob = coded
    notes = sorted(ann)
    with open_db(path) as db:
        a = agreement(db)
    assert a["notes"] == 20 and a["waiting"] == 20 and a["adjudicated"] == 0
    disagreements = 0
    for code in CODES:
        x, y = [int(code in ann[n]) for n in notes], [int(code in bob[n]) for n in notes]
        disagreements += sum(p != q for p, q in zip(x, y))
        assert a["per_code"][code]["kappa"] == pytest.approx(cohen_kappa_score(x, y)), code
        assert a["per_code"][code]["agree"] == sum(p == q for p, q in zip(x, y))
    assert disagreements > 5                           # the simulated coders do disagree
    x = [int(c in ann[n]) for n in notes for c in a["per_code"]]
    y = [int(c in bob[n]) for n in notes for c in a["per_code"]]
    assert a["overall_kappa"] == pytest.approx(cohen_kappa_score(x, y))
    assert a["per_coder"]["ann"]["kappa_with_other"] == pytest.approx(cohen_kappa_score(x, y))
    assert a["per_coder"]["bob"]["kappa_with_other"] == pytest.approx(cohen_kappa_score(y, x))
    assert 0 < a["overall_kappa"] < 1
    assert kappa([1, 1, 1], [1, 1, 1]) is None         # undefined, where scikit-learn gives nan


def test_coders_are_blind_and_only_they_decide(tmp_path):
    path = _db(tmp_path / "r.sqlite", 2)
    with open_db(path) as db:
        assign(db, ["n00"], ["ann", "bob"])
        db.claim("n00", "ann")
        db.claim("n00", "bob")                          # both work at once: a claim does not lock the other out
        db.decide("n00", "ann", accept=["401.9"])
        assert db.note("n00", reviewer="bob")["state"] == {}           # bob does not see ann's decisions
        assert db.note("n00", reviewer="ann")["state"] == {"401.9": "accept"}
        r = db.decide("n00", "bob", reject=["401.9"])
        assert r["codes"] == []                                         # bob's own state, not ann's
        with pytest.raises(ReviewError, match="double coded by ann and bob"):
            db.decide("n00", "cy", accept=["428.0"])
        with pytest.raises(ClaimedError, match="double coded by ann and bob"):
            db.claim("n00", "cy")
        db.decide("n00", "ann", reject=["428.0"], done=True)
        assert db.note("n00")["status"] == "in_progress"               # one coder finishing does not finish it
        with pytest.raises(ReviewError, match="ann finished it already"):
            db.decide("n00", "ann", accept=["428.0"])
        with pytest.raises(ReviewError, match="bob not finished yet"):
            adjudicate(db, "n00", "cy", ["401.9"])
        assert "n00" not in db.next_notes(5, reviewer="ann") and "n00" in db.next_notes(5, reviewer="bob")
        assert "n00" not in db.next_notes(5, reviewer="cy")
        with pytest.raises(ReviewError, match="double coding needs two different coders"):
            assign(db, ["n01"], ["ann", "ann"])


def test_adjudication_records_the_final_decision_and_the_audit_says_who_what_from_what(coded, tmp_path):
    path, ann, bob = coded
    note = next(n for n in sorted(ann) if ann[n] != bob[n])
    final = sorted(ann[note] | bob[note])
    with open_db(path) as db:
        with pytest.raises(ReviewError, match="someone else adjudicates"):
            adjudicate(db, note, "ann", final)
        r = adjudicate(db, note, "cy", final)
        assert r["codes"] == final
        assert db.note(note)["status"] == "done"
        (done,) = [n for n in db.finished() if n["id"] == note]
        assert done["labels"] == final                    # the adjudicator's codes are the note's codes
        a = agreement(db)
        assert a["adjudicated"] == 1 and a["per_coder"]["ann"]["adjudicated_notes"] == 1
        log = [r for r in audit_log(db) if r["note"] == note]
        assert {r["reviewer"] for r in log} == {"ann", "bob", "cy"}
        assert all(r["checkpoint_sha256"] == SHA and r["at"] for r in log)
        suggested = set(CODES[:2])
        for r in log:
            if r["reviewer"] != "cy" and r["code"]:
                assert r["source"] == ("model" if r["code"] in suggested else "person")
        adj = {r["code"]: r for r in log if r["reviewer"] == "cy" and r["code"]}
        assert all(r["source"] == "adjudication" for r in adj.values())
        c = final[0]
        assert adj[c]["action"] in ("accept", "add")
        assert adj[c]["was"] == (f"ann:{'add' if c not in suggested else 'accept'}" if c in ann[note] else
                                 f"ann:{'reject' if c in suggested else '-'}") + "/" + \
            (f"bob:{'add' if c not in suggested else 'accept'}" if c in bob[note] else
             f"bob:{'reject' if c in suggested else '-'}")
        times = {(t["note"], t["reviewer"]): t["seconds"] for t in work_times(db)}
        assert times[("n03", "ann")] == pytest.approx(30 + 3)   # from the claim to the finish
        other = next(n for n in sorted(ann) if n != note)
        adjudicate(db, other, "cy", sorted(ann[other]))      # an export needs two finished notes
    out = tmp_path / "export"
    with open_db(path, readonly=True) as db:
        export(db, out)
    trail = json.loads((out / "audit.json").read_text())
    rows = trail["decisions"]
    with open_db(path, readonly=True) as db:
        assert rows == audit_log(db)
    assert {"was", "source", "reviewer", "at", "checkpoint_sha256"} <= set(rows[0])
    assert trail["agreement"]["adjudicated"] == 2
    assert any(w["seconds"] for w in trail["work"])
    assert "note 1" not in (out / "audit.json").read_text()   # no note text in the audit trail


def test_a_single_coders_change_says_from_what(tmp_path):
    path = _db(tmp_path / "r.sqlite", 1)
    with open_db(path) as db:
        db.decide("n00", "ann", accept=["401.9"])
        db.decide("n00", "ann", reject=["401.9"], add=["486"])
        log = db.note("n00")["log"]
    assert [(r["code"], r["was"], r["action"], r["source"]) for r in log] == [
        ("401.9", None, "accept", "model"), ("401.9", "accept", "reject", "model"), ("486", None, "add", "person")]


def test_the_commands(coded):
    path, ann, bob = coded
    res = succeeds(["review", "agreement", "--db", path, "--json"])
    a = json.loads(res.stdout)
    assert a["notes"] == 20 and len(a["time"]) == 40
    text = succeeds(["review", "agreement", "--db", path]).stdout
    assert "20 double-coded notes" in text and "kappa with other" in text
    note = sorted(ann)[0]
    res = succeeds(["review", "adjudicate", "--db", path, "--id", note, "--reviewer", "cy", "--code", "401.9"])
    assert f"note {note}: final codes 401.9" in res.stdout
    fails(["review", "adjudicate", "--db", path, "--id", sorted(ann)[1], "--reviewer", "cy", "--code", "999.9"],
          "named by neither coder nor the model")
    fails(["review", "assign", "--db", path, "--coder", "ann", "--coder", "bob"], "give the notes to double code")


def test_assign_by_count_takes_open_notes(tmp_path):
    path = _db(tmp_path / "r.sqlite", 5)
    with open_db(path) as db:
        db.decide("n00", "zed", accept=["401.9"])
    res = succeeds(["review", "assign", "--db", path, "--coder", "ann", "--coder", "bob", "--count", "3",
                    "--order", "arrival"])
    assert "assigned 3 notes to ann and bob" in res.stdout
    with open_db(path) as db:
        assert sorted({r[0] for r in db.read("SELECT note FROM assignments")}) == ["n01", "n02", "n03"]
    fails(["review", "assign", "--db", path, "--coder", "ann", "--coder", "bob", "--id", "n00"],
          "holds decisions of zed")


def test_stats_say_which_checkpoint_each_decision_was_made_on(tmp_path):
    path = _db(tmp_path / "r.sqlite", 2)
    with open_db(path) as db:
        db.add_model("c" * 64, "/runs/retrained", [(c, "") for c in MODEL])
        db.add_notes([("late", "later note", {"predicted": [{"code": "486", "description": "", "score": 0.7}],
                                              "evidence": {"codes": {}}})], sha256="c" * 64,
                     checkpoint="/runs/retrained")
        db.decide("n00", "ann", accept=["401.9", "428.0"], done=True)
        db.decide("late", "ann", accept=["486"], add=["401.9"], done=True)
        s = db.stats()
    assert s["checkpoints"] == {SHA: {"checkpoint": "/runs/m", "decisions": 2},
                                "c" * 64: {"checkpoint": "/runs/retrained", "decisions": 2}}
    out = succeeds(["review", "stats", "--db", path]).stdout
    assert "decisions per checkpoint" in out and "/runs/retrained" in out
