"""Batch scoring: output schema, order, bad records, offsets, per-code evidence, resume, shards, and
predict == evaluate on the same split."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from clinicode.cli import app
from clinicode.files import write_json_atomic
from clinicode.metrics import all_metrics
from clinicode.models import known_kinds
from clinicode.models.spans import word_spans
from clinicode.predict import WORD_BAR, Predictor
from clinicode.predict_io import _settings, predict_file

runner = CliRunner()


@pytest.fixture(scope="module")
def predictor(tiny_run):
    return Predictor.from_checkpoint(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def test_split(demo_data):
    return pd.read_parquet(demo_data / "test.parquet")


def _lines(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def test_output_schema_and_order(predictor, test_split, tmp_path):
    src = tmp_path / "notes.jsonl"
    rows = test_split.head(30)
    with open(src, "w") as f:
        for rid, text in zip(rows["id"], rows["text"]):
            f.write(json.dumps({"id": rid, "text": text}) + "\n")
    out = tmp_path / "pred.jsonl"
    res = runner.invoke(app, ["predict", "--checkpoint", str(tinyrun_path(predictor)), "--input", str(src), "--output",
                              str(out),
                              "--top-k", "5", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    recs = _lines(out)
    assert [r["id"] for r in recs] == rows["id"].tolist()
    for r in recs:
        assert set(r) == {"id", "predicted", "scores", "truncated"}
        assert len(r["scores"]) == 5
        scores = [p["score"] for p in r["predicted"]]
        assert scores == sorted(scores, reverse=True)
        assert all(s >= predictor.threshold for s in scores)
        assert all(p["description"] == predictor.labels.description(p["code"]) for p in r["predicted"])
    assert not (tmp_path / "pred.jsonl.partial").exists()


def tinyrun_path(predictor):
    return predictor.checkpoint.path


def test_bad_records_are_reported_not_dropped(predictor, tmp_path):
    src = tmp_path / "mixed.jsonl"
    src.write_text('{"id": "ok1", "text": "hypertension and heart failure"}\nnot json\n{"id": "nt"}\n'
                   '{"id": "empty", "text": "   "}\n{"id": "num", "text": 42}\n{"id": "ok2", "text": "sepsis"}\n')
    out = tmp_path / "out.jsonl"
    res = runner.invoke(app, ["predict", "--checkpoint", str(tinyrun_path(predictor)), "--input", str(src), "--output",
                              str(out)])
    assert res.exit_code == 0
    recs = _lines(out)
    assert [r["id"] for r in recs] == ["ok1", "line-2", "nt", "empty", "num", "ok2"]
    assert [("error" in r) for r in recs] == [False, True, True, True, True, False]
    assert "4 bad records" in res.stderr
    strict = runner.invoke(app, ["predict", "--checkpoint", str(tinyrun_path(predictor)), "--input", str(src),
                                 "--output", str(tmp_path / "s.jsonl"), "--strict"])
    assert strict.exit_code == 1
    assert "line 2 of mixed.jsonl: not valid JSON" in strict.stderr and "Traceback" not in strict.stderr


def test_csv_parquet_txt_and_folder_inputs(predictor, tmp_path):
    df = pd.DataFrame({"id": ["a", "b"], "text": ["chest pain, hypertension", "acute kidney failure"]})
    df.to_csv(tmp_path / "n.csv", index=False)
    df.to_parquet(tmp_path / "n.parquet")
    (tmp_path / "notes").mkdir()
    for rid, text in zip(df["id"], df["text"]):
        (tmp_path / "notes" / f"{rid}.txt").write_text(text)
    outs = []
    for src in ("n.csv", "n.parquet", "notes"):
        out = tmp_path / f"{src}.out.jsonl"
        res = runner.invoke(app, ["predict", "--checkpoint", str(tinyrun_path(predictor)), "--input",
                                  str(tmp_path / src),
                                  "--output", str(out), "--top-k", "all"])
        assert res.exit_code == 0, res.output
        outs.append(_lines(out))
    assert outs[0] == outs[1] == outs[2]
    assert len(outs[0][0]["scores"]) == len(predictor.labels)
    csv_out = tmp_path / "o.csv"
    res = runner.invoke(app, ["predict", "--checkpoint", str(tinyrun_path(predictor)), "--input",
                              str(tmp_path / "n.csv"),
                              "--output", str(csv_out)])
    assert res.exit_code == 0
    back = pd.read_csv(csv_out)
    assert back["id"].tolist() == ["a", "b"]


def test_evidence_offsets_map_back_to_the_note(predictor, test_split):
    texts = test_split["text"].tolist()[:5]
    preds = predictor.predict(texts, explain=3, threshold=0.0)
    for text, p in zip(texts, preds):
        assert p.evidence and len(p.evidence) == 3
        weights = [s.weight for s in p.evidence]
        assert weights == sorted(weights, reverse=True)
        assert sum(s.weight for s in p.attention) == pytest.approx(1.0, abs=1e-4)
        for s in p.attention:
            piece = text[s.start:s.end]
            assert piece and piece.replace("_", "a").isalnum(), piece  # a whole \w+ token of the raw note
        assert set(p.code_phrases) == {c.code for c in p.predicted}
        for spans in p.code_phrases.values():
            for s in spans:
                assert 0 <= s.start < s.end <= len(text)


def test_per_code_evidence_points_at_the_codes_phrase(predictor):
    # hypertension's phrase planted in filler: the 401.9 evidence must cover it
    filler = "patient was seen and discharged home in stable condition with follow up " * 8
    note = filler + " history of hypertension " + filler
    code = "401.9"
    p = predictor.predict([note], explain=1, threshold=0.0)[0]
    span = p.code_phrases[code][0]
    start = note.index("hypertension")
    assert span.start <= start < span.end, note[span.start:span.end]
    assert len(note[span.start:span.end].split()) <= 3, "the words closest to the code, not a window around them"


def test_predict_scores_equal_evaluate(tiny_run, demo_data, test_split, tmp_path):
    src = tmp_path / "test.jsonl"
    with open(src, "w") as f:
        for rid, text in zip(test_split["id"], test_split["text"]):
            f.write(json.dumps({"id": rid, "text": text}) + "\n")
    out = tmp_path / "all.jsonl"
    assert runner.invoke(app, ["predict", "--checkpoint", str(tiny_run), "--input", str(src), "--output", str(out),
                               "--top-k", "all"]).exit_code == 0
    m_file = tmp_path / "m.json"
    res = runner.invoke(app, ["evaluate", "--checkpoint", str(tiny_run), "--data", str(demo_data), "--output",
                              str(m_file)])
    assert res.exit_code == 0, res.output
    evaluated = json.loads(m_file.read_text())
    pred = Predictor.from_checkpoint(tiny_run, device="cpu")
    codes = list(pred.labels.codes)
    recs = _lines(out)
    scores = np.array([[r["scores"][c] for c in codes] for r in recs])
    y = pred.labels.multi_hot(test_split["labels"])
    recomputed = all_metrics(y, scores, threshold=evaluated["threshold"])
    for k in ("auc_macro", "auc_micro", "f1_macro", "f1_macro_mean", "f1_micro", "prec_at_5", "prec_at_8"):
        assert recomputed[k] == pytest.approx(evaluated[k], abs=1e-7), k


def test_resume_skips_done_ids_and_heals_a_torn_line(predictor, tmp_path):
    src = tmp_path / "n.jsonl"
    with open(src, "w") as f:
        for i in range(10):
            f.write(json.dumps({"id": f"n{i}", "text": f"note {i} with hypertension"}) + "\n")
    out = tmp_path / "o.jsonl"
    predict_file(predictor, input=src, output=out, progress=False)
    full = _lines(out)
    # simulate a kill: 4 records done plus half a line, still in the .partial file beside its settings
    partial = out.with_name("o.jsonl.partial")
    lines = out.read_text().splitlines(keepends=True)
    partial.write_text("".join(lines[:4]) + lines[4][:20])
    write_json_atomic(out.with_name("o.jsonl.partial.json"), _settings(predictor, input=src, fmt="jsonl", top_k=10,
                                                                       threshold=None, explain=0, shard=(0, 1)))
    out.unlink()
    counts = predict_file(predictor, input=src, output=out, resume=True, progress=False)
    assert counts == {"scored": 6, "errors": 0, "skipped": 4}
    assert _lines(out) == full
    assert not partial.exists() and not out.with_name("o.jsonl.partial.json").exists()


def test_shards_partition_the_input(predictor, tmp_path):
    src = tmp_path / "n.jsonl"
    with open(src, "w") as f:
        for i in range(9):
            f.write(json.dumps({"id": f"n{i}", "text": "heart failure"}) + "\n")
    ids = []
    for i in range(3):
        out = tmp_path / f"s{i}.jsonl"
        predict_file(predictor, input=src, output=out, shard=(i, 3), progress=False)
        ids.append([r["id"] for r in _lines(out)])
    assert ids[0] == ["n0", "n3", "n6"]
    assert sorted(sum(ids, [])) == sorted(f"n{i}" for i in range(9))
    res = runner.invoke(app, ["predict", "--checkpoint", str(tinyrun_path(predictor)), "--input", str(src), "--shard",
                              "3/3"])
    assert res.exit_code == 1 and "--shard '3/3': expected i/n" in res.stderr


def test_cli_bad_inputs_exit_1_with_one_line(tiny_run, tmp_path):
    cases = [
        (["predict", "--checkpoint", str(tmp_path / "nope"), "--input", "x.jsonl"], "no such folder"),
        (["predict", "--checkpoint", str(tiny_run), "--input", str(tmp_path / "missing.jsonl")],
         "no such file or folder"),
        (["predict", "--checkpoint", str(tiny_run), "--input", str(tmp_path), "--top-k", "many"],
         "--top-k must be a positive integer or 'all', got 'many'"),
        (["evaluate", "--checkpoint", str(tiny_run), "--data", str(tmp_path / "nodata")], ""),
        (["train", "--out", str(tmp_path / "r")], "give exactly one of --data"),
        (["train", "--out", str(tmp_path / "r"), "--data", str(tmp_path), "--model", "svm"],
         f"--model must be {known_kinds()}"),
    ]
    (tmp_path / "bad.xml").write_text("<x/>")
    cases.append((["predict", "--checkpoint", str(tiny_run), "--input", str(tmp_path / "bad.xml")],
                  "unknown file type"))
    for args, message in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 1, (args, res.output)
        err = res.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), res.stderr
        assert message in err[0], (message, err[0])
    # A line that is not UTF-8 is a bad record (reported with its line number), not the end of the run.
    (tmp_path / "latin.jsonl").write_bytes(b'{"id": "a", "text": "caf\xe9"}\n{"id": "b", "text": "heart failure"}\n')
    res = runner.invoke(app, ["predict", "--checkpoint", str(tiny_run), "--input", str(tmp_path / "latin.jsonl"),
                              "--output", str(tmp_path / "latin.out.jsonl"), "--no-progress"])
    assert res.exit_code == 0, res.output
    recs = [json.loads(line) for line in (tmp_path / "latin.out.jsonl").read_text().splitlines()]
    assert "not UTF-8" in recs[0]["error"] and "line 1" in recs[0]["error"] and "error" not in recs[1]


def test_top_n_equals_a_stable_sort_with_ties():
    import numpy as np

    from clinicode.models.spans import top

    rng = np.random.default_rng(0)
    for _ in range(200):
        v = rng.integers(0, 4, size=rng.integers(1, 40)).astype(np.float32)  # many ties
        n = int(rng.integers(1, 45))
        assert top(v, n).tolist() == np.argsort(-v, kind="stable")[:n].tolist()


def test_batch_scoring_skips_the_per_token_attention_list(predictor):
    with_att = predictor.predict(["heart failure and hypertension"], explain=2)[0]
    without = predictor.predict(["heart failure and hypertension"], explain=2, attention=False)[0]
    assert with_att.attention and without.attention is None
    assert with_att.to_dict() == without.to_dict()


def test_per_code_evidence_shows_each_place_the_code_s_words_occur(predictor):
    note = ("Patient with congestive heart failure exacerbation, atrial fibrillation on coumadin, hypertension, "
            "diabetes mellitus, acute kidney injury and pneumonia; " * 3)
    [p] = predictor.predict([note], top_k=None, threshold=0.0, explain=5)
    assert p.code_phrases
    for code, spans in p.code_phrases.items():
        keys = [(s.start, s.end) for s in spans]
        assert 1 <= len(keys) == len(set(keys)) <= 5, code
        assert [s.weight for s in spans] == sorted((s.weight for s in spans), reverse=True)
        assert all(s.weight >= WORD_BAR * spans[0].weight - 1e-6 for s in spans), code
    # the note says it three times: each is shown, not three overlapping windows around the first
    assert [note[s.start:s.end] for s in p.code_phrases["427.31"]] == ["atrial fibrillation"] * 3
    assert len({s.start for s in p.code_phrases["427.31"]}) == 3


def test_word_spans_join_neighbours_above_the_bar_best_first():
    offs = [(0, 5), (6, 13), (14, 17), (18, 23), (24, 29), (30, 37)]
    g = np.array([0.9, 0.75, 0.1, 0.6, 0.95, 0.2], dtype=np.float32)
    # bar 0.8 * 0.95 = 0.76: words 0 and 4 (word 1, 0.75, is just below)
    assert [(s.start, s.end) for s in word_spans(offs, g, 5)] == [(24, 29), (0, 5)]
    g[1] = 0.8                                                                  # now joins word 0: one span
    spans = word_spans(offs, g, 5)
    assert [(s.start, s.end, round(s.weight, 2)) for s in spans] == [(24, 29, 0.95), (0, 13, 0.9)]
    assert [(s.start, s.end) for s in word_spans(offs, g, 1)] == [(24, 29)]
    assert [(s.start, s.end) for s in word_spans(offs, -np.abs(g), 5)] == [(14, 17)]  # none positive: the best one
    assert word_spans([], np.zeros(0), 5) == []


def test_leam_spans_come_from_its_scorer_on_its_stated_scale(predictor, test_split):
    """The spans predict shows for a code are the scorer's (`LEAMScorer.code_spans`): LEAM's cosines of the code
    vector with the note's words (`word_rows`) cut by the one rule (`word_spans`), weights in [-1, 1]; the attention
    spans carry beta, in [0, 1]."""
    texts = test_split["text"].tolist()[:5]
    recs = predictor.predict(texts, top_k=None, threshold=0.0, explain=4)
    for text, rec in zip(texts, recs):
        enc = predictor.scorer.encode([text], offsets=True)[0]
        ks = [predictor.labels.index(c.code) for c in rec.predicted]
        g = predictor.scorer.word_rows(np.asarray(enc.ids), ks)                   # [n, L] cosines
        assert g.min() >= -1 - 1e-5 and g.max() <= 1 + 1e-5
        for c, row, got in zip(rec.predicted, g, predictor.scorer.code_spans(enc, ks, 4, text=text)):
            assert rec.code_phrases[c.code] == got == word_spans(enc.offsets, row, 4), c.code
            assert all(-1 - 1e-5 <= s.weight <= 1 + 1e-5 for s in got)
        assert rec.evidence and all(0.0 <= s.weight <= 1.0 for s in rec.evidence)


def _variant(predictor, *, n_labels=None, fast=True, seed=0):
    """The tiny run's tokenizer and threshold with a LEAM of `n_labels` random codes (its own when None)."""
    import copy

    import torch

    from clinicode.data.labels import LabelSet
    from clinicode.models.leam.model import LEAM

    ck = copy.copy(predictor.checkpoint)
    if n_labels is None:
        model = LEAM(ck.model.config, fast=fast)
        model.load_state_dict(ck.model.state_dict())
    else:
        torch.manual_seed(seed)
        cfg = ck.model.config
        model = LEAM(type(cfg)(**{**cfg.__dict__, "n_labels": n_labels}), fast=fast)
        with torch.no_grad():
            model.label_emb.copy_(model.word_emb.weight[torch.randint(2, cfg.vocab_size, (n_labels,
                                                                                          ))])  # codes near words
        ck.labels = LabelSet(tuple(f"C{k:04d}" for k in range(n_labels)), tuple(f"code {k}" for k in range(n_labels)))
    ck.model = model.eval()
    return ck


