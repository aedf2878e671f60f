"""TF-IDF + logistic-regression baseline: learning, constant labels, pickle-free save/load, damaged folders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from clinicode.errors import CheckpointError, ConfigError
from clinicode.metrics import micro_prf
from clinicode.models.tfidf_lr.baseline import META_NAME, WEIGHTS_NAME, TfidfLR, TfidfLRConfig, _Analyzer

# Invented snippets; each label has its own cue words, the filler is shared noise.
CUES = [["heart", "failure", "cardiac"], ["kidney", "renal", "dialysis"], ["pneumonia", "lung", "cough"]]
FILLER = "patient admitted stable discharged home daily follow clinic history noted".split()


def make_docs(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random((n, len(CUES))) < 0.4).astype(np.float32)
    texts = []
    for row in y:
        words = list(rng.choice(FILLER, size=12))
        for j in np.flatnonzero(row):
            words += list(rng.choice(CUES[j], size=2))
        rng.shuffle(words)
        texts.append(" ".join(words) + " 2024 12")  # numbers are dropped by the CAML tokeniser
    return texts, y


@pytest.fixture(scope="module")
def toy() -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    return (*make_docs(120, 0), *make_docs(60, 1))


@pytest.fixture(scope="module")
def fitted(toy) -> TfidfLR:
    texts, y, _, _ = toy
    return TfidfLR(TfidfLRConfig(), n_labels=3).fit(texts, y)


def test_learns_separable_toy_problem(toy, fitted: TfidfLR) -> None:
    _, _, texts_te, y_te = toy
    proba = fitted.predict_proba(texts_te)
    assert proba.shape == (60, 3) and proba.dtype == np.float32
    assert ((proba >= 0) & (proba <= 1)).all()
    assert micro_prf(y_te, proba > 0.5)[2] > 0.95


def test_vocabulary_uses_caml_tokens(fitted: TfidfLR) -> None:
    assert "2024" not in fitted.vocabulary and "12" not in fitted.vocabulary
    assert fitted.vocabulary == sorted(fitted.vocabulary)
    assert set(CUES[0]) <= set(fitted.vocabulary)


def test_bigram_analyzer() -> None:
    assert _Analyzer(1)("Heart Failure, 2 days") == ["heart", "failure", "days"]
    assert _Analyzer(2)("Heart Failure, 2 days") == ["heart", "failure", "days", "heart failure", "failure days"]
    texts, y = make_docs(40, 3)
    model = TfidfLR(TfidfLRConfig(ngram_max=2), n_labels=3).fit(texts, y)
    assert any(" " in t for t in model.vocabulary)


def test_constant_label_columns_do_not_crash(toy) -> None:
    texts, y, texts_te, _ = toy
    n = len(texts)
    y4 = np.concatenate([y, np.zeros((n, 1), np.float32), np.ones((n, 1), np.float32)], axis=1)  # [N, 5]
    model = TfidfLR(TfidfLRConfig(), n_labels=5).fit(texts, y4)
    proba = model.predict_proba(texts_te)
    assert proba.shape == (60, 5)
    assert (proba[:, 3] < 0.01).all() and (proba[:, 4] > 0.99).all()
    assert np.allclose(proba[:, 3], proba[0, 3]) and np.isfinite(proba).all()


def test_fit_is_deterministic(toy, fitted: TfidfLR) -> None:
    texts, y, _, _ = toy
    again = TfidfLR(TfidfLRConfig(), n_labels=3).fit(texts, y)
    np.testing.assert_array_equal(again.coef, fitted.coef)


def test_save_load_round_trip_is_exact_and_pickle_free(tmp_path: Path, toy, fitted: TfidfLR) -> None:
    _, _, texts_te, _ = toy
    fitted.save(tmp_path / "ckpt")
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [META_NAME, WEIGHTS_NAME]
    for p in (tmp_path / "ckpt").iterdir():
        assert not p.read_bytes().startswith(b"\x80")  # pickle protocol 2+ magic
    tensors = load_file(str(tmp_path / "ckpt" / WEIGHTS_NAME))
    v = len(fitted.vocabulary)
    assert {k: (t.shape, t.dtype) for k, t in tensors.items()} == {
        "idf": ((v,), np.float32),
        "coef": ((3, v), np.float32),
        "intercept": ((3,), np.float32),
    }
    meta = json.loads((tmp_path / "ckpt" / META_NAME).read_text())
    assert meta["n_labels"] == 3 and meta["vocabulary"] == fitted.vocabulary
    assert meta["config"] == TfidfLRConfig().to_json()

    loaded = TfidfLR.load(tmp_path / "ckpt")
    assert loaded.config == fitted.config
    texts = texts_te + ["", "unseen words only"]
    np.testing.assert_array_equal(loaded.predict_proba(texts), fitted.predict_proba(texts))


def test_softmax_mode(tmp_path: Path) -> None:
    texts, y = make_docs(90, 4)
    target = np.zeros_like(y)
    target[np.arange(len(y)), np.argmax(np.c_[y, np.full(len(y), 0.5)], axis=1) % 3] = 1  # one label per row
    model = TfidfLR(TfidfLRConfig(softmax=True), n_labels=4).fit(texts, np.c_[target, np.zeros(len(y))])
    proba = model.predict_proba(texts)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)
    assert (proba[:, 3] < 1e-6).all()  # class absent from training
    model.save(tmp_path)
    np.testing.assert_array_equal(TfidfLR.load(tmp_path).predict_proba(texts), proba)
    with pytest.raises(ValueError, match="softmax=True needs exactly one label per document"):
        TfidfLR(TfidfLRConfig(softmax=True), n_labels=3).fit(texts, y)


# -------------------------------------------------------------------------------------- bad inputs


def test_missing_file_raises_checkpoint_error(tmp_path: Path, fitted: TfidfLR) -> None:
    fitted.save(tmp_path)
    (tmp_path / META_NAME).unlink()
    with pytest.raises(CheckpointError, match=r"missing tfidf_lr\.json; expected a folder written by TfidfLR\.save"):
        TfidfLR.load(tmp_path)
    with pytest.raises(CheckpointError, match=r"missing tfidf_lr\.safetensors, tfidf_lr\.json"):
        TfidfLR.load(tmp_path / "nowhere")


def test_damaged_weights_raise_checkpoint_error(tmp_path: Path, fitted: TfidfLR) -> None:
    fitted.save(tmp_path)
    data = (tmp_path / WEIGHTS_NAME).read_bytes()
    (tmp_path / WEIGHTS_NAME).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError,
                       match=r"tfidf_lr\.safetensors is damaged \(\w+\); re-fit and save the baseline\.$"):
        TfidfLR.load(tmp_path)


def test_damaged_json_raises_checkpoint_error(tmp_path: Path, fitted: TfidfLR) -> None:
    fitted.save(tmp_path)
    (tmp_path / META_NAME).write_text("{not json")
    with pytest.raises(CheckpointError, match=r"tfidf_lr\.json is damaged \(JSONDecodeError"):
        TfidfLR.load(tmp_path)
    meta = fitted.config.to_json() | {"hiden": 1}
    (tmp_path / META_NAME).write_text(json.dumps({"n_labels": 3, "vocabulary": fitted.vocabulary, "config": meta}))
    with pytest.raises(CheckpointError, match=r"unknown key 'hiden' in TfidfLRConfig"):
        TfidfLR.load(tmp_path)


def test_shape_disagreement_raises_checkpoint_error(tmp_path: Path, fitted: TfidfLR) -> None:
    fitted.save(tmp_path)
    meta = json.loads((tmp_path / META_NAME).read_text())
    v = len(meta["vocabulary"])
    meta["vocabulary"] = meta["vocabulary"][:-1]
    (tmp_path / META_NAME).write_text(json.dumps(meta))
    with pytest.raises(
        CheckpointError,
        match=rf"tfidf_lr\.safetensors and tfidf_lr\.json disagree: idf has shape \({v},\) but the JSON "
        rf"\(vocabulary of {v - 1} terms, 3 labels\) needs \({v - 1},\)",
    ):
        TfidfLR.load(tmp_path)
    meta["vocabulary"] = fitted.vocabulary
    meta["n_labels"] = 4
    (tmp_path / META_NAME).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"disagree: coef has shape \(3, \d+\)"):
        TfidfLR.load(tmp_path)


def test_fit_rejects_wrong_shapes() -> None:
    with pytest.raises(ValueError, match=r"y has shape \(2, 3\) but 3 texts and n_labels=3 need shape \(3, 3\)"):
        TfidfLR(TfidfLRConfig(), n_labels=3).fit(["a b", "c d", "e f"], np.zeros((2, 3)))
    with pytest.raises(ValueError, match="no term is left from 2 training texts with min_df=2"):
        TfidfLR(TfidfLRConfig(), n_labels=1).fit(["alpha", "beta"], np.array([[0.0], [1.0]]))


def test_unfitted_model_refuses_to_predict(tmp_path: Path) -> None:
    model = TfidfLR(TfidfLRConfig(), n_labels=2)
    with pytest.raises(RuntimeError, match="TfidfLR is not fitted"):
        model.predict_proba(["text"])
    with pytest.raises(RuntimeError, match="TfidfLR is not fitted"):
        model.save(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_df": 0}, "min_df must be an integer >= 1, got 0"),
        ({"ngram_max": 3}, r"ngram_max must be 1 \(unigrams\) or 2"),
        ({"C": 0.0}, "C must be a positive number, got 0.0"),
        ({"class_weight": "auto"}, "class_weight must be None or 'balanced', got 'auto'"),
        ({"max_features": 0}, "max_features must be None or an integer >= 1"),
    ],
)
def test_config_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TfidfLRConfig(**kwargs)


def test_parallel_fit_matches_serial_fit(monkeypatch: pytest.MonkeyPatch, toy, fitted: TfidfLR) -> None:
    import clinicode.models.tfidf_lr.baseline as baseline

    texts, y, _, _ = toy
    monkeypatch.setattr(baseline, "_PARALLEL_MIN_DOCS", 0)  # force the two-process path on the toy data
    parallel = TfidfLR(TfidfLRConfig(), n_labels=3).fit(texts, y)
    np.testing.assert_array_equal(parallel.coef, fitted.coef)
    np.testing.assert_array_equal(parallel.intercept, fitted.intercept)
