"""Which note next (clinicode/review/teach.py, `clinicode review next`, the app's Next note): the signals, the greedy
rule with its diversity term, the pool the database offers, and an older database opening with every decision."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from clinicode.review import SCHEMA_VERSION, open_db, teach

from helpers import fails, succeeds

SHA = "e" * 64


def _rec(*codes: str) -> dict:
    return {"predicted": [{"code": c, "description": "", "score": 0.9} for c in codes], "evidence": {"codes": {}}}


def _db(path: Path, notes: list[tuple[str, str, tuple[float, float] | None]]) -> Path:
    """A database with NOTES (id, text, signals or None) queued in this order."""
    with open_db(path) as db:
        db.add_model(SHA, "/runs/x", [("401.9", "Hypertension"), ("428.0", "Heart failure")])
        db.add_notes([(i, t, _rec("401.9")) for i, t, _ in notes], sha256=SHA, checkpoint="/runs/x",
                     signals={i: s for i, _, s in notes if s is not None})
    return path


# ------------------------------------------------------------------------------------------------ the signals
def test_uncertainty_peaks_at_the_threshold_and_rarity_follows_few_training_notes():
    probs = np.array([[0.5, 0.0], [0.99, 0.01], [0.3, 0.0], [0.0, 0.9]])
    unc, rare = teach.signals(probs, 0.5, [100, 1])
    assert unc[0] == pytest.approx(1.0 + 0.0) and unc[1] == pytest.approx(0.02 + 0.02)
    assert unc[0] > unc[2] > unc[1]                       # nearer the threshold: more uncertain
    assert rare[3] == pytest.approx(1 / 2)                # the rare code, scored over the threshold
    assert rare[0] == pytest.approx(1 / 101)              # the common code at the threshold
    assert int(np.argmax(rare)) == 3                      # the note with the rare code ranks first


def test_a_code_the_model_never_saw_is_found_by_its_title():
    titles = ["Heart failure", "Acute kidney failure"]
    texts = ["Congestive heart failure, worse.", "Acute failure of the kidney and heart.", "Nothing here."]
    hits = teach.title_hits(texts, titles)
    assert hits.tolist() == [[1, 0], [1, 1], [0, 0]]      # every title word, in any order
    probs = np.zeros((3, 2))                               # an unseen code scores ~0 in the model
    _, rare = teach.signals(probs, 0.5, [50, 0], hits)
    assert rare[1] == pytest.approx(1 / 51 + 1.0) and rare[2] == 0
    assert int(np.argmax(rare)) == 1


def test_diversity_spreads_a_batch_over_unlike_notes():
    texts = ["heart failure with reduced ejection fraction"] * 3 + ["fracture of the left femur after a fall"]
    unc = np.array([3.0, 2.9, 2.8, 2.0])
    rare = np.zeros(4)
    without = teach.pick(unc, rare, 2, texts=texts, weights=teach.Weights(1, 1, 0))
    assert without == [0, 1]                               # the same note twice
    assert teach.pick(unc, rare, 2, texts=texts) == [0, 3]  # the rule's default: the unlike note second
    assert teach.pick(unc, rare, 10, texts=texts)[:2] == [0, 3] and len(teach.pick(unc, rare, 10, texts=texts)) == 4


def test_a_note_alike_to_one_already_reviewed_waits():
    texts = ["heart failure with reduced ejection fraction", "fracture of the left femur after a fall",
             "itchy rash on both forearms"]
    seen = ["heart failure with reduced ejection fraction, admitted"]
    rows = teach.vectors(texts + seen)
    unc, rare = np.zeros(3), np.array([1.0, 0.9, 0.1])                          # ranks 1, 0.5, 0
    assert teach.pick(unc, rare, 1, vecs=rows[:3]) == [0]                       # by rarity alone
    assert teach.pick(unc, rare, 1, vecs=rows[:3], seen=rows[3:]) == [1]        # its twin was reviewed: the next
    assert teach.pick(unc, rare, 1, vecs=rows[:3], seen=rows[3:], weights=teach.Weights(0, 1, 0)) == [0]
    pool = [{"id": i, "uncertainty": 0.0, "rarity": r, "text": t} for i, r, t in zip(("hf", "fx", "rash"), rare, texts)]
    assert teach.order_notes(pool, 3) == ["hf", "fx", "rash"]
    assert teach.order_notes(pool, 3, seen_texts=seen)[0] == "fx"


def test_next_notes_compares_with_the_finished_notes(tmp_path):
    hf = "acute decompensated heart failure, reduced ejection fraction"
    path = _db(tmp_path / "r.sqlite", [("old", hf, None), ("twin", hf, (0, 0.5)),
                                        ("new", "fever and cough for three days", (0, 0.4)),
                                        ("rash", "itchy rash on both forearms", (0, 0.1))])
    with open_db(path) as db:
        assert db.next_notes(3) == ["twin", "new", "rash"]
        db.decide("old", "ann", accept=["401.9"], done=True)
        assert db.next_notes(3)[0] == "new"     # twin repeats what ann just finished: it waits


def test_rarity_counts_as_much_as_uncertainty():
    unc, rare = np.array([1.0, 0.9, 0.8, 0.0]), np.array([0.0, 0.2, 0.1, 5.0])
    assert teach.pick(unc, rare, 1, weights=teach.Weights(1, 0, 0)) == [0]
    assert teach.pick(unc, rare, 1, weights=teach.Weights(0, 1, 0)) == [3]
    assert teach.pick(unc, rare, 1, weights=teach.Weights(1, 1, 0)) == [1]  # best on both ranks together


# ------------------------------------------------------------------------------------------------ the database
def test_next_notes_by_rule_or_arrival_skipping_claimed_and_done(tmp_path):
    path = _db(tmp_path / "r.sqlite", [("a", "stable hypertension, routine visit", (0.1, 0.0)),
                                        ("b", "acute decompensated heart failure", (3.0, 0.5)),
                                        ("c", "fever and cough for three days", (2.0, 0.2)),
                                        ("d", "old note queued before signals", None)])
    with open_db(path) as db:
        assert db.next_notes(4, order="arrival") == ["a", "b", "c", "d"]
        assert db.next_notes(4) == ["b", "c", "a", "d"]                  # teach is the default
        db.claim("b", "ann")
        assert db.next_notes(1, reviewer="bob") == ["c"]                 # ann holds b
        assert db.next_notes(1, reviewer="ann") == ["b"]                 # her own claim stays hers
        db.decide("c", "ann", accept=["401.9"], done=True)
        assert "c" not in db.next_notes(4, reviewer="bob")
        with pytest.raises(Exception, match="--order must be teach or arrival"):
            db.next_notes(1, order="random")


def test_review_next_prints_ids_and_refuses_a_bad_order(tmp_path):
    path = _db(tmp_path / "r.sqlite", [("a", "routine", (0.1, 0.0)), ("b", "unsure heart failure", (3.0, 0.5))])
    assert succeeds(["review", "next", "--db", path, "-n", "2"]).stdout.split() == ["b", "a"]
    assert succeeds(["review", "next", "--db", path, "--order", "arrival"]).stdout.split() == ["a"]
    fails(["review", "next", "--db", path, "--order", "best"], "--order must be teach or arrival")
    fails(["review", "next", "--db", path, "--count", "0"], "--count must be >= 1")


def test_queue_stores_each_notes_signals(tiny_run, tmp_path):
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(
        ["Hypertension and congestive heart failure. Acute kidney failure.", "Routine follow up, no complaints.",
         "Atrial fibrillation on coumadin, chest pain, pneumonia."])))
    db = tmp_path / "q.sqlite"
    succeeds(["review", "queue", "--checkpoint", tiny_run, "--input", notes, "--db", db])
    with open_db(db) as rdb:
        rows = rdb.read("SELECT note, uncertainty, rarity, checkpoint_sha256 FROM note_signals ORDER BY note")
        assert [r[0] for r in rows] == ["q0", "q1", "q2"]
        assert all(r[1] > 0 and r[2] >= 0 for r in rows)
        assert len({round(r[1], 6) for r in rows}) == 3           # each note its own uncertainty
        assert rows[0][3] == rdb.read("SELECT sha256 FROM models")[0][0]
        assert sorted(rdb.next_notes(3)) == ["q0", "q1", "q2"]


@pytest.mark.parametrize("version", [3, 4])
def test_a_database_of_the_previous_schema_opens_with_every_decision(tmp_path, version):
    path = tmp_path / f"v{version}.sqlite"
    with open_db(path, _target=version) as db:  # what clinicode wrote before #44 (4: today's, with #43)
        db.con.execute("INSERT INTO models (sha256, path, codes, first_used, system) VALUES (?, '/r', "
                       "'[[\"401.9\", \"Hypertension\"]]', '2026-01-01T00:00:00Z', 'ICD-9-CM')", (SHA,))
        for i in ("a", "b"):
            db.con.execute("INSERT INTO notes (id, text, status, queued_at) VALUES (?, 'text', 'pending', "
                           "'2026-01-01T00:00:00Z')", (i,))
            db.con.execute("INSERT INTO suggestions (note, checkpoint_sha256, checkpoint_path, code, description, "
                           "score, evidence, rank) VALUES (?, ?, '/r', '401.9', 'Hypertension', 0.7, '[]', 1)",
                           (i, SHA))
        db.con.execute("INSERT INTO decisions (note, code, action, reviewer, at) VALUES "
                       "('a', '401.9', 'accept', 'ann', '2026-01-02T00:00:00Z'), "
                       "('a', NULL, 'done', 'ann', '2026-01-02T00:00:00Z')")
        db.con.execute("UPDATE notes SET status = 'done' WHERE id = 'a'")
    with open_db(path) as db:
        assert db.con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        log = db.note("a")["log"]
        assert [(r["code"], r["action"], r["reviewer"]) for r in log] == [("401.9", "accept", "ann"),
                                                                           (None, "done", "ann")]
        assert db.stats()["overall"]["accepted"] == 1
        assert db.next_notes(2) == ["b"]


def test_a_long_queue_reads_only_the_candidates_texts():
    rng = np.random.default_rng(0)
    pool = [{"id": f"n{i}", "uncertainty": float(u), "rarity": float(r)}
            for i, (u, r) in enumerate(zip(rng.random(3000), rng.random(3000)))]
    asked: list[str] = []

    def text_of(ids):
        asked.extend(ids)
        topics = ["cardiac failure", "renal failure", "hepatic cirrhosis", "pulmonary embolism", "stroke aphasia",
                  "skin rash", "femur fracture"]
        return [f"patient with {topics[int(i[1:]) % 7]}" for i in ids]

    ranked = teach.order_notes(pool, 3000, text_of=text_of)
    assert sorted(ranked) == sorted(p["id"] for p in pool)                 # every note, once
    assert len(asked) == teach.CANDIDATES                                   # no more texts than the candidates
    topics = [int(i[1:]) % 7 for i in ranked[:7]]
    assert len(set(topics)) == 7                                            # alike notes spread out at the top
    w = teach.TEACH
    base = w.uncertainty * teach._ranks(np.array([p["uncertainty"] for p in pool])) + w.rarity * teach._ranks(
        np.array([p["rarity"] for p in pool]))
    tail = [int(i[1:]) for i in ranked[teach.DIVERSE:]]
    assert all(base[a] >= base[b] for a, b in zip(tail, tail[1:]))          # after the walk: by the signals


@pytest.mark.parametrize("nudge", [1e-9, -1e-9, 3e-7, -3e-7])
def test_a_near_tie_goes_to_arrival_order_whatever_the_cpu_rounding(nudge):
    """Two notes alike but for floating-point noise in their signals (scores differ in their last bits from one CPU to
    another): the earlier note comes first, whichever way the noise went."""
    texts = {"e0": "chest pain and fever", "e1": "chest pain and fever", "x": "ankle fracture"}
    pool = [{"id": "e0", "uncertainty": 0.0, "rarity": 0.72},
            {"id": "e1", "uncertainty": 0.0, "rarity": 0.72 + nudge},
            {"id": "x", "uncertainty": 0.0, "rarity": 0.10}]
    ranked = teach.order_notes(pool, 3, text_of=lambda ids: [texts[i] for i in ids])
    assert ranked[0] == "e0"
    assert ranked == teach.order_notes(pool, 3, text_of=lambda ids: [texts[i] for i in ids])   # and every call alike
    # a real difference still decides, whichever note arrived first
    pool[1]["rarity"] = 0.80
    assert teach.order_notes(pool, 1, text_of=lambda ids: [texts[i] for i in ids]) == ["e1"]


def test_ranks_tie_values_within_noise_but_keep_real_differences():
    r = teach._ranks(np.array([0.5, 0.5 + 1e-9, 0.5 - 1e-9, 0.9, 0.1]))
    assert r[0] == r[1] == r[2]
    assert r[4] < r[0] < r[3]
    assert teach._first_best(np.array([0.3, 0.7 - 1e-9, 0.7, 0.7 + 1e-9])) == 1
