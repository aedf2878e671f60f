"""Codes known only on some notes (`PartlyCoded`: coders added them in review, and the older notes were never read
for them): read from a dataset's manifest, fitted on the notes read for them by tfidf-lr and the mentions' weights,
left out of LEAM's loss elsewhere, and never moving the fusion's fit or the threshold through dev's unread 0s."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from clinicode.batching import pad_batch
from clinicode.data.labels import PARTLY_CODED, LabelSet, PartlyCoded
from clinicode.models.fused.mentions import MentionLexicon
from clinicode.models.leam.kind import KIND
from clinicode.models.leam.model import LEAM
from clinicode.models.leam.options import LEAMConfig
from clinicode.models.tfidf_lr.baseline import fit_tfidf_lr
from clinicode.training.loop import UNKNOWN, Objective

from helpers import succeeds

LABELS = LabelSet(("A", "B", "NEW"), ("alpha", "beta", "zorblax syndrome"))


def _notes(n_read: int = 12, n_unread: int = 40) -> tuple[list[str], np.ndarray, PartlyCoded]:
    """Notes with a word for A and B; NEW's word 'zorblax' in half of each part. The read notes carry NEW where it is
    written; the unread ones (never coded for NEW) never carry it: hidden positives."""
    texts, y = [], []
    for i in range(n_read + n_unread):
        words = ["alpha fever" if i % 2 else "beta cough", "zorblax" if i % 4 < 2 else "plain", f"id{i % 7}"]
        texts.append(" ".join(words * 3))
        y.append([i % 2, 1 - i % 2, int(i < n_read and i % 4 < 2)])
    known = np.arange(n_read + n_unread) < n_read
    return texts, np.asarray(y), PartlyCoded(np.asarray([2]), known)


def test_the_manifest_names_the_codes_and_the_notes_read_for_them():
    manifest = {PARTLY_CODED: {"codes": ["NEW", "GONE"], "notes": ["n1", 3]}}
    partly = PartlyCoded.of(manifest, LABELS, ["n0", "n1", "3", "n4"])
    assert partly.columns.tolist() == [2]                       # GONE is not a code of the labels
    assert partly.known.tolist() == [False, True, True, False]
    y = np.zeros((4, 3), dtype=int)
    y[3, 2] = 1                                                  # an unread note that carries it: known
    assert partly.rows(y, 2).tolist() == [False, True, True, True]
    assert PartlyCoded.of({}, LABELS, ["n0"]) is None
    assert PartlyCoded.of({PARTLY_CODED: {"codes": ["GONE"], "notes": []}}, LABELS, ["n0"]) is None


def test_tfidf_lr_fits_a_partly_coded_code_on_the_notes_read_for_it():
    texts, y, partly = _notes()
    plain = fit_tfidf_lr(texts, y, single_label=False, min_doc_freq=1)
    read = fit_tfidf_lr(texts, y, single_label=False, min_doc_freq=1, partly=partly)
    probe = ["alpha fever zorblax id3", "alpha fever plain id3"]
    p_plain, p_read = plain.predict_proba(probe), read.predict_proba(probe)
    # the unread notes' hidden positives taught the plain fit that 'zorblax' says little
    assert p_read[0, 2] > 0.5 > p_plain[0, 2] and p_read[1, 2] < 0.5
    np.testing.assert_allclose(p_read[:, :2], p_plain[:, :2])   # the other codes are fitted on every note


def test_a_mentions_weight_counts_the_notes_read_for_its_code():
    texts, y, partly = _notes()
    evidence = []
    for text, row in zip(texts, y):
        at = text.find("zorblax")
        evidence.append([{"code": "NEW", "start": at, "end": at + 7}] if row[2] else [])
    plain = MentionLexicon.build(list(LABELS.codes), texts, evidence, language="en")
    read = MentionLexicon.build(list(LABELS.codes), texts, evidence, language="en", partly=partly)
    # 6 read notes marked it once each and write it 3 times; 20 unread ones write it 3 times, never marked
    assert plain.match(["zorblax"], 3)[0][2] == pytest.approx(6 / (26 * 3))
    assert read.match(["zorblax"], 3)[0][2] == pytest.approx(6 / (6 * 3))


def test_unknown_labels_leave_leams_loss_and_its_gradient():
    torch.manual_seed(0)
    model = LEAM(LEAMConfig(vocab_size=20, n_labels=3, embed_dim=8, radius=1, hidden_dim=8, label_reg_weight=0.0))
    logits = torch.randn(4, 3, requires_grad=True)
    y = torch.tensor([[1.0, 0, 1], [0, 1, 0], [1, 0, UNKNOWN], [0, 1, UNKNOWN]])
    known = (y != UNKNOWN).float()
    loss, _ = KIND.loss(model, logits, y * known, pos_weight=None, known=known)
    loss.backward()
    assert logits.grad[2:, 2].abs().sum() == 0 and logits.grad[:2, 2].abs().sum() > 0
    kept = torch.nn.functional.binary_cross_entropy_with_logits(logits, y * known, reduction="none")[known.bool()]
    assert loss.item() == pytest.approx(kept.sum().item() / 12)   # the known terms, over B*K as the full mean is


def test_the_objective_reads_unknown_labels_as_neither_positive_nor_negative():
    torch.manual_seed(0)
    model = LEAM(LEAMConfig(vocab_size=20, n_labels=3, embed_dim=8, radius=1, hidden_dim=8, label_reg_weight=0.0))
    plan = KIND.memory_plan(model.config, batch_size=2, max_len=8, budget_mb=512, device="cpu", training=True)
    ids, mask = pad_batch([[2, 3, 4], [5, 6]])
    model.eval()                                                 # no dropout: the two runs see the same logits
    with_unknown = Objective(KIND, model, None, plan, partly=True)(ids, mask, torch.tensor([[1.0, 0, UNKNOWN],
                                                                                          [0, 1, 0]]))[1]
    logits = KIND.forward(model, ids, mask, plan=plan)
    known = torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    target = torch.tensor([[1.0, 0, 0], [0, 1, 0]])
    expected = (torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none") * known).sum()
    assert with_unknown.item() == pytest.approx(expected.item() / 6, rel=1e-5)


def _coded_folder(path, texts, y, partly_notes, labels=LABELS):
    """A coded-notes folder of the notes (labels.json in LABELS' order), test with coders' spans, and a manifest
    naming NEW as partly coded, read on PARTLY_NOTES."""
    path.mkdir()
    ids = [f"n{i}" for i in range(len(texts))]
    rows = [{"id": i, "text": t, "labels": [c for c, v in zip(LABELS.codes, r) if v]} for i, t, r in zip(ids, texts, y)]
    dev = [{"id": f"d{i}", "text": t, "labels": lab} for i, (t, lab) in
           enumerate([("alpha fever zorblax id1", ["A"]), ("beta cough zorblax id2", ["B"]),
                      ("alpha fever plain id3", ["A"]), ("beta cough plain id4", ["B"])] * 3)]
    test = [{**r, "evidence": [{"code": c, "start": r["text"].index(w), "end": r["text"].index(w) + len(w)}
                               for c, w in (("A", "alpha"), ("B", "beta")) if c in r["labels"]]} for r in dev[:4]]
    for name, part in (("train", rows), ("dev", dev), ("test", test)):
        (path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    (path / "labels.json").write_text(json.dumps(labels.to_json()))
    (path / "manifest.json").write_text(json.dumps({PARTLY_CODED: {"codes": ["NEW"],
                                                                   "notes": [ids[i] for i in partly_notes]}}))
    return path


@pytest.mark.parametrize("named", [True, False])
def test_train_on_a_folder_that_names_partly_coded_codes_finds_them(tmp_path, named):
    """Through `train --model tfidf-lr` and `predict`: named in the manifest, the unread notes' hidden positives no
    longer hide NEW, and dev's notes (never read for NEW: they write 'zorblax' without it) do not hold the threshold
    above it; the same folder without the entry teaches that NEW is absent from 'zorblax' notes."""
    from clinicode.predict import Predictor

    texts, y, partly = _notes()
    data = _coded_folder(tmp_path / "data", texts, y, np.flatnonzero(partly.known))
    if not named:
        (data / "manifest.json").write_text("{}")
    succeeds(["train", "--data", data, "--out", tmp_path / "run", "--model", "tfidf-lr", "--device", "cpu",
              "--no-progress"])
    said = Predictor.from_checkpoint(tmp_path / "run", device="cpu").predict(["alpha fever zorblax id5"], top_k=3)[0]
    # test's notes were never read for NEW either: its metrics leave it out and say so
    metrics = json.loads((tmp_path / "run" / "checkpoint" / "metrics_test.json").read_text())
    assert metrics["n_labels"] == (2 if named else 3)
    assert metrics.get("codes_not_coded_in_split") == (["NEW"] if named else None)
    evaluated = tmp_path / "eval.json"
    succeeds(["evaluate", "--checkpoint", tmp_path / "run", "--data", data, "--output", evaluated])
    again = json.loads(evaluated.read_text())   # `evaluate` on the same folder scores the same codes
    assert again["n_labels"] == metrics["n_labels"] and again["f1_micro"] == pytest.approx(metrics["f1_micro"])
    assert again.get("codes_not_coded_in_split") == metrics.get("codes_not_coded_in_split")
    assert again["evidence"]["n_pairs"] == 4   # the highlights are judged with the model's every code
    scores = {p.code: p.score for p in said.predicted}
    if named:   # the checkpoint's fit is the one on the notes read for NEW, not the one on every note
        from clinicode.config import TrainConfig

        fits = [fit_tfidf_lr(texts, y, single_label=False, min_doc_freq=TrainConfig.min_doc_freq, partly=given)
                .predict_proba(["alpha fever zorblax id5"])[0, 2] for given in (partly, None)]
        assert scores.get("NEW") == pytest.approx(fits[0], rel=1e-5) and fits[0] > fits[1] + 0.1
    else:
        assert "NEW" not in scores


@pytest.mark.parametrize("named", [True, False])
def test_leams_epochs_see_partly_coded_labels_as_unknown_on_unread_notes(tmp_path, monkeypatch, named):
    """The loop's labels hold UNKNOWN exactly where a named code meets a note never read for it (and not carrying it),
    and its objective is told so; a folder naming none trains on 0/1 alone."""
    from clinicode.config import TrainConfig
    from clinicode.train import train
    from clinicode.training import loop

    seen = []
    forward = loop.Objective.forward

    def spy(self, ids, mask, y, share=None):
        seen.append((self.partly, y.clone()))
        return forward(self, ids, mask, y, share)

    monkeypatch.setattr(loop.Objective, "forward", spy)
    scored = []   # the codes each epoch's dev F1 (which chooses the epoch) is over
    all_metrics = loop.all_metrics
    monkeypatch.setattr(loop, "all_metrics", lambda y, s, **kw: scored.append(y.shape[1]) or all_metrics(y, s, **kw))
    texts, y, partly = _notes()
    data = _coded_folder(tmp_path / "data", texts, y, np.flatnonzero(partly.known) if named else [])
    if not named:
        (data / "manifest.json").write_text("{}")
    train(out_dir=tmp_path / "run", data_dir=data, progress=False,
          config=TrainConfig(model="leam", epochs=1, batch_size=64, w2v_epochs=1, seed=0, device="cpu"),
          model_options=dict(embed_dim=8, radius=1, hidden_dim=8))
    labels = torch.cat([b for _, b in seen])
    unknown = (labels == UNKNOWN).sum(dim=0).tolist()
    assert all(flag == named for flag, _ in seen)
    assert unknown == ([0, 0, 40] if named else [0, 0, 0])   # the 40 unread notes, for NEW only
    assert scored == [2 if named else 3]                      # dev was never coded for NEW either


def test_the_default_models_refit_on_train_and_dev_keeps_dev_unread_for_them(tmp_path):
    """`--fit-on train+dev` (the fused default) refits tfidf-lr on train and dev: a partly coded code's LR is the one
    fitted on the notes read for it, dev's notes (never read for it) left out like the unread training notes."""
    from clinicode.checkpoint import load_checkpoint
    from clinicode.config import TrainConfig
    from clinicode.train import train

    texts, y, partly = _notes()
    data = _coded_folder(tmp_path / "data", texts, y, np.flatnonzero(partly.known))
    train(out_dir=tmp_path / "run", data_dir=data, progress=False,
          config=TrainConfig(epochs=1, batch_size=64, w2v_epochs=1, seed=0, device="cpu"),
          model_options=dict(embed_dim=8, radius=1, hidden_dim=8, fit_on="train+dev"))
    ck = load_checkpoint(tmp_path / "run")
    dev = [json.loads(line) for line in (data / "dev.jsonl").read_text().splitlines()]
    order = np.argsort([f"n{i}" for i in range(len(texts))], kind="stable")   # train fits its notes in id order
    in_order = sorted(range(len(dev)), key=lambda i: dev[i]["id"])
    both = [texts[i] for i in order] + [dev[i]["text"] for i in in_order]
    y_both = np.vstack([y[order], LABELS.multi_hot([dev[i]["labels"] for i in in_order])])
    read = PartlyCoded(partly.columns, partly.known[order])
    want = fit_tfidf_lr(both, y_both, single_label=False, min_doc_freq=TrainConfig.min_doc_freq,
                        partly=read.then_unread(len(dev)))
    probe = ["alpha fever zorblax id5"]
    assert ck.model.fusion["fit_on"] == "train+dev"
    np.testing.assert_allclose(ck.model.lr.predict_proba(probe), want.predict_proba(probe), rtol=1e-5)


def test_evaluate_judges_highlights_by_every_codes_scores_when_a_left_out_code_comes_first(tmp_path):
    """With NEW first in the label set, the codes scored are the later columns: the highlights must still read each
    code's own column of the scores (all of them): each test note's A or B is predicted where it is marked."""
    texts, y, partly = _notes()
    first = LabelSet(("NEW", "A", "B"), ("zorblax syndrome", "alpha", "beta"))
    data = _coded_folder(tmp_path / "data", texts, y, np.flatnonzero(partly.known), labels=first)
    succeeds(["train", "--data", data, "--out", tmp_path / "run", "--model", "tfidf-lr", "--device", "cpu",
              "--no-progress"])
    out = tmp_path / "eval.json"
    succeeds(["evaluate", "--checkpoint", tmp_path / "run", "--data", data, "--output", out])
    got = json.loads(out.read_text())
    assert got["codes_not_coded_in_split"] == ["NEW"] and got["n_labels"] == 2
    assert got["evidence"]["n_pairs"] == 4 and got["evidence"]["n_correct"] == 4   # each note's code, predicted
