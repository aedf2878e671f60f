"""Suggestions from the whole code system (#43): codes a checkpoint lacks, suggested when their title stands in the
note, ranked with the note's words, the hierarchy and the model's scores; shown as `suggested`, outside `predicted`,
in every output format (JSONL, CSV, FHIR)."""

from __future__ import annotations

import csv
import json

import pytest

from clinicode.codes.suggest import BAR, Suggester, norm
from clinicode.predict import Predictor

from helpers import fails, succeeds

NOTE = "Patient with air embolism after the line was placed; hypertension and acute renal failure noted."


@pytest.fixture(scope="module")
def titles(tiny_run, tmp_path_factory):
    trained = Predictor.from_checkpoint(tiny_run, device="cpu").codes
    own = trained[0]
    path = tmp_path_factory.mktemp("titles") / "titles.tsv"
    path.write_text(f"999.1\tAir embolism\n{own}\tEmbolism air (the checkpoint's own code)\n"
                    "584.5\tAcute kidney failure with lesion of tubular necrosis\n584.8\tAcute renal failure\n"
                    "998.0\tFailure, placed line\nE000\tOf the\n", encoding="utf-8")
    return path, own


# ------------------------------------------------------------------ the ranking (pure text, no checkpoint)
def test_a_title_counts_as_a_phrase_with_unspecified_and_nos_optional():
    s = Suggester({"R07.9": "Chest pain, unspecified", "R10.9": "Unspecified abdominal pain",
                   "R51": "Headache NOS"})
    assert [x.code for x in s.suggest("Seen for chest pain since Monday.")] == ["R07.9"]
    note = "abdominal pain and a headache"
    assert {x.code for x in s.suggest(note)} == {"R10.9", "R51"}
    [got] = s.suggest("Seen for chest pain since Monday.")
    assert got.spans == ((9, 19),) and got.reason == "title in the note" and got.score >= BAR


def test_scattered_title_words_are_not_suggested_but_inverted_titles_and_spelling_variants_are():
    s = Suggester({"D1": "Diabetes Insipidus, Nephrogenic", "D2": "Pain, Chest", "D3": "Hypokalemia",
                   "D4": "Brain Neoplasms", "D5": "Graft vs Host Disease"})
    assert s.suggest("pain in the left side of the chest") == []          # every word, never as a phrase
    assert [x.code for x in s.suggest("a case of nephrogenic diabetes insipidus")] == ["D1"]
    assert [x.code for x in s.suggest("marked hypokalaemia")] == ["D3"]    # British spelling
    assert [x.code for x in s.suggest("two brain tumours")] == ["D4"]      # plural, British, tumour = neoplasm
    assert [x.code for x in s.suggest("acute graft-versus-host disease")] == ["D5"]
    assert norm("metastases") == norm("metastasis") and norm("abscess") == "abscess"


def test_a_title_inside_a_longer_title_found_there_is_not_suggested():
    s = Suggester({"S": "Syndrome", "N": "Neuroleptic Malignant Syndrome"}, own={"K": "Renal failure, acute"})
    assert [x.code for x in s.suggest("neuroleptic malignant syndrome after haloperidol")] == ["N"]
    both = Suggester({"R": "Renal Failure"}, own={"K": "Acute Renal Failure"})
    assert both.suggest("acute renal failure") == []                     # the checkpoint's own code covers it
    assert [x.code for x in both.suggest("renal failure, chronic")] == ["R"]


def test_broad_titles_rank_below_specific_ones():
    many = {f"H{i}": f"Hepatitis {w}" for i, w in enumerate(["A", "B", "C", "D", "E", "Viral", "Toxic", "Chronic",
                                                             "Autoimmune", "Alcoholic", "Animal", "Lupoid"])}
    s = Suggester({"H": "Hepatitis", **many, "P": "Polymyositis"})
    got = s.suggest("hepatitis and polymyositis")
    assert [x.code for x in got] == ["P", "H"] and got[0].score - got[1].score > 0.8
    assert s.narrower("H") == 11 and s.narrower("P") == 0                # "Hepatitis A": "a" is a stop word


