"""Training end to end on synthetic data: it learns, checkpoints round-trip, resume continues exactly."""

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from clinicode.checkpoint import load_checkpoint
from clinicode.config import TrainConfig
from clinicode.errors import ConfigError
from clinicode.predict import Predictor
from clinicode.train import train

from conftest import TINY_MODEL


def test_tiny_run_learns_well_above_chance(tiny_run):
    m = json.loads((tiny_run / "checkpoint" / "metrics_test.json").read_text())
    # chance micro-F1 for ~2 codes out of 50 is ~0.08; the synthetic notes carry clear signal
    assert m["f1_micro"] > 0.4, m["f1_micro"]
    assert m["auc_macro"] > 0.75
    for key in ("auc_macro", "auc_micro", "f1_macro", "f1_macro_mean", "f1_micro", "prec_at_5", "prec_at_8",
                "threshold", "n_docs"):
        assert key in m
    assert "threshold_0.5" in m and len(m["per_code"]) == 50
    hist = [json.loads(line) for line in (tiny_run / "history.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in hist] == list(range(1, len(hist) + 1))
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]


def test_checkpoint_is_self_contained_and_not_pickled(tiny_run):
    ck = tiny_run / "checkpoint"
    names = {p.name for p in ck.iterdir()}
    assert {"model.safetensors", "model_config.json", "labels.json", "tokenizer.json", "threshold.json",
            "train_config.json", "metrics_dev.json", "metrics_test.json", "manifest.json"} <= names
    for p in ck.iterdir():
        assert not p.read_bytes().startswith(b"\x80"), f"{p.name} looks like a pickle"
    manifest = json.loads((ck / "manifest.json").read_text())
    assert set(manifest["files"]) == names - {"manifest.json"}


def test_checkpoint_round_trip_gives_identical_scores(tiny_run, demo_data):
    import pandas as pd

    texts = pd.read_parquet(demo_data / "test.parquet")["text"].tolist()[:20]
    a = Predictor.from_checkpoint(tiny_run, device="cpu").score(texts)
    b = Predictor.from_checkpoint(tiny_run / "checkpoint", device="cpu").score(texts)
    np.testing.assert_array_equal(a, b)
    # the fast inference path (stored word-code table) equals the model's own forward pass
    ck = load_checkpoint(tiny_run)
    from clinicode.batching import pad_batch

    ids, mask = pad_batch(ck.tokenizer.encode_ids(texts))
    ref = ck.model.probabilities(ck.model(ids, mask).logits).detach().numpy()
    np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-5)


def test_test_metrics_equal_evaluate(tiny_run, demo_data):
    from clinicode.evaluate import evaluate

    m = evaluate(checkpoint=tiny_run, data_dir=demo_data, split="test", device="cpu")
    saved = json.loads((tiny_run / "checkpoint" / "metrics_test.json").read_text())
    for k in ("f1_micro", "f1_macro", "auc_macro", "prec_at_5", "threshold"):
        assert m[k] == pytest.approx(saved[k], abs=1e-12)


class Interrupted(Exception):
    """Raised from on_epoch to cut a run as a crash would, after its state is saved."""


def _stop_after(epoch: int):
    def on_epoch(row):
        if row["epoch"] == epoch:
            raise Interrupted
    return on_epoch


def _cfg(**kw):
    # patience in epochs alone (the tests count epochs; test_patience_waits_at_least_its_steps_... sets the floor)
    return TrainConfig(**{**dict(model="leam",
                                 epochs=3, batch_size=16, lr=5e-3, w2v_epochs=1, patience=5, seed=3, device="cpu",
                                 embeddings="random", patience_steps=0, lr_patience_steps=0), **kw})


def test_seeded_runs_repeat_exactly(demo_data, tmp_path):
    a = train(out_dir=tmp_path / "a", config=_cfg(epochs=2), data_dir=demo_data, model_options=TINY_MODEL,
              progress=False)
    b = train(out_dir=tmp_path / "b", config=_cfg(epochs=2), data_dir=demo_data, model_options=TINY_MODEL,
              progress=False)
    assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]
    wa = load_file(str(tmp_path / "a" / "checkpoint" / "model.safetensors"))
    wb = load_file(str(tmp_path / "b" / "checkpoint" / "model.safetensors"))
    assert all(np.array_equal(wa[k].numpy(), wb[k].numpy()) for k in wa)