@pytest.mark.parametrize("n_labels", [None, 450])   # the run's 50 codes (table), 450 > 4P (blocks of codes)
def test_every_memory_plan_scores_and_explains_like_the_plain_model(predictor, test_split, n_labels):
    """The plan's order (stored table, or the window on the word vectors with codes by blocks, in small blocks under a
    small budget) changes neither scores nor evidence: the plain model (no table, G and u stored) is the reference."""
    fast_ck, plain_ck = _variant(predictor, n_labels=n_labels), _variant(predictor, n_labels=n_labels, fast=False)
    plain_ck.model.load_state_dict(fast_ck.model.state_dict())
    fast, plain = Predictor(fast_ck), Predictor(plain_ck)
    assert plain.plan.order == "plain" and not plain.plan.use_table
    assert fast.plan.order == ("table" if n_labels is None else "many codes")
    texts = test_split["text"].tolist()[:12]
    want = plain.predict(texts, top_k=8, threshold=0.0, explain=3)  # threshold 0: every code predicted and explained
    got = fast.predict(texts, top_k=8, threshold=0.0, explain=3)
    for a, b in zip(got, want):
        assert list(a.scores) == list(b.scores)
        np.testing.assert_allclose(list(a.scores.values()), list(b.scores.values()), rtol=1e-5, atol=1e-6)
        assert [c.code for c in a.predicted] == [c.code for c in b.predicted] and a.predicted
        assert [(s.start, s.end) for s in a.evidence] == [(s.start, s.end) for s in b.evidence]
        for code, spans in a.code_phrases.items():
            assert [(s.start, s.end) for s in spans] == [(s.start, s.end) for s in b.code_phrases[code]], code
    np.testing.assert_allclose(fast.score(texts), plain.score(texts), rtol=1e-5, atol=1e-6)


def test_evidence_on_demand_equals_the_evidence_predict_gives(predictor, test_split):
    """The app explains a code when it is shown: the same spans as predict(..., explain=n) for a predicted code."""
    text = test_split["text"].iloc[0]
    [p] = predictor.predict([text], top_k=None, threshold=0.0, explain=4)
    codes = [c.code for c in p.predicted][:6] + [predictor.codes[-1]]
    got = predictor.explain_codes(text, codes, 4)
    assert list(got) == codes
    for code in codes:
        assert [(s.start, s.end) for s in got[code]] == [(s.start, s.end) for s in p.code_phrases[code]], code
        np.testing.assert_allclose([s.weight for s in got[code]], [s.weight for s in p.code_phrases[code]], rtol=1e-5)
    assert predictor.explain_codes("123 456", codes[:2], 4) == {codes[0]: [], codes[1]: []}  # no words: no evidence