def test_a_trained_code_under_a_candidate_that_scores_high_drops_it():
    """What the model knows: when the checkpoint scores a code under the candidate (MeSH tree numbers), the model
    already names the specific concept."""
    tree = {"D1": ("C06.552",), "K1": ("C06.552.380",), "D2": ("C10.228",)}
    s = Suggester({"D1": "Hepatitis", "D2": "Brain Diseases"}, own={"K1": "Liver injury, drug induced"}, tree=tree)
    assert s.trained_below("D1") == ("K1",) and s.trained_below("D2") == ()
    note = "hepatitis and brain diseases"
    assert {x.code for x in s.suggest(note, {"K1": 0.0})} == {"D1", "D2"}
    assert {x.code for x in s.suggest(note, {"K1": 0.9})} == {"D2"}
    icd = Suggester({"428": "Heart failure"}, own={"428.0": "Congestive heart failure, unspecified"})
    assert icd.trained_below("428") == ("428.0",)                        # ICD: a longer code of the stem


# ------------------------------------------------------------------ predict
def test_suggestions_are_the_untrained_codes_whose_title_stands_in_the_note(tiny_run, titles):
    path, own = titles
    from clinicode.codes.icd9 import load_descriptions_tsv

    plain = Predictor.from_checkpoint(tiny_run, device="cpu")
    with_titles = Predictor.from_checkpoint(tiny_run, device="cpu", titles=load_descriptions_tsv(path))
    [a] = plain.predict([NOTE], threshold=0.0, top_k=None)
    [b] = with_titles.predict([NOTE], threshold=0.0, top_k=None)
    got = {m.code: m for m in b.suggested}
    # the checkpoint's own code is the model's; 584.5's words are missing; 998.0's words are there, not as a phrase
    assert set(got) == {"999.1", "584.8"}
    assert [NOTE[s:e] for s, e in got["584.8"].spans] == ["acute renal failure"]
    # not predictions: the model's codes, scores and threshold logic are untouched
    assert [(c.code, c.score) for c in b.predicted] == [(c.code, c.score) for c in a.predicted]
    assert b.scores == a.scores and not set(got) & {c.code for c in b.predicted}
    rec = b.to_dict()
    first = next(x for x in rec["suggested"] if x["code"] == "584.8")
    assert first == {"code": "584.8", "title": "Acute renal failure", "score": pytest.approx(got["584.8"].score,
                                                                                                abs=1e-4),
                     "spans": [{"start": NOTE.index("acute"), "end": NOTE.index(" noted")}], "source": "title",
                     "reason": "title in the note"}
    assert plain.suggester is None and "suggested" not in a.to_dict()  # ICD-9 ships no titles: nothing to suggest
    [none] = with_titles.predict(["hypertension only"])
    assert none.suggested == [] and none.to_dict()["suggested"] == []