def test_resume_after_interruption_matches_uninterrupted(demo_data, tmp_path):
    full = train(out_dir=tmp_path / "full", config=_cfg(), data_dir=demo_data, model_options=TINY_MODEL, progress=False)

    with pytest.raises(Interrupted):
        train(out_dir=tmp_path / "cut", config=_cfg(), data_dir=demo_data, model_options=TINY_MODEL, progress=False,
              on_epoch=_stop_after(1))
    # the interrupted run already has a loadable checkpoint
    assert load_checkpoint(tmp_path / "cut").kind == "leam"
    with pytest.raises(ConfigError, match="already holds a run; pass --resume"):
        train(out_dir=tmp_path / "cut", config=_cfg(), data_dir=demo_data, model_options=TINY_MODEL, progress=False)
    with pytest.raises(ConfigError, match="different options"):
        train(out_dir=tmp_path / "cut", config=_cfg(lr=1e-2), data_dir=demo_data, model_options=TINY_MODEL,
              progress=False, resume=True)
    resumed = train(out_dir=tmp_path / "cut", config=_cfg(), data_dir=demo_data, model_options=TINY_MODEL,
                    progress=False, resume=True)
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3]
    for x, y in zip(full["history"], resumed["history"]):
        assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-6)
    assert resumed["test"]["f1_micro"] == pytest.approx(full["test"]["f1_micro"], abs=1e-6)
    # the saved weights (the moving average, by default) continue exactly too
    a = load_file(str(tmp_path / "full" / "checkpoint" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "checkpoint" / "model.safetensors"))
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("ema", [0.0, 0.99])
def test_checkpoint_holds_the_weight_average_and_state_the_live_weights(demo_data, tmp_path, ema):
    train(out_dir=tmp_path / "r", config=_cfg(epochs=1, ema_decay=ema), data_dir=demo_data, model_options=TINY_MODEL,
          progress=False)
    saved = load_file(str(tmp_path / "r" / "checkpoint" / "model.safetensors"))
    live = load_file(str(tmp_path / "r" / "state" / "last.safetensors"))
    if ema == 0:
        assert not (tmp_path / "r" / "state" / "ema.safetensors").exists()
        for name in saved:
            torch.testing.assert_close(saved[name], live[name], rtol=0, atol=0)
        return
    avg = load_file(str(tmp_path / "r" / "state" / "ema.safetensors"))
    for name in avg:                                   # one epoch: the best state is the average after it
        torch.testing.assert_close(saved[name], avg[name], rtol=0, atol=0)
    assert not torch.equal(saved["word_emb.weight"], live["word_emb.weight"])


def test_tfidf_lr_goes_through_the_same_interfaces(demo_data, tmp_path):
    from clinicode.evaluate import evaluate

    res = train(out_dir=tmp_path / "lr", config=TrainConfig(model="tfidf-lr"), data_dir=demo_data, progress=False)
    assert res["test"]["f1_micro"] > 0.5
    pred = Predictor.from_checkpoint(tmp_path / "lr", device="cpu")
    assert pred.kind == "tfidf-lr"
    out = pred.predict(["the patient has hypertension"], top_k=3)[0]
    assert len(out.scores) == 3 and out.error is None
    m = evaluate(checkpoint=tmp_path / "lr", data_dir=demo_data, device="cpu")
    assert m["f1_micro"] == pytest.approx(res["test"]["f1_micro"])
    assert not math.isnan(m["auc_macro"])


