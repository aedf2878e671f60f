"""The fused model (LEAM + tfidf-lr per code): it trains, its checkpoint saves, verifies, loads, predicts and
explains, and every number of its fusion is learnt on dev."""

import json

import numpy as np
import pandas as pd
import pytest

from clinicode.checkpoint import load_checkpoint, verify_checkpoint
from clinicode.config import TrainConfig
from clinicode.models.fused.fusion import Fusion, fit_fusion, fused_logits, per_code_offsets, sigmoid
from clinicode.models.fused.training import PER_CODE_THRESHOLDS
from clinicode.predict import Predictor
from clinicode.train import train

from conftest import TINY_MODEL

SIZES = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}


@pytest.fixture(scope="module")
def fused_run(demo_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("fused") / "run"
    lines = []
    # the parts as fitted on train, so that the fusion can be recomputed from the checkpoint's own parts on dev
    # (the default, --fit-on train+dev, refits them afterwards: tests/train/test_fit_on.py)
    cfg = TrainConfig(model="fused", epochs=4, batch_size=16, lr=2e-2, w2v_epochs=2, patience=3, seed=7, device="cpu")
    res = train(out_dir=run, config=cfg, data_dir=demo_data, model_options={**SIZES, "fit_on": "train"},
                progress=False, report=lines.append)
    return run, res, lines


def _split(demo_data, name):
    df = pd.read_parquet(demo_data / f"{name}.parquet")
    return df["text"].tolist(), df["labels"].tolist()


def test_fused_checkpoint_saves_verifies_loads_and_round_trips(fused_run, demo_data):
    run, res, lines = fused_run
    ck_dir = run / "checkpoint"
    names = {p.name for p in ck_dir.iterdir()}
    assert {"model.safetensors", "tokenizer.json", "tfidf_lr.safetensors", "tfidf_lr.json", "fusion.safetensors",
            "fusion.json"} <= names
    manifest = json.loads((ck_dir / "manifest.json").read_text())
    assert manifest["model"] == "fused" and set(manifest["files"]) == names - {"manifest.json"}
    verify_checkpoint(ck_dir)
    ck = load_checkpoint(run)
    assert ck.kind == "fused" and ck.model.a.shape == (len(ck.labels),)
    texts, _ = _split(demo_data, "test")
    pred = Predictor.from_checkpoint(run, device="cpu")
    s = pred.score(texts[:20])
    # the score is the sigmoid of the stored fusion of the two parts' logits, nothing else
    z_leam, z_lr, z_title = pred.scorer.logits(texts[:20])
    np.testing.assert_allclose(s, sigmoid(ck.model.a * z_leam + ck.model.c * z_lr + ck.model.e * z_title
                                          + ck.model.offset), atol=1e-6)
    np.testing.assert_array_equal(s, Predictor.from_checkpoint(ck_dir, device="cpu").score(texts[:20]))
    m = json.loads((ck_dir / "metrics_test.json").read_text())
    assert m["f1_micro"] == pytest.approx(res["test"]["f1_micro"]) and m["auc_macro"] > 0.75
    assert any(line.startswith("time estimate: ~") and "s an epoch" in line for line in lines)
    assert any(line.startswith("fusion fitted on dev") for line in lines)


def test_a_damaged_fusion_file_is_one_line_naming_it(fused_run, tmp_path):
    import shutil

    from safetensors.numpy import save

    from clinicode.errors import CheckpointError
    from clinicode.models import model_kind

    run, _, _ = fused_run
    copy = tmp_path / "ck"
    shutil.copytree(run / "checkpoint", copy)
    (copy / "fusion.safetensors").write_bytes(save({k: np.zeros(3) for k in ("a", "c", "offset", "w")}))
    with pytest.raises(CheckpointError, match=r"fusion\.safetensors: holds .* need"):
        model_kind("fused").verify(copy)


def test_fusion_and_per_code_thresholds_are_learnt_on_dev(fused_run, demo_data):
    """Refit from each split's scores: the stored numbers are dev's, and not train's or test's."""
    run, _, _ = fused_run
    ck = load_checkpoint(run)
    pred = Predictor.from_checkpoint(run, device="cpu")
    counts = np.array([ck.train_counts[c] for c in ck.labels.codes])
    stored = ck.model.fusion
    fits = {}
    for split in ("train", "dev", "test"):
        texts, labels = _split(demo_data, split)
        y = ck.labels.multi_hot(labels).astype(bool)
        z_leam, z_lr, z_title = pred.scorer.logits(texts)
        f = fit_fusion(y, z_leam, z_lr, counts, z_title=z_title)
        a, c = f.coefficients(counts)
        from clinicode.metrics import tune_threshold

        z = a * z_leam + c * z_lr + f.title_coefficients(counts) * z_title + f.bias(counts)
        off = f.bias(counts) + (per_code_offsets(y, z, counts, tune_threshold(y, sigmoid(z))) if PER_CODE_THRESHOLDS
                                else 0.0)
        fits[split] = (f.t_leam, f.t_lr, f.weights, a, c, off, f.scales, f.biases, f.title_weights)
    t_leam, t_lr, weights, a, c, off = fits["dev"][:6]
    assert (stored["t_leam"], stored["t_lr"], stored["weights"]) == (t_leam, t_lr, weights)
    assert (stored["scales"], stored["biases"], stored["title_weights"]) == fits["dev"][6:9]
    np.testing.assert_array_equal(ck.model.a, a)
    np.testing.assert_array_equal(ck.model.c, c)
    np.testing.assert_array_equal(ck.model.offset, off)
    for other in ("train", "test"):   # fitted there, the numbers would differ: the check above can tell
        o = fits[other]
        assert (o[0], o[1], o[2]) != (t_leam, t_lr, weights) or not np.array_equal(o[5], off), other


def test_band_weights_follow_dev_and_offsets_map_a_code_threshold_onto_the_global_one():
    rng = np.random.default_rng(0)
    n, k = 400, 6
    y = rng.random((n, k)) < 0.2
    signal = np.where(y, 2.0, -2.0)
    good, noise = signal + rng.normal(0, 1, (n, k)), rng.normal(0, 3, (n, k))
    counts = np.array([1, 2, 5, 20, 100, 200])   # bands 0, 0, 1, 2, 3, 3
    # LEAM informative on frequent codes only, tfidf-lr on rare ones: each band should lean on its informative part
    z_leam = np.where(counts > 10, good, noise)
    z_lr = np.where(counts > 10, noise, good)
    f = fit_fusion(y, z_leam, z_lr, counts)
    assert max(f.scales) > 0 and all(np.isfinite(f.biases))
    assert f.weights[0] <= 0.3 and f.weights[1] <= 0.3 and f.weights[2] >= 0.7 and f.weights[3] >= 0.7
    z = fused_logits(z_leam, z_lr, f, counts)
    t = 0.4
    off = per_code_offsets(y, z, counts, t, fbr=0.0)
    assert np.count_nonzero(off[counts >= 10]) == 0 and np.count_nonzero(off[counts < 10]) == 3
    shifted = Fusion(**{**f.__dict__, "offsets": off})
    zs = fused_logits(z_leam, z_lr, shifted, counts)
    # [shifted > t] is [fused > t_k] for each rare code: same predictions as its own threshold
    for j in np.flatnonzero(off):
        t_k = sigmoid(np.log(t / (1 - t)) - off[j])
        np.testing.assert_array_equal(sigmoid(zs[:, j]) > t, sigmoid(z[:, j]) > t_k - 1e-12)


def test_evidence_shows_the_words_that_carried_the_bag_of_words_part(fused_run, demo_data):
    run, _, _ = fused_run
    pred = Predictor.from_checkpoint(run, device="cpu")
    model, scorer = pred.scorer.model, pred.scorer
    texts, _ = _split(demo_data, "test")
    text = texts[0]
    enc = scorer.encode([text], offsets=True)[0]
    ids = np.asarray(enc.ids)
    code = int(np.argmax(model.lr.decision_function([text])[0]))
    model.c[code] = abs(model.c[code]) or 1.0   # the code's tfidf-lr part counts (the fit may have given it 0)
    # the tfidf-lr part's word contributions, from its own features: coefficient x tf-idf weight in this note
    x = model.lr.transform([text]).toarray()[0]
    per_feature = model.lr.coef[code] * x
    rows = scorer.lr_word_rows(ids, [code])[0]
    best_token = int(np.argmax(rows))
    word = {i: w for w, i in scorer.tokenizer.vocab().items()}[int(ids[best_token])]
    feature = model.lr.vocabulary.index(word)
    assert per_feature[feature] == pytest.approx(per_feature.max(), rel=0.05)
    # a code that leans wholly on tfidf-lr shows those words beside LEAM's, at half weight each (the evidence floor);
    # wholly on LEAM, LEAM's cosines
    saved, saved_e = model.w.copy(), model.e.copy()
    try:
        model.w[:], model.e[:] = 0.0, 0.0
        lr_only = scorer.word_rows(ids, [code])[0]
        g = scorer.leam.word_rows(ids, [code])[0].astype(np.float64)
        c = np.clip(model.c[code] * rows, 0.0, None)
        expected = 0.5 * g / g.max() + 0.5 * c / c.max()
        np.testing.assert_allclose(lr_only, expected, rtol=1e-5, atol=1e-6)
        assert lr_only[best_token] >= 0.5 - 1e-6
        model.w[:] = 1.0
        leam_only = scorer.word_rows(ids, [code])[0]
        g = scorer.leam.word_rows(ids, [code])[0]
        assert int(np.argmax(leam_only)) == int(np.argmax(g))
    finally:
        model.w[:], model.e[:] = saved, saved_e
    rec = pred.predict([text], explain=3)[0]
    assert rec.predicted and set(rec.code_phrases) == {c.code for c in rec.predicted}
    assert all(spans for spans in rec.code_phrases.values())


def test_cli_predicts_and_explains_with_a_fused_checkpoint(fused_run, tmp_path):
    from typer.testing import CliRunner

    from clinicode.cli import app

    run, _, _ = fused_run
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "n1", "text": "fever and cough, chest pain, shortness of breath"}) + "\n")
    out = tmp_path / "out.jsonl"
    r = CliRunner().invoke(app, ["predict", "--checkpoint", str(run), "--input", str(src), "--output", str(out),
                                 "--explain", "2", "--threshold", "0.0"])
    assert r.exit_code == 0, r.output
    rec = json.loads(out.read_text().splitlines()[0])
    assert rec["id"] == "n1" and rec["predicted"] and rec["evidence"]["codes"]


