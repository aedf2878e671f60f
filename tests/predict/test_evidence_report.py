"""`evaluate` reports evidence quality when the split carries gold mentions (`evidence_report`, docs/metrics.md)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from clinicode.cli import app
from clinicode.codes.icd10 import PCS_NO_TITLE
from clinicode.data.prepared import read_split
from clinicode.evaluate import EVIDENCE_K, evaluate, evidence_of, evidence_report
from clinicode.predict import Predictor

from helpers import runner


@pytest.fixture(scope="module")
def coded(tiny_run, demo_data, tmp_path_factory):
    """The demo test split as a coded-notes folder whose gold mention of each correctly predicted code is the model's
    own first span for it (a hit at 1), except every other such code, whose mention is its second span when that does
    not overlap the first (a miss at 1, a hit within k)."""
    pred = Predictor.from_checkpoint(tiny_run, device="cpu")
    df = read_split(demo_data, "test")
    recs = pred.predict(df["text"].tolist(), explain=EVIDENCE_K, attention=False)
    rows, n_right, n_second = [], 0, 0
    for (_, row), rec in zip(df.iterrows(), recs):
        evidence = []
        for c in rec.predicted:
            spans = rec.code_phrases[c.code]
            if c.code in row["labels"]:
                n_right += 1
                second = n_right % 2 == 0 and len(spans) > 1 and (spans[1].start >= spans[0].end
                                                                   or spans[1].end <= spans[0].start)
                n_second += second
                s = spans[1 if second else 0]
                evidence.append({"code": c.code, "start": s.start, "end": s.end})
        rows.append({"id": row["id"], "text": row["text"], "labels": list(row["labels"]), "evidence": evidence})
    out = tmp_path_factory.mktemp("coded") / "notes"
    out.mkdir()
    (out / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert n_right >= 4 and n_second >= 1, "the tiny model should get a few codes right"
    return out, n_right, n_second


def test_evidence_report_scores_the_model_s_spans_against_the_gold_mentions(tiny_run, coded):
    folder, n_right, n_second = coded
    ev = evidence_report(tiny_run, folder, "test", device="cpu")
    assert ev["split"] == "test" and ev["k"] == EVIDENCE_K
    assert ev["n_pairs"] == ev["n_correct"] == n_right and ev["n_correct_without_evidence"] == 0
    model = ev["model"]
    assert model["hit_at_1"] == pytest.approx(1 - n_second / n_right)      # the second-span mentions miss at 1 ...
    assert model["hit_at_k"] == 1.0                                           # ... and hit within k
    assert model["token_recall"] == 1.0 and 0 < model["token_precision"] < 1
    for floor in ("random", "title"):
        assert set(ev[floor]) >= {"hit_at_1", "hit_at_k", "token_precision", "token_recall", "token_f1",
                                  "words_per_code"} and ev[floor]["n_pairs"] == n_right
    assert ev["random"]["hit_at_k"] < 1.0


def test_evaluate_carries_it_and_the_cli_prints_it(tiny_run, coded, tmp_path):
    folder, n_right, _ = coded
    m = evaluate(checkpoint=tiny_run, data_dir=folder, split="test", device="cpu")
    alone = evidence_report(tiny_run, folder, "test", device="cpu")
    assert m["evidence"] == {k: v for k, v in alone.items() if k != "split"}
    out = tmp_path / "m.json"
    res = runner().invoke(app, ["evaluate", "--checkpoint", str(tiny_run), "--data", str(folder), "--split", "test",
                                "--output", str(out), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert f"evidence over {n_right:,} correctly predicted codes" in res.output
    assert "title words" in res.output and "random" in res.output
    assert json.loads(out.read_text())["evidence"]["model"]["hit_at_k"] == 1.0


def test_no_evidence_column_no_evidence(tiny_run, demo_data):
    assert "evidence" not in evaluate(checkpoint=tiny_run, data_dir=demo_data, split="test", device="cpu")
    assert evidence_report(tiny_run, demo_data, "test", device="cpu") is None


def test_a_display_placeholder_is_no_title_for_the_title_floor(tiny_run):
    """The checkpoint shows PCS_NO_TITLE for an ICD-10-PCS code without a title; the metrics know no code system, so
    evaluate blanks the placeholder: its words ("no title", "ICD 10 PCS") are never matched as the title's."""
    pred = Predictor.from_checkpoint(tiny_run, device="cpu")
    code = pred.codes[0]
    text = "Heart failure, no title of ICD 10 PCS."
    mentions = [[{"code": code, "start": 0, "end": 13}]]
    for title, words in ((PCS_NO_TITLE, 0.0), ("ICD 10 PCS", 3.0)):      # a real title's words are matched
        pred.labels = replace(pred.labels, descriptions=(title, *pred.labels.descriptions[1:]))
        ev = evidence_of(pred, [text], [[code]], mentions, k=1, threshold=0.0)
        assert ev["n_pairs"] == 1 and ev["title"]["words_per_code"] == words