def test_single_label_data_uses_softmax(tmp_path):
    rows = {"train": 60, "dev": 20, "test": 20}
    words = {"cardio": "heart valve murmur chest", "neuro": "brain seizure headache nerve",
             "ortho": "bone fracture knee joint"}
    import random

    rng = random.Random(0)
    (tmp_path / "data").mkdir()
    for split, n in rows.items():
        with open(tmp_path / "data" / f"{split}.jsonl", "w") as f:
            for i in range(n):
                lab = rng.choice(sorted(words))
                text = " ".join(rng.choice(words[lab].split()) for _ in range(6)) + " patient seen today"
                f.write(json.dumps({"id": f"{split}{i}", "text": text, "labels": [lab]}) + "\n")
    res = train(out_dir=tmp_path / "run", config=_cfg(epochs=8, lr=1e-2), data_dir=tmp_path / "data",
                model_options=dict(TINY_MODEL, dropout=0.0), progress=False)
    ck = load_checkpoint(tmp_path / "run")
    assert ck.model.config.multilabel is False
    assert res["test"]["accuracy"] > 0.8
    probs = Predictor(ck).score(["brain seizure"])
    assert probs.sum() == pytest.approx(1.0, abs=1e-5)
    # the predicted sets themselves (not `accuracy`, which has its own arg-max): one code per note, mostly the right
    # one, and the metrics agree; the bug this pins predicted every code of a softmax model at the tuned threshold
    test = [json.loads(line) for line in (tmp_path / "data" / "test.jsonl").read_text().splitlines()]
    preds = Predictor(ck).predict([r["text"] for r in test], ids=[r["id"] for r in test], top_k=None)
    assert all(len(p.predicted) == 1 for p in preds)
    right = sum(p.predicted[0].code == r["labels"][0] for p, r in zip(preds, test))
    assert right / len(test) > 0.8
    assert res["test"]["f1_micro"] == pytest.approx(right / len(test))   # one predicted and one gold code per note


def test_bad_data_or_options_leave_no_run_folder(tmp_path, demo_data):
    from clinicode.errors import DataFormatError

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises((ConfigError, DataFormatError)):
        train(out_dir=tmp_path / "r1", config=_cfg(), data_dir=empty, progress=False)
    assert not (tmp_path / "r1").exists()
    with pytest.raises(ConfigError, match="radius"):
        train(out_dir=tmp_path / "r2", config=_cfg(), data_dir=demo_data, model_options={"radius": -1}, progress=False)
    assert not (tmp_path / "r2").exists()
    with pytest.raises(ConfigError, match="over --memory-budget 64 MB; lower --batch-size"):
        train(out_dir=tmp_path / "r3", config=TrainConfig(model="leam", batch_size=512,
                                                                    memory_mb=64), data_dir=demo_data,
              progress=False)
    assert not (tmp_path / "r3").exists()


def test_the_memory_plan_is_reported_and_recorded(tiny_run, tmp_path):
    """The tiny run has 50 codes and 32-d vectors (K > P): trained by code blocks; predicted with the stored table."""
    from tests.helpers import succeeds

    manifest = json.loads((tiny_run / "checkpoint" / "manifest.json").read_text())
    assert manifest["memory"]["order"] == "many codes" and manifest["memory"]["budget_mb"] == TrainConfig().memory_mb
    src = tmp_path / "n.jsonl"
    src.write_text(json.dumps({"id": "a", "text": "hypertension and heart failure"}) + "\n")
    res = succeeds(["predict", "--checkpoint", tiny_run, "--input", src, "--output", tmp_path / "o.jsonl",
                    "--memory-budget", "100", "--no-progress"])
    assert "memory plan: table; one batch" in res.stderr and "--memory-budget 100 MB" in res.stderr


def test_top_k_says_how_many_notes_it_dropped(tmp_path, caplog):
    # --top-k also drops notes left without a kept label; that must not happen silently.
    import random

    rng = random.Random(1)
    topics = {"a": "alpha apple arm", "b": "beta bone back", "c": "gamma cell chest"}
    dropped = {"train": 0, "dev": 0, "test": 0}
    (tmp_path / "data").mkdir()
    for split, n in {"train": 60, "dev": 20, "test": 20}.items():
        with open(tmp_path / "data" / f"{split}.jsonl", "w") as f:
            for i in range(n):
                labels = [] if i % 5 == 0 else [rng.choice("ab") if i % 7 else "c"]
                dropped[split] += not labels or labels == ["c"]
                text = " ".join(rng.choice(topics[labels[0]].split()) if labels else "note" for _ in range(5))
                f.write(json.dumps({"id": f"{split}{i}", "text": text, "labels": labels}) + "\n")
    with caplog.at_level("WARNING", logger="clinicode.train"):
        train(out_dir=tmp_path / "run", config=TrainConfig(model="tfidf-lr", top_k=2), data_dir=tmp_path / "data",
              progress=False)
    [msg] = [r.getMessage() for r in caplog.records if "--top-k" in r.getMessage()]
    assert msg.startswith(f"--top-k 2 kept 2 labels and dropped {sum(dropped.values())} notes")
    assert f"train {dropped['train']}, dev {dropped['dev']}, test {dropped['test']}" in msg
    manifest = json.loads((tmp_path / "run" / "checkpoint" / "manifest.json").read_text())
    assert manifest["data"]["dropped_without_top_k_label"] == dropped