def test_an_icd10_checkpoint_suggests_from_every_billable_icd10_cm_code_by_default(tmp_path, monkeypatch):
    notes = {"I10": "essential hypertension on lisinopril", "E11.9": "type 2 diabetes on metformin",
             "J18.9": "pneumonia with cough and fever"}
    rows = [{"id": f"{c}-{i}", "text": f"{t} visit {i}", "labels": [c]} for i in range(6) for c, t in notes.items()]
    data = tmp_path / "icd10"
    data.mkdir()
    for part, sl in (("train", slice(0, 12)), ("dev", slice(12, 18))):
        (data / f"{part}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[sl]), encoding="utf-8")
    succeeds(["train", "--data", data, "--out", tmp_path / "run", "--model", "tfidf-lr", "--no-progress"])
    import clinicode.codes.suggest as suggest_module

    reads, original = [], suggest_module.system_titles
    monkeypatch.setattr(suggest_module, "system_titles", lambda system: reads.append(system) or original(system))
    pred = Predictor.from_checkpoint(tmp_path / "run", device="cpu")
    pred.score(["essential hypertension"])                                # scoring alone (evaluate, training's dev)
    assert reads == []                                                    # never reads or indexes the 74,736 titles
    assert pred.suggester is not None and len(pred.suggester) > 70_000
    assert len(reads) == 1 and pred.suggester is pred.suggester           # built once, on first use
    text = "Essential hypertension. Chest pain, unspecified; acute kidney failure noted."
    [rec] = pred.predict([text])
    assert {s.code for s in rec.suggested} >= {"R07.9", "N17.9"}
    assert "I10" not in {s.code for s in rec.suggested}                   # its own code is the model's to predict
    [off] = Predictor.from_checkpoint(tmp_path / "run", device="cpu", suggest=False).predict([text])
    assert off.suggested is None


def test_cli_predict_writes_suggested_in_jsonl_csv_and_fhir(tiny_run, titles, tmp_path):
    path, own = titles
    notes = tmp_path / "notes.jsonl"
    notes.write_text(json.dumps({"id": "n1", "text": NOTE}) + "\n" + json.dumps({"id": "n2", "text": "   "}) + "\n",
                     encoding="utf-8")
    base = ["predict", "--checkpoint", tiny_run, "--input", notes, "--titles", path, "--device", "cpu",
            "--no-progress"]
    succeeds([*base, "--output", tmp_path / "out.jsonl"])
    recs = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {m["code"] for m in recs[0]["suggested"]} == {"584.8", "999.1"}
    assert not {m["code"] for m in recs[0]["suggested"]} & {p["code"] for p in recs[0]["predicted"]}
    assert "suggested" not in recs[1] and recs[1]["error"]                 # a bad record stays an error record

    succeeds([*base, "--output", tmp_path / "out.csv"])
    rows = list(csv.DictReader((tmp_path / "out.csv").open(encoding="utf-8")))
    assert set(rows[0]["suggested"].split(";")) == {"584.8", "999.1"} and rows[1]["suggested"] == ""

    succeeds([*base, "--output", tmp_path / "out.ndjson", "--format", "fhir"])
    [bundle, _] = [json.loads(line) for line in (tmp_path / "out.ndjson").read_text(encoding="utf-8").splitlines()]
    coded = [e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] in ("Condition", "Procedure")]
    tagged = [c for c in coded if any(t["code"] == "suggested-from-title" for t in c["meta"]["tag"])]
    assert {c["code"]["coding"][0]["code"] for c in tagged} == {"584.8", "999.1"}
    assert len(coded) == len(tagged) + len(recs[0]["predicted"])          # predicted codes stay untagged
    for c in tagged:
        assert c["verificationStatus"]["coding"][0]["code"] == "unconfirmed"
        assert c["code"]["coding"][0]["system"] == "http://hl7.org/fhir/sid/icd-9-cm"
        urls = {x["url"].rsplit("/", 1)[1] for x in c["extension"]}
        assert "suggested-from-title" in urls and "score" not in urls     # no model score for a title's code


def test_cli_predict_refuses_a_titles_file_without_new_codes_and_titles_without_suggestions(tiny_run, titles,
                                                                                          tmp_path):
    path, own = titles
    notes = tmp_path / "notes.jsonl"
    notes.write_text(json.dumps({"id": "n1", "text": NOTE}) + "\n", encoding="utf-8")
    only_own = tmp_path / "own.tsv"
    only_own.write_text(f"{own}\tSomething\n", encoding="utf-8")
    base = ["predict", "--checkpoint", tiny_run, "--input", notes, "--device", "cpu"]
    fails([*base, "--output", tmp_path / "o2.jsonl", "--titles", only_own],
          "no code with a title outside the checkpoint's")
    fails([*base, "--output", tmp_path / "o3.jsonl", "--titles", tmp_path / "missing.tsv"],
          "cannot read code descriptions")
    fails([*base, "--output", tmp_path / "o4.jsonl", "--titles", path, "--no-suggest"], "drop them or --no-suggest")


