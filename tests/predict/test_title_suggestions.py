"""`predict --titles`: codes the checkpoint lacks, suggested when every word of their title occurs in the note; marked
as suggestions from the title, never predictions (no model score, no threshold)."""

from __future__ import annotations

import json

import pytest

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
                    "E000\tOf the\n", encoding="utf-8")
    return path, own


def test_suggestions_are_the_untrained_codes_whose_title_words_all_occur(tiny_run, titles):
    path, own = titles
    from clinicode.codes.icd9 import load_descriptions_tsv

    plain = Predictor.from_checkpoint(tiny_run, device="cpu")
    with_titles = Predictor.from_checkpoint(tiny_run, device="cpu", titles=load_descriptions_tsv(path))
    [a] = plain.predict([NOTE], threshold=0.0, top_k=None)
    [b] = with_titles.predict([NOTE], threshold=0.0, top_k=None)
    got = {m.code: m for m in b.title_suggestions}
    assert set(got) == {"999.1", "584.8"}          # the checkpoint's own code is the model's; 584.5 lacks words
    assert [NOTE[s:e] for s, e in got["584.8"].spans] == ["acute renal failure"]
    assert b.title_suggestions[0].code == "584.8"  # three words are more specific than two
    # not predictions: the model's codes, scores and threshold logic are untouched
    assert [(c.code, c.score) for c in b.predicted] == [(c.code, c.score) for c in a.predicted]
    assert b.scores == a.scores and not set(got) & {c.code for c in b.predicted}
    rec = b.to_dict()
    assert rec["title_suggestions"][0] == {"code": "584.8", "title": "Acute renal failure",
                                           "specificity": pytest.approx(got["584.8"].specificity),
                                           "spans": [{"start": NOTE.index("acute"), "end": NOTE.index(" noted")}]}
    assert "title_suggestions" not in a.to_dict()  # without titles the record is as before
    [none] = with_titles.predict(["hypertension only"])
    assert none.title_suggestions == [] and none.to_dict()["title_suggestions"] == []


def test_cli_predict_titles_writes_them_and_refuses_a_file_without_new_codes(tiny_run, titles, tmp_path):
    path, own = titles
    notes = tmp_path / "notes.jsonl"
    notes.write_text(json.dumps({"id": "n1", "text": NOTE}) + "\n" + json.dumps({"id": "n2", "text": "   "}) + "\n",
                     encoding="utf-8")
    out = tmp_path / "out.jsonl"
    succeeds(["predict", "--checkpoint", tiny_run, "--input", notes, "--output", out, "--titles", path,
              "--device", "cpu", "--no-progress"])
    recs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [m["code"] for m in recs[0]["title_suggestions"]] == ["584.8", "999.1"]
    assert "title_suggestions" not in recs[1] and recs[1]["error"]           # a bad record stays an error record
    only_own = tmp_path / "own.tsv"
    only_own.write_text(f"{own}\tSomething\n", encoding="utf-8")
    fails(["predict", "--checkpoint", tiny_run, "--input", notes, "--output", tmp_path / "o2.jsonl",
           "--titles", only_own, "--device", "cpu"], "no code with a title outside the checkpoint's")
    fails(["predict", "--checkpoint", tiny_run, "--input", notes, "--output", tmp_path / "o3.jsonl",
           "--titles", tmp_path / "missing.tsv", "--device", "cpu"], "cannot read code descriptions")