def test_icd10_cm_codes_without_descriptions_get_the_cms_titles(tmp_path):
    """A coded-notes folder of ICD-10-CM codes that brings no descriptions: titles come from the packaged CMS tables
    (into labels.json and so into LEAM's starting code vectors and every output)."""
    d = tmp_path / "data"
    d.mkdir()
    words = {"J18.9": "pneumonia infiltrate cough", "I10": "hypertension blood pressure", "E11.9": "diabetes glucose"}
    for split, n in (("train", 30), ("dev", 9)):
        rows = [{"id": f"{split}{i}", "text": f"{list(words.values())[i % 3]} seen today",
                 "labels": [list(words)[i % 3]]}
                for i in range(n)]
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    train(out_dir=tmp_path / "run", config=TrainConfig(model="tfidf-lr"), data_dir=d, progress=False)
    labels_json = (tmp_path / "run" / "checkpoint" / "labels.json").read_text()
    labels = {x["code"]: x["description"] for x in json.loads(labels_json)}
    assert labels == {"E11.9": "Type 2 diabetes mellitus without complications",
                      "I10": "Essential (primary) hypertension",
                      "J18.9": "Pneumonia, unspecified organism"}


def _rows(res):
    return [(h["epoch"], h["lr"], h["best"]) for h in res["history"]]


def test_plateau_schedule_decays_after_each_epoch_without_a_dev_gain_and_resume_keeps_the_rate(demo_data, tmp_path):
    # lr 1e-9: the weights barely move, so dev micro-F1 only improves at epoch 1 and every later epoch is a stall
    cfg = _cfg(epochs=4, lr=1e-9, lr_decay=0.5, lr_patience=1, patience=10)
    full = train(out_dir=tmp_path / "full", config=cfg, data_dir=demo_data, model_options=TINY_MODEL, progress=False)
    assert _rows(full) == [(1, 1e-9, True), (2, 1e-9, False), (3, 5e-10, False), (4, 2.5e-10, False)]

    with pytest.raises(Interrupted):
        train(out_dir=tmp_path / "cut", config=cfg, data_dir=demo_data, model_options=TINY_MODEL, progress=False,
              on_epoch=_stop_after(2))
    resumed = train(out_dir=tmp_path / "cut", config=cfg, data_dir=demo_data, model_options=TINY_MODEL, progress=False,
                    resume=True)
    assert _rows(resumed) == _rows(full)  # the decayed rate lives in the optimiser's saved state


def test_lr_patience_waits_and_constant_never_decays(demo_data, tmp_path):
    two = train(out_dir=tmp_path / "two", config=_cfg(epochs=4, lr=1e-9, lr_patience=2, patience=10),
                data_dir=demo_data,
                model_options=TINY_MODEL, progress=False)
    assert [r[1] for r in _rows(two)] == [1e-9, 1e-9, 1e-9, 5e-10]   # decayed once, after epochs 2 and 3 stalled
    flat = train(out_dir=tmp_path / "flat", config=_cfg(epochs=3, lr=1e-9, lr_schedule="constant", patience=10),
                 data_dir=demo_data, model_options=TINY_MODEL, progress=False)
    assert [r[1] for r in _rows(flat)] == [1e-9] * 3