# ------------------------------------------------------------------ matching that survives clinical language (#51)
def _lines_run(fn) -> int:
    """Lines of clinicode/codes/suggest.py executed by fn(): a measure of the suggester's work that no clock sways."""
    import sys

    import clinicode.codes.suggest as suggest

    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == suggest.__file__ else None

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def test_the_suggesters_work_grows_linearly_with_the_note():
    """#51 item 4: every occurrence of a title was compared with every other (a 199 KB note held a service 115 s).
    Four times the note is about four times the work, not sixteen."""
    s = Suggester({"A": "Renal failure", "B": "Acute renal failure", "C": "Chronic renal failure", "D": "Failure",
                   "E": "Renal failure, acute", "F": "Kidney"}, own={"K": "Acute kidney failure"})
    block = "acute renal failure, then chronic renal failure; renal failure with acute kidney failure. "
    short, long_ = block * 40, block * 160
    s.suggest(long_)                                    # words' normal forms cached: only the matching is counted
    ratio = _lines_run(lambda: s.suggest(long_)) / _lines_run(lambda: s.suggest(short))
    assert ratio < 5.0, ratio
    assert [x.code for x in s.suggest(short)] == [x.code for x in s.suggest(long_)] == ["C", "B", "E"]


def test_negated_findings_are_not_suggested():
    """#51 item 17: "denies chest pain, fever or cough. No nausea." suggested R11.0, R07.9 and R05.9."""
    s = Suggester({"R11.0": "Nausea", "R07.9": "Chest pain, unspecified", "R05.9": "Cough, unspecified"})
    assert s.suggest("Review of systems: denies chest pain, fever or cough. No nausea.") == []
    assert {x.code for x in s.suggest("Review of systems: chest pain and cough. Nausea since Monday.")} == {
        "R11.0", "R07.9", "R05.9"}
    es = Suggester({"8140/6": "Adenocarcinoma metastásico", "8500/3": "Carcinoma ductal infiltrante"}, language="es")
    assert es.suggest("No se observan adenocarcinomas metastásicos. Se descarta carcinoma ductal infiltrante.") == []
    assert [x.code for x in es.suggest("Carcinomas ductales infiltrantes en la mama.")] == ["8500/3"]


def test_titles_with_accents_match_notes_without_them_and_the_other_way_round():
    """#51 item 18: Sjögren, Behçet, Sézary were never suggested for notes written without accents; a note with them
    missed CMS's unaccented "Guillain-Barre"."""
    s = Suggester({"M35.00": "Sjögren syndrome, unspecified", "M35.2": "Behçet's disease",
                   "G61.0": "Guillain-Barre syndrome"})
    assert {x.code for x in s.suggest("sjogren syndrome and behcet disease")} == {"M35.00", "M35.2"}
    assert [x.code for x in s.suggest("Guillain-Barré syndrome after a viral illness")] == ["G61.0"]


def test_suggestions_come_only_from_the_part_of_the_note_the_model_reads(tiny_run, titles):
    """#51 item 4: a 192,000-character note flagged truncated got a suggestion past the cut."""
    from clinicode.codes.icd9 import load_descriptions_tsv

    pred = Predictor.from_checkpoint(tiny_run, device="cpu", titles=load_descriptions_tsv(titles[0]))
    filler = "hypertension noted " * (pred.checkpoint.max_len // 2 + 10)
    for explain in (0, 3):
        [cut] = pred.predict([filler + "air embolism"], explain=explain)
        [head] = pred.predict(["air embolism " + filler], explain=explain)
        assert cut.truncated and head.truncated
        assert "999.1" not in {s.code for s in cut.suggested} and "999.1" in {s.code for s in head.suggested}