def test_the_leam_part_is_capped_only_on_large_label_sets():
    from clinicode.models import MODEL_KINDS

    kind = MODEL_KINDS["fused"]
    default = kind.options_type()
    for mentions in (True, False):
        # every code: tfidf-lr, the titles (and the mentions) carry the tail
        assert kind.loop_epochs(TrainConfig(), default, 664, mentions=mentions) == 30
        # 50 codes: LEAM trains until its patience ends it
        assert kind.loop_epochs(TrainConfig(), default, 50, mentions=mentions) == 200
        assert kind.loop_epochs(TrainConfig(epochs=10), default, 664, mentions=mentions) == 10
    # 300 codes: without mentions, capped, the fused model fell below LEAM alone; with them the epochs bought nothing
    assert kind.loop_epochs(TrainConfig(), default, 300, mentions=False) == 200
    assert kind.loop_epochs(TrainConfig(), default, 301, mentions=False) == 30
    assert kind.loop_epochs(TrainConfig(), default, 101, mentions=True) == 30
    assert kind.loop_epochs(TrainConfig(), default, 100, mentions=True) == 200
    assert kind.loop_epochs(TrainConfig(), kind.options_type(fused_epochs=45), 301, mentions=False) == 45


def test_codes_dev_was_never_read_for_leave_the_fusions_fit(fused_run, demo_data):
    """`fuse(unread=...)`: a code coders added in review (dev's notes were never read for it) takes its band's
    fusion, whatever dev's column of it says; the same column weighs in when it is not named."""
    from clinicode.models.fused.training import fuse

    run, _, _ = fused_run
    ck = load_checkpoint(run)
    counts = np.array([ck.train_counts[c] for c in ck.labels.codes])
    texts, labels = _split(demo_data, "dev")
    y = ck.labels.multi_hot(labels)
    j = int(np.argmax(counts))
    flipped = y.copy()
    flipped[:, j] = 1 - flipped[:, j]

    def fusion(gold, unread):
        model, _ = fuse(ck.model.leam, ck.tokenizer, ck.model.lr, mentions=ck.model.mentions, dev_texts=texts,
                        y_dev=gold, train_counts=counts, descriptions=ck.labels.descriptions, max_len=ck.max_len,
                        device="cpu", batch_size=16, memory_mb=512, unread=unread)
        return model.fusion["scales"], model.fusion["biases"], model.a.tolist(), model.c.tolist()

    assert fusion(y, [j]) == fusion(flipped, [j])
    assert fusion(y, []) != fusion(flipped, [])