def test_training_says_how_it_ended(demo_data, tmp_path):
    quiet = []
    stalled = train(out_dir=tmp_path / "p", config=_cfg(epochs=6, lr=1e-9, patience=1), data_dir=demo_data,
                    model_options=TINY_MODEL, progress=False, report=quiet.append)
    assert stalled["stopped"] == "patience" and len(stalled["history"]) == 3
    assert not any("still improving" in line for line in quiet)
    lines = []
    capped = train(out_dir=tmp_path / "c", config=_cfg(epochs=1), data_dir=demo_data, model_options=TINY_MODEL,
                   progress=False, report=lines.append)
    assert capped["stopped"] == "epochs"
    assert any("reached --epochs 1 while dev was still improving" in line for line in lines)
    manifest = json.loads((tmp_path / "c" / "checkpoint" / "manifest.json").read_text())
    assert manifest["stopped"] == "epochs"


def test_test_metrics_carry_the_rare_and_frequent_slices(tiny_run):
    m = json.loads((tiny_run / "checkpoint" / "metrics_test.json").read_text())
    sl = m["slices"]
    assert sl["rare"]["n_codes"] + sl["frequent"]["n_codes"] == len(m["per_code"])
    rare = [r for r in m["per_code"] if r["train_count"] < sl["rare_below"]]
    assert sl["rare"]["n_codes"] == len(rare)
    aucs = [r["auc"] for r in rare if r["auc"] is not None]
    assert sl["rare"]["auc_macro"] == (pytest.approx(sum(aucs) / len(aucs)) if aucs else None)


def test_runs_saved_before_the_schedule_existed_read_as_constant_rate(tiny_run, demo_data, tmp_path):
    """A checkpoint or run state written before `lr_schedule` existed trained at a constant rate: it must not be
    described (model card) or resumed as if it had used today's default."""
    import shutil

    ck = tmp_path / "old" / "checkpoint"
    shutil.copytree(tiny_run / "checkpoint", ck)
    path = ck / "train_config.json"
    saved = json.loads(path.read_text())
    for key in ("lr_schedule", "lr_decay", "lr_patience"):
        saved.pop(key)
    path.write_text(json.dumps(saved))
    assert load_checkpoint(ck, verify=False).train_config.lr_schedule == "constant"
    assert TrainConfig().lr_schedule == "plateau"

    cfg = _cfg(epochs=2)
    with pytest.raises(Interrupted):
        train(out_dir=tmp_path / "cut", config=cfg, data_dir=demo_data, model_options=TINY_MODEL, progress=False,
              on_epoch=_stop_after(1))
    state_file = tmp_path / "cut" / "state" / "state.json"
    state = json.loads(state_file.read_text())
    for key in ("lr_schedule", "lr_decay", "lr_patience"):
        state["train_config"].pop(key)
    state_file.write_text(json.dumps(state))
    with pytest.raises(ConfigError, match="lr_schedule"):
        train(out_dir=tmp_path / "cut", config=cfg, data_dir=demo_data, model_options=TINY_MODEL, progress=False,
              resume=True)
    from dataclasses import replace

    resumed = train(out_dir=tmp_path / "cut", config=replace(cfg, lr_schedule="constant"), data_dir=demo_data,
                    model_options=TINY_MODEL, progress=False, resume=True)
    assert [h["epoch"] for h in resumed["history"]] == [1, 2]


def test_patience_waits_at_least_its_steps_on_a_set_of_short_epochs(demo_data, tmp_path):
    """Issue 35: on a few hundred notes an epoch is a few dozen steps; patience 0 would stop after the first stall,
    but it is never shorter than patience_steps, so the run stalls for that many epochs' steps first."""
    from clinicode.data.prepared import load_dataset

    steps = -(-len(load_dataset(demo_data).split("train")) // 16)              # optimiser steps in one epoch
    cfg = _cfg(epochs=10, lr=1e-9, patience=0, patience_steps=2 * steps + 1, lr_patience_steps=0)
    assert cfg.patience_epochs(steps)[0] == 3
    res = train(out_dir=tmp_path / "run", config=cfg, data_dir=demo_data, model_options=TINY_MODEL, progress=False)
    # lr 1e-9: dev improves at epoch 1 only; then more than 3 epochs without a gain end the run
    assert [h["best"] for h in res["history"]] == [True, False, False, False, False]
    assert json.loads((tmp_path / "run" / "checkpoint" / "manifest.json").read_text())["stopped"] == "patience"
