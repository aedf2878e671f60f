"""A `train` scores dev and test once each through the inference path: the fused model's fusion hands its dev
scores to the threshold's tuning, and the evidence figures take test's scores from the test metrics, encoding the
notes for their spans only; every output stays what scoring again gave. `evaluate` scores its split once too."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from clinicode.config import TrainConfig
from clinicode.models.leam.scorer import LEAMScorer
from clinicode.predict import Predictor
from clinicode.train import train

from conftest import TINY_MODEL

SIZES = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}
PHRASES = {"C1": "glorp fever", "C2": "vantic syndrome", "C3": "zelmic palsy", "C4": "hurdic anaemia"}
FILLER = "patient presented with history of review notes stable plan follow up discussed daily routine".split()
NOTES = {"train": 90, "dev": 50, "test": 30}   # dev and test told apart by their size


def _write(folder):
    rng = random.Random(5)
    folder.mkdir()
    for split, n in NOTES.items():
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i in range(n):
                codes = sorted(rng.sample(sorted(PHRASES), rng.choice((1, 2))))
                text, evidence = " ".join(rng.choice(FILLER) for _ in range(15)), []
                for code in codes:
                    text += " , "
                    evidence.append({"code": code, "start": len(text), "end": len(text) + len(PHRASES[code])})
                    text += PHRASES[code] + " " + " ".join(rng.choice(FILLER) for _ in range(8))
                f.write(json.dumps({"id": f"{split}{i}", "text": text, "labels": codes, "evidence": evidence}) + "\n")
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("scored_once") / "data")


def _count_raw_scoring(monkeypatch) -> list[int]:
    """The sizes of the note lists the LEAM (part) scores from raw text or encodings, one entry a pass (the loop's
    dev scoring after each epoch goes through `score_ids`, not counted)."""
    passes: list[int] = []
    score, score_encoded = LEAMScorer.score, LEAMScorer.score_encoded

    def counted_score(self, texts):
        passes.append(len(texts))
        return score(self, texts)

    def counted_encoded(self, encs, *, attention):
        passes.append(len(encs))
        return score_encoded(self, encs, attention=attention)

    monkeypatch.setattr(LEAMScorer, "score", counted_score)
    monkeypatch.setattr(LEAMScorer, "score_encoded", counted_encoded)
    return passes


@pytest.mark.parametrize("model, fit_on", [("fused", "train+dev"), ("fused", "train"), ("leam", "train")])
def test_dev_and_test_are_scored_once_a_train(data, tmp_path, monkeypatch, model, fit_on):
    passes = _count_raw_scoring(monkeypatch)
    cfg = TrainConfig(model=model, epochs=2, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3, device="cpu",
                      min_doc_freq=1)
    options = {**SIZES, **({"fit_on": fit_on} if model == "fused" else {})}   # --fit-on is the fused model's option
    res = train(out_dir=tmp_path / "run", config=cfg, data_dir=data, model_options=options, progress=False)
    # (dev, test): dev by the fusion alone (LEAM's loop scores dev's ids), test once for its metrics and spans
    assert (passes.count(NOTES["dev"]), passes.count(NOTES["test"])) == (1 if model == "fused" else 0, 1), passes
    assert res["test"]["evidence"]["n_pairs"] > 0                                   # the figures were made
    monkeypatch.undo()
    # what the run saved is what scoring its checkpoint again gives: dev's threshold and metrics, test's scores
    pred = Predictor.from_checkpoint(tmp_path / "run", device="cpu")
    saved = np.load(tmp_path / "run" / "scores_test.npz")
    test = [json.loads(line) for line in (data / "test.jsonl").read_text().splitlines()]
    np.testing.assert_array_equal(saved["scores"], pred.score([r["text"] for r in test]))


@pytest.fixture(scope="module")
def fused_run(data, tmp_path_factory):
    run = tmp_path_factory.mktemp("scored_once") / "run"
    cfg = TrainConfig(model="fused", epochs=2, batch_size=16, lr=2e-2, w2v_epochs=1, patience=2, seed=3, device="cpu",
                      min_doc_freq=1)
    train(out_dir=run, config=cfg, data_dir=data, model_options={**SIZES, "fit_on": "train"}, progress=False)
    return run


def test_spans_of_given_scores_are_those_predict_shows(data, fused_run, monkeypatch):
    pred = Predictor.from_checkpoint(fused_run, device="cpu")
    texts = [json.loads(line)["text"] for line in (data / "test.jsonl").read_text().splitlines()]
    texts += ["   ", "!!! ???"]   # one note predict refuses, one with no word the model reads
    shown = pred.code_spans(texts, explain=3, threshold=0.3)
    scores = pred.score(texts)
    passes = _count_raw_scoring(monkeypatch)
    assert pred.code_spans(texts, explain=3, threshold=0.3, scores=scores) == shown
    assert passes == []                                                           # no scoring, only the encoding
    assert shown[-1] == shown[-2] == {} and any(shown[:-2])


def test_evaluate_scores_the_split_once_for_its_metrics_and_evidence(data, fused_run, monkeypatch):
    from clinicode.evaluate import evaluate, evidence_report

    alone = evidence_report(fused_run, data, "test", device="cpu")   # the figures scored on their own
    passes = _count_raw_scoring(monkeypatch)
    result = evaluate(checkpoint=fused_run, data_dir=data, split="test", device="cpu")
    assert passes == [NOTES["test"]]
    assert {"split": "test", **result["evidence"]} == alone and result["evidence"]["n_pairs"] > 0
