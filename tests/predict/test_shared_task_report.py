"""`evaluate` reports the shared tasks' metrics (docs/metrics.md): MAP with gold codes outside the checkpoint never
retrieved, per family and without some codes, and the span-and-code F1, absent where the split has no evidence."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clinicode import metrics as M
from clinicode.cli import app
from clinicode.data.prepared import read_split
from clinicode.evaluate import EVIDENCE_K, evaluate
from clinicode.predict import Predictor

from helpers import runner

OUTSIDE = "999.9"  # a gold code no checkpoint of the demo data has


@pytest.fixture(scope="module")
def pred(tiny_run):
    return Predictor.from_checkpoint(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def spanned(pred, demo_data, tmp_path_factory):
    """The demo test split as a coded-notes folder: each note's first gold code also stands outside the checkpoint
    (OUTSIDE, added to every note), and the reference of each correctly predicted code is the model's own first span
    for it widened by 3 characters on each side but the first such code's, widened by 11 (past the slack)."""
    df = read_split(demo_data, "test")
    recs = pred.predict(df["text"].tolist(), explain=EVIDENCE_K, attention=False)
    rows, n_right, n_wide = [], 0, 0
    for (_, row), rec in zip(df.iterrows(), recs):
        evidence = []
        for c in rec.predicted:
            if c.code in row["labels"] and rec.code_phrases[c.code]:
                s = rec.code_phrases[c.code][0]
                wide = n_right == 0
                n_right += 1
                n_wide += wide
                # a reference inside the shown span: the span reaches 3 (or 11) characters past it each side
                pad = 11 if wide else 3
                if s.end - s.start > 2 * pad:
                    evidence.append({"code": c.code, "start": s.start + pad, "end": s.end - pad})
                else:
                    n_right -= 1
                    n_wide -= wide
        rows.append({"id": row["id"], "text": row["text"], "labels": [*row["labels"], OUTSIDE],
                     "evidence": evidence})
    out = tmp_path_factory.mktemp("spanned") / "notes"
    out.mkdir()
    (out / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out, rows


def test_map_counts_gold_codes_outside_the_checkpoint_as_never_retrieved(pred, spanned):
    folder, rows = spanned
    m = evaluate(checkpoint=None, predictor=pred, data_dir=folder, split="test")
    y = pred.labels.multi_hot([r["labels"] for r in rows])
    s = pred.score([r["text"] for r in rows])
    inside, n = M.mean_average_precision(y, s)                           # as if OUTSIDE were not gold
    assert m["n_map_notes"] == n == len(rows) and m["map_depth"] == 1000
    n_gold = y.sum(axis=1) + 1
    assert m["map"] == pytest.approx(M.mean_average_precision(y, s, n_gold=n_gold)[0])
    assert m["map"] < inside


def test_map_per_family_and_without_codes(pred, spanned):
    folder, rows = spanned
    codes = list(pred.labels.codes)
    m = evaluate(checkpoint=None, predictor=pred, data_dir=folder, split="test", map_without=[codes[0]])
    # the CAML top 50 holds diagnoses and procedures: each ranked alone (OUTSIDE, 999.9, is a diagnosis)
    y = pred.labels.multi_hot([r["labels"] for r in rows])
    s = pred.score([r["text"] for r in rows])
    proc = np.array([pred.code_system.kind(c) == "procedure" for c in codes])
    assert proc.any() and (~proc).any()
    want_p = M.mean_average_precision(y[:, proc], s[:, proc], n_gold=y[:, proc].sum(axis=1))
    want_d = M.mean_average_precision(y[:, ~proc], s[:, ~proc], n_gold=y[:, ~proc].sum(axis=1) + 1)
    assert m["map_procedures"] == pytest.approx(want_p[0]) and m["n_map_notes_procedures"] == want_p[1]
    assert m["map_diagnoses"] == pytest.approx(want_d[0]) and m["n_map_notes_diagnoses"] == want_d[1]
    keep = np.arange(len(codes)) != 0
    n_gold = y[:, keep].sum(axis=1) + 1
    assert m["map_without"]["codes"] == [codes[0]]
    assert m["map_without"]["map"] == pytest.approx(M.mean_average_precision(y[:, keep], s[:, keep],
                                                                             n_gold=n_gold)[0])


def test_span_code_f1_counts_a_code_only_where_a_shown_span_holds_its_reference(pred, spanned):
    folder, rows = spanned
    m = evaluate(checkpoint=None, predictor=pred, data_dir=folder, split="test")
    sc = m["span_code"]
    n_refs = sum(len(r["evidence"]) for r in rows)
    n_pred = sum(len(r.predicted) for r in pred.predict([r["text"] for r in rows], top_k=0))
    assert n_refs >= 3, "the tiny model should get a few codes right"
    # every reference is held by its code's first span (3 characters each side) but one (11: past the slack)
    assert (sc["n_gold"], sc["n_correct"], sc["n_predicted"], sc["slack"]) == (n_refs, n_refs - 1, n_pred, 10)
    assert sc["recall"] == pytest.approx((n_refs - 1) / n_refs)
    assert sc["precision"] == pytest.approx((n_refs - 1) / n_pred)
    assert "span_code_note" not in m


def test_a_model_that_shows_no_spans_has_no_span_metric(spanned, demo_data, tmp_path_factory):
    from clinicode.config import TrainConfig
    from clinicode.train import train

    folder, _ = spanned
    run = tmp_path_factory.mktemp("lr") / "lr"
    train(out_dir=run, config=TrainConfig(model="tfidf-lr"), data_dir=demo_data, progress=False)
    m = evaluate(checkpoint=run, data_dir=folder, split="test", device="cpu")
    assert m["evidence"]["n_pairs"] > 0                                  # the split has references ...
    assert m["span_code"] is None and m["span_code_note"] == "a tfidf-lr checkpoint shows no per-code spans to judge"
    assert 0 < m["map"] <= 1                                             # ... and MAP needs none


def test_no_evidence_spans_no_span_metric_and_the_cli_says_so(tiny_run, demo_data, tmp_path):
    out = tmp_path / "m.json"
    res = runner().invoke(app, ["evaluate", "--checkpoint", str(tiny_run), "--data", str(demo_data), "--split", "test",
                                "--output", str(out), "--device", "cpu", "--map-without", "401.9"])
    assert res.exit_code == 0, res.output
    m = json.loads(out.read_text())
    assert m["span_code"] is None and "no evidence spans" in m["span_code_note"]      # absent, not 0
    assert 0 < m["map"] <= 1 and m["map_without"]["codes"] == ["401.9"]
    lines = res.output.splitlines()
    assert any(line.startswith("MAP ") and "depth 1,000" in line for line in lines)
    assert any(line.startswith("MAP without") and "401.9" in line for line in lines)
    assert any(line.startswith("span-and-code F1") and "n/a" in line for line in lines)
