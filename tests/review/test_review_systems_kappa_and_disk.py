"""The review queue (#51, #52): one test per finding. Kappa per pair of coders and per note's own codes, coders' time
without adjudications, nothing of a blind note shown to its coder, per-code note counts, a full or failing disk named
as such, code systems checked before anything is rescored or built, retrain's advice and files, `review show`. Each
refused case exits with status 1 and one line. Synthetic notes only."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score
from test_double_coding import CODES, SHA, _code, _db
from test_review import _fake_db

from clinicode.cli import app
from clinicode.review import open_db
from clinicode.review.audit import adjudicate, agreement, assign, work_times

from helpers import fails, runner, snapshot, succeeds

# ------------------------------------------------------------------------------------------------ 8. kappa per pair
ANN = {"n00": {"401.9"}, "n01": {"401.9", "427.31"}, "n02": {"428.0"}, "n03": set(), "n04": {"401.9", "428.0"}}
BOB = {"n00": {"401.9"}, "n01": {"401.9"}, "n02": {"428.0", "427.31"}, "n03": {"401.9"}, "n04": {"401.9", "428.0"}}
OTHER = ["584.9", "486", "250.00"]  # what the unrelated pair codes, on notes of their own


def _pair(path: Path, notes: dict, other: dict, coders: list[str], t0: float) -> None:
    with open_db(path) as db:
        assign(db, sorted(notes), coders)
        for i, n in enumerate(sorted(notes)):
            db.claim(n, coders[0], now=t0 + i)
            _code(db, n, coders[0], notes[n], now=t0 + i + 4)
            db.claim(n, coders[1], now=t0 + i)
            _code(db, n, coders[1], other[n], now=t0 + i + 6)


def _sk(notes: list[str], first: dict, second: dict, codes: dict[str, set[str]] | list[str]) -> float:
    """scikit-learn's kappa over NOTES x CODES (a list: the same codes on every note; a dict: each note's own)."""
    x, y = [], []
    for n in notes:
        for c in sorted(codes[n] if isinstance(codes, dict) else codes):
            x.append(int(c in first[n]))
            y.append(int(c in second[n]))
    return cohen_kappa_score(x, y)


def test_a_pairs_kappa_uses_only_that_pairs_notes_and_codes(tmp_path):
    path = _db(tmp_path / "r.sqlite", 20)
    _pair(path, ANN, BOB, ["ann", "bob"], 1000.0)
    notes = sorted(ANN)
    named = {n: ANN[n] | BOB[n] | set(CODES[:2]) for n in notes}   # coders' codes and the model's suggestions
    codes = sorted(set().union(*named.values()))
    with open_db(path) as db:
        alone = agreement(db)
    assert alone["per_coder"]["ann"]["kappa_with_other"] == pytest.approx(_sk(notes, ANN, BOB, codes))
    # an unrelated pair codes 10 other notes with other codes: ann's and bob's figures do not move
    cy = {f"n{i:02d}": {OTHER[i % 3]} for i in range(10, 20)}
    dan = {f"n{i:02d}": {OTHER[i % 3], OTHER[(i + 1) % 3]} if i % 2 else {OTHER[i % 3]} for i in range(10, 20)}
    _pair(path, cy, dan, ["cy", "dan"], 5000.0)
    with open_db(path) as db:
        a = agreement(db)
    for me in ("ann", "bob"):
        assert a["per_coder"][me]["kappa_with_other"] == pytest.approx(alone["per_coder"][me]["kappa_with_other"])
        assert a["per_coder"][me]["notes"] == 5 and a["per_coder"][me]["codes"] == len(codes)
    ab = next(p for p in a["per_pair"] if p["coders"] == ["ann", "bob"])
    assert ab["notes"] == 5 and ab["kappa"] == pytest.approx(_sk(notes, ANN, BOB, codes))
    assert ab["kappa_note_codes"] == pytest.approx(_sk(notes, ANN, BOB, named))
    cd = next(p for p in a["per_pair"] if p["coders"] == ["cy", "dan"])
    other_notes = sorted(cy)
    other_codes = sorted(set().union(*cy.values(), *dan.values(), CODES[:2]))
    assert cd["kappa"] == pytest.approx(_sk(other_notes, cy, dan, other_codes))
    assert a["per_coder"]["cy"]["kappa_with_other"] == pytest.approx(_sk(other_notes, cy, dan, other_codes))


def test_overall_kappa_says_which_it_is_and_gives_the_per_note_variant(tmp_path):
    path = _db(tmp_path / "r.sqlite", 5)
    _pair(path, ANN, BOB, ["ann", "bob"], 1000.0)
    notes = sorted(ANN)
    named = {n: ANN[n] | BOB[n] | set(CODES[:2]) for n in notes}
    every = sorted(set().union(*named.values()))
    with open_db(path) as db:
        a = agreement(db)
    assert a["overall_kappa"] == pytest.approx(_sk(notes, ANN, BOB, every))           # every note x every code
    assert a["overall_kappa_note_codes"] == pytest.approx(_sk(notes, ANN, BOB, named))  # each note's own codes
    js = json.loads(succeeds(["review", "agreement", "--db", path, "--json"]).stdout)
    assert js["overall_kappa_note_codes"] == pytest.approx(a["overall_kappa_note_codes"])
    text = succeeds(["review", "agreement", "--db", path]).stdout
    assert f"{a['overall_kappa']:5.2f} over every note x every named code" in text
    assert f"{a['overall_kappa_note_codes']:5.2f} over each note's own codes" in text


# ------------------------------------------------------------------------------------------------ #52: time per note
def test_time_per_note_counts_coders_finishing_not_adjudications(tmp_path):
    from clinicode.review.audit import median_time

    path = _db(tmp_path / "r.sqlite", 5)
    _pair(path, ANN, BOB, ["ann", "bob"], 1000.0)         # ann 4 s a note, bob 6 s
    with open_db(path) as db:
        for n in sorted(ANN):
            adjudicate(db, n, "cy", sorted(ANN[n]), now=9000.0)
        times = work_times(db)
    assert {t["role"] for t in times if t["reviewer"] == "cy"} == {"adjudicator"}
    assert median_time(times) == {"median_seconds": 6.0, "finished": 10}   # 5 x 4 s and 5 x 6 s; no 0 s rulings
    js = json.loads(succeeds(["review", "agreement", "--db", path, "--json"]).stdout)
    assert js["time_per_note"] == {"median_seconds": 6.0, "finished": 10}
    text = succeeds(["review", "agreement", "--db", path]).stdout
    assert "median 6 s over 10 finished codings (adjudications not counted)" in text


# ------------------------------------------------------------------------------------------------ #52: blind coders
def test_a_blind_coder_sees_nothing_of_the_other_coder_before_adjudication(tmp_path):
    path = _db(tmp_path / "r.sqlite", 5)
    _pair(path, ANN, BOB, ["ann", "bob"], 1000.0)
    with open_db(path) as db:
        all_decisions = db.stats()["checkpoints"][SHA]["decisions"]
        ann_decisions = db.read("SELECT COUNT(*) FROM decisions WHERE reviewer = 'ann' AND code IS NOT NULL")[0][0]
    js = json.loads(succeeds(["review", "stats", "--db", path, "--json", "--reviewer", "ann"]).stdout)
    assert js["checkpoints"][SHA]["decisions"] == ann_decisions < all_decisions
    a = json.loads(succeeds(["review", "agreement", "--db", path, "--json", "--reviewer", "ann"]).stdout)
    assert a["notes"] == 0 and a["blind_notes"] == 5 and a["per_code"] == {} and a["per_coder"] == {}
    assert {t["reviewer"] for t in a["time"]} == {"ann"}
    # the coordinator (no --reviewer) sees everything; once adjudicated, so does ann
    assert json.loads(succeeds(["review", "agreement", "--db", path, "--json"]).stdout)["notes"] == 5
    with open_db(path) as db:
        for n in sorted(ANN):
            adjudicate(db, n, "cy", sorted(ANN[n]))
    a = json.loads(succeeds(["review", "agreement", "--db", path, "--json", "--reviewer", "ann"]).stdout)
    assert a["notes"] == 5 and a["blind_notes"] == 0 and {t["reviewer"] for t in a["time"]} == {"ann", "bob", "cy"}
    js = json.loads(succeeds(["review", "stats", "--db", path, "--json", "--reviewer", "ann"]).stdout)
    assert js["checkpoints"][SHA]["decisions"] > ann_decisions


# ------------------------------------------------------------------------------------------------ 16. stats per code
def test_stats_per_code_counts_the_notes_each_code_was_decided_on(tmp_path):
    db = _fake_db(tmp_path / "r.sqlite", n=3)
    with open_db(db) as rdb:
        rdb.decide("n0", "ann", accept=["401.9", "428.0"], reject=["427.31"], add=["584.9"], done=True)
        rdb.decide("n1", "ann", accept=["401.9"], reject=["428.0", "427.31"], done=True)
        rdb.decide("n2", "ann", accept=["401.9"])  # not finished: not counted
    per_code = json.loads(succeeds(["review", "stats", "--db", db, "--json"]).stdout)["per_code"]
    assert {c: v["notes"] for c, v in per_code.items()} == {"401.9": 2, "427.31": 2, "428.0": 2, "584.9": 1}


# ------------------------------------------------------------------------------------------------ 13. a full disk
def _sqlite_error(code: int, text: str) -> sqlite3.OperationalError:
    err = sqlite3.OperationalError(text)
    err.sqlite_errorcode = code
    return err


@pytest.mark.parametrize("code, text", [(13, "database or disk is full"), (10 | (19 << 8), "disk I/O error")])
def test_a_full_or_failing_disk_is_named_and_the_database_is_not_blamed(tmp_path, monkeypatch, code, text):
    import clinicode.review.store.opening as opening

    db = _fake_db(tmp_path / "r.sqlite")
    before = snapshot(tmp_path)

    def full(*args, **kw):  # what SQLite says when the disk filled up under it (the -shm or a page write failed)
        raise _sqlite_error(code, text)

    monkeypatch.setattr(opening, "check_readable", full)
    monkeypatch.setattr(opening, "migrate", full)
    for args in (["review", "stats"], ["review", "next"], ["review", "decide", "--id", "n0", "--reviewer", "ann",
                                                           "--accept", "401.9"]):
        line = fails([*args, "--db", db], "free some space").stderr
        assert "intact" in line and f"disk holding {tmp_path}" in line, line
        assert "check the file" not in line and "pass a new --db" not in line and "damaged" not in line, line
    assert snapshot(tmp_path) == before



# ------------------------------------------------------------------------------------------------ 7, 14, 15: systems
ICD10_OF = ["I10", "I50.9", "I48.91", "N17.9", "J18.9"]


@pytest.fixture(scope="module")
def runs(demo_data, tmp_path_factory):
    """tfidf-lr runs (seconds to train) on the demo data, in ICD-9-CM, and in ICD-10-CM with its codes mapped."""
    import pandas as pd

    root = tmp_path_factory.mktemp("systems")
    icd10 = root / "data10"
    icd10.mkdir()
    for split in ("train", "dev", "test"):
        df = pd.read_parquet(demo_data / f"{split}.parquet")
        (icd10 / f"{split}.jsonl").write_text("".join(
            json.dumps({"id": str(i), "text": t, "labels": sorted({ICD10_OF[sum(map(ord, c)) % 5] for c in lab})})
            + "\n" for i, t, lab in zip(df["id"], df["text"], df["labels"])))
    out = {}
    for name, data in (("icd9", demo_data), ("icd10", icd10)):
        out[name] = root / f"run_{name}"
        succeeds(["train", "--data", data, "--out", out[name], "--model", "tfidf-lr", "--device", "cpu",
                  "--no-progress"])
    return out, icd10


def _queued(run: Path, demo_data: Path, tmp_path: Path, n: int = 6, done: int = 3) -> Path:
    """N demo test notes queued with RUN; the first DONE decided (suggestions kept) and finished."""
    import pandas as pd

    df = pd.read_parquet(demo_data / "test.parquet").head(n)
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"id": f"new{i}", "text": t}) + "\n" for i, t in enumerate(df["text"])))
    db = tmp_path / "r.sqlite"
    succeeds(["review", "queue", "--checkpoint", run, "--input", notes, "--db", db])
    with open_db(db) as rdb:
        for i in range(done):
            codes = [s["code"] for s in rdb.note(f"new{i}")["suggestions"]]
            rdb.decide(f"new{i}", "ann", accept=codes, add=[] if codes else ["401.9"], done=True)
    return db


def test_rescore_or_queue_with_a_checkpoint_of_another_code_system_is_refused(runs, demo_data, tmp_path):
    (run, _), notes = runs, tmp_path / "notes.jsonl"
    db = _queued(run["icd9"], demo_data, tmp_path)
    before = snapshot(tmp_path)
    for cmd in (["rescore"], ["queue", "--input", notes]):
        line = fails(["review", *cmd, "--checkpoint", run["icd10"], "--db", db],
                     f"review {cmd[0]} --checkpoint {run['icd10'] / 'checkpoint'}: it codes in ICD-10-CM/PCS, but "
                     f"the queue in {db} holds notes scored in ICD-9-CM").stderr
        assert "nothing was changed" in line
    assert snapshot(tmp_path) == before
    assert "rescored" in succeeds(["review", "rescore", "--checkpoint", run["icd9"], "--db", db]).stdout


def test_retrain_checks_the_datas_code_system_first_and_leaves_no_data_behind(runs, demo_data, tmp_path, monkeypatch):
    (run, icd10) = runs
    db = _queued(run["icd9"], demo_data, tmp_path)
    out = tmp_path / "W" / "x"
    fails(["review", "retrain", "--checkpoint", run["icd9"], "--data", icd10, "--out", out, "--db", db],
          f"--data {icd10} holds ICD-10-CM/PCS codes, but --checkpoint {run['icd9']} codes in ICD-9-CM")
    assert not out.exists()
    # a failure after the data was written (here: in training) removes it, and the run folder this command made
    import clinicode.train
    from clinicode.errors import ConfigError

    def broken(**kw):
        assert (out / "data" / "train.jsonl").is_file()
        raise ConfigError("training failed")

    def failed_in_training() -> None:  # the data's line, then the one error line
        res = runner().invoke(app, [str(a) for a in ["review", "retrain", "--checkpoint", run["icd9"], "--data",
                                                       demo_data, "--out", out, "--db", db]])
        assert res.exit_code == 1 and res.stderr.strip().splitlines()[-1] == "error: training failed", res.stderr

    monkeypatch.setattr(clinicode.train, "retrain", broken)
    failed_in_training()
    assert not out.exists()
    out.mkdir(parents=True)                                   # a folder of the user's: kept, but not the data
    failed_in_training()
    assert out.is_dir() and not (out / "data").exists()


def test_retrain_writes_owner_only_files_and_never_advises_an_option_it_lacks(runs, demo_data, tmp_path):
    import stat

    (run, _) = runs
    db = _queued(run["icd9"], demo_data, tmp_path)
    out = tmp_path / "r1"
    succeeds(["review", "retrain", "--checkpoint", run["icd9"], "--data", demo_data, "--out", out, "--db", db])
    loose = [str(p.relative_to(out)) for p in [out, *out.rglob("*")] if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert loose == []                                        # data/manifest.json was 0644
    assert stat.S_IMODE((out / "data" / "manifest.json").stat().st_mode) == 0o600
    line = fails(["review", "retrain", "--checkpoint", run["icd9"], "--data", demo_data, "--out", out, "--db", db],
                 f"--out {out} already holds a run").stderr
    assert "--resume" not in line and "choose a new --out folder" in line


# ------------------------------------------------------------------------------------------------ 10, 11: note files
def _predict(run: Path, src: Path) -> list:
    return ["predict", "--checkpoint", run, "--input", src, "--output", "-", "--device", "cpu", "--no-progress"]


def test_a_repeated_header_saved_with_a_bom_is_a_bad_record_in_every_reader(tiny_run, tmp_path):
    from clinicode.format_streams import Upload
    from clinicode.records import read_records

    joined = b"id,text\na,heart failure\nb,renal failure\n" + b"\xef\xbb\xbfid,text\nc,sepsis\n"  # cat a.csv b.csv
    (tmp_path / "ab.csv").write_bytes(joined)
    for source in (tmp_path / "ab.csv", Upload("ab.csv", joined)):
        recs = list(read_records(source))
        assert [r.id for r in recs] == ["a", "b", "row-3", "c"]
        assert "a repeated header row" in recs[2].error and recs[2].text is None
    res = succeeds(["review", "queue", "--checkpoint", tiny_run, "--input", tmp_path / "ab.csv", "--db",
                    tmp_path / "r.sqlite"])
    assert "queued 3 notes" in res.stdout and "1 bad records" in res.stdout and "repeated header" in res.stderr
    out = [json.loads(line) for line in succeeds(_predict(tiny_run, tmp_path / "ab.csv")).stdout.splitlines()]
    assert [r["id"] for r in out] == ["a", "b", "row-3", "c"] and "predicted" not in out[2]


def test_nullable_integer_parquet_ids_with_a_null_are_read_like_any_other(tiny_run, tmp_path):
    import pandas as pd

    from clinicode.records import read_records

    src = tmp_path / "notes.parquet"
    pd.DataFrame({"id": pd.array([1, None, 3], dtype="Int64"),
                  "text": pd.array(["heart failure", "renal failure", None], dtype="string")}).to_parquet(src)
    recs = list(read_records(src))
    assert [r.id for r in recs] == ["1", "row-2", "3"]        # as docs/predict.md says: 1, 3, and row-N
    assert recs[2].error == "note '3': missing text"           # a null text: a bad record, not 'NAType'
    res = succeeds(["review", "queue", "--checkpoint", tiny_run, "--input", src, "--db", tmp_path / "r.sqlite"])
    assert "queued 2 notes" in res.stdout and "1 bad records" in res.stdout
    out = [json.loads(line) for line in succeeds(_predict(tiny_run, src)).stdout.splitlines()]
    assert [r["id"] for r in out] == ["1", "row-2", "3"] and "missing text" in out[2]["error"]


# ------------------------------------------------------------------------------------------------ #52: review show
def test_review_show_gives_a_notes_suggestions_and_decisions_without_its_text(tmp_path):
    from helpers import SECRET

    db = _fake_db(tmp_path / "r.sqlite", n=2)
    with open_db(db) as rdb:
        rdb.decide("n0", "ann", accept=["401.9"], reject=["427.31"], add=["584.9"], evidence={"584.9": [(0, 7)]})
    res = succeeds(["review", "show", "--db", db, "--id", "n0", "--json"])
    n = json.loads(res.stdout)
    assert SECRET not in res.stdout and "text" not in n
    assert [(s["code"], s["rank"], s["source"]) for s in n["suggestions"]] == [
        ("401.9", 1, "model"), ("428.0", 2, "model"), ("427.31", 3, "model")]
    assert n["suggestions"][0]["score"] == pytest.approx(0.9)
    assert n["suggestions"][0]["evidence"] == [{"start": 13, "end": 25, "weight": 1.0}]
    assert n["state"] == {"401.9": "accept", "427.31": "reject", "584.9": "add"} and not n["blind"]
    assert [(r["reviewer"], r["action"], r["code"], r["source"], r["spans"]) for r in n["log"]] == [
        ("ann", "accept", "401.9", "model", None), ("ann", "reject", "427.31", "model", None),
        ("ann", "add", "584.9", "person", [[0, 7]])]
    text = succeeds(["review", "show", "--db", db, "--id", "n0"]).stdout
    assert "ann: add 584.9 (person) spans 0:7" in text and "   1 401.9         0.900 model  13:25" in text
    assert SECRET not in text
    fails(["review", "show", "--db", db, "--id", "zz"], "no note 'zz'")


def test_review_show_marks_a_suggestion_scored_from_the_terminology(tmp_path):
    """A predicted code no training note carried (`source` "terminology": `train --terminology`) is stored so and
    shown so, in JSON and text, where the coder looks; the other suggestions are not marked."""
    path = tmp_path / "r.sqlite"
    rec = {"predicted": [{"code": "401.9", "description": "HTN", "score": 0.9},
                         {"code": "C6", "description": "Dorvic myalgia", "score": 0.7, "source": "terminology"}],
           "evidence": {"spans": [], "codes": {}}}
    with open_db(path) as rdb:
        rdb.add_model("f" * 64, "/runs/terms", [("401.9", "HTN"), ("C6", "Dorvic myalgia")])
        rdb.add_notes([("n0", "a note", rec)], sha256="f" * 64, checkpoint="/runs/terms")
        assert [(s["code"], s["terminology"]) for s in rdb.note("n0")["suggestions"]] == [("401.9", False),
                                                                                          ("C6", True)]
    n = json.loads(succeeds(["review", "show", "--db", path, "--id", "n0", "--json"]).stdout)
    assert [(s["code"], s["source"], s["terminology"]) for s in n["suggestions"]] == [
        ("401.9", "model", False), ("C6", "model", True)]
    rows = {line.split()[1]: line for line in succeeds(["review", "show", "--db", path, "--id", "n0"]).stdout
            .splitlines() if line[:4].strip().isdigit()}
    assert rows["C6"].endswith(" (from the terminology)") and "terminology" not in rows["401.9"], rows


def test_a_version_6_file_migrates_its_suggestions_unmarked(tmp_path):
    path = tmp_path / "v6.sqlite"
    with open_db(path, _target=6) as rdb:              # what clinicode wrote before the terminology's mark
        rdb.con.execute("INSERT INTO notes (id, text, status, queued_at) VALUES ('a', 'text', 'pending', "
                        "'2026-01-01T00:00:00Z')")
        rdb.con.execute("INSERT INTO suggestions (note, checkpoint_sha256, checkpoint_path, code, description, "
                        "score, evidence, rank) VALUES ('a', ?, '/r', '401.9', 'HTN', 0.7, '[]', 1)", ("f" * 64,))
    with open_db(path) as rdb:
        assert rdb.con.execute("PRAGMA user_version").fetchone()[0] == 7
        assert [(s["code"], s["terminology"]) for s in rdb.note("a")["suggestions"]] == [("401.9", False)]


def test_review_show_keeps_a_blind_coder_blind(tmp_path):
    path = _db(tmp_path / "r.sqlite", 5)
    _pair(path, ANN, BOB, ["ann", "bob"], 1000.0)

    def show(*who: str) -> dict:
        return json.loads(succeeds(["review", "show", "--db", path, "--id", "n01", "--json", *who]).stdout)

    ann, bob, nobody = show("--reviewer", "ann"), show("--reviewer", "bob"), show()
    assert ann["blind"] and {r["reviewer"] for r in ann["log"]} == {"ann"} and list(ann["assigned"]) == ["ann"]
    assert ann["state"] == {"401.9": "accept", "428.0": "reject", "427.31": "add"}
    assert {r["reviewer"] for r in bob["log"]} == {"bob"} and bob["state"] == {"401.9": "accept", "428.0": "reject"}
    assert nobody["log"] == [] and nobody["assigned"] == {} and nobody["coders"] == ["ann", "bob"]
    text = succeeds(["review", "show", "--db", path, "--id", "n01"]).stdout
    assert "double coded by ann and bob (blind)" in text and "none shown: blind until adjudicated" in text
    with open_db(path) as db:
        adjudicate(db, "n01", "cy", ["401.9"])
    after = show("--reviewer", "ann")
    assert not after["blind"] and {r["reviewer"] for r in after["log"]} == {"ann", "bob", "cy"}
    assert set(after["assigned"]) == {"ann", "bob"}
