"""Bag-of-words baseline: TF-IDF over CAML tokens + one-vs-rest logistic regression.

Persisted as safetensors (idf, coef, intercept) + JSON (config, vocabulary); never pickled."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from joblib import Parallel, delayed
from safetensors.numpy import load as st_load, save as st_save
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression

from clinicode.config import TrainConfig
from clinicode.data.labels import PartlyCoded
from clinicode.data.text import tokenize
from clinicode.errors import CheckpointError, ConfigError
from clinicode.files import write_bytes_atomic, write_json_atomic

logger = logging.getLogger(__name__)

WEIGHTS_NAME = "tfidf_lr.safetensors"
META_NAME = "tfidf_lr.json"
FORMAT_NAME = "clinicode.tfidf_lr"
FORMAT_VERSION = 1

# Two workers at most: the machines this runs on have 2 cores and LEAM training may share them.
_N_JOBS = 2
_PARALLEL_MIN_DOCS = 2000
# A label that is constant in train gets logit((n_pos + 0.5) / (n + 1)): near 0 or 1, never exactly.
_CONST_SMOOTHING = 0.5
# In softmax mode a class absent from train gets this logit offset below the others' intercepts.
_ABSENT_CLASS_LOGIT = -30.0


@dataclass(frozen=True, kw_only=True)
class TfidfLRConfig:
    """Options of the TF-IDF + logistic-regression baseline.

    Defaults were chosen by 5-fold cross-validation on hoc and mtsamples train+dev (never test):
    class_weight="balanced" lifts micro-F1 at the fixed 0.5 threshold by 0.07-0.19 and is also best
    after dev tuning; C=16 (weak L2, as suits unit-norm tf-idf rows) ties or beats C=4; bigrams and
    min_df=1 did not help. Sublinear tf clearly helps (about +0.01 AUC).

    Args:
        min_df: keep terms in at least this many training documents.
        max_features: keep at most this many terms (most frequent first); None keeps all.
        ngram_max: 1 for unigrams, 2 for unigrams + bigrams of CAML tokens.
        C: inverse L2 regularisation strength of each logistic regression.
        class_weight: None or "balanced" (reweights positives of rare labels).
        sublinear_tf: use 1 + log(tf) instead of raw counts.
        max_iter: solver iteration cap.
        softmax: single-label mode: one multinomial LR, probabilities sum to 1 per document.
    """

    min_df: int = 2
    max_features: int | None = 200_000
    ngram_max: int = 1
    C: float = 16.0
    class_weight: str | None = "balanced"
    sublinear_tf: bool = True
    max_iter: int = 1000
    softmax: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.min_df, int) or self.min_df < 1:
            raise ConfigError(f"TfidfLRConfig.min_df must be an integer >= 1, got {self.min_df!r}.")
        if self.max_features is not None and (not isinstance(self.max_features, int) or self.max_features < 1):
            raise ConfigError(f"TfidfLRConfig.max_features must be None or an integer >= 1, got {self.max_features!r}.")
        if self.ngram_max not in (1, 2):
            raise ConfigError("TfidfLRConfig.ngram_max must be 1 (unigrams) or 2 (plus "
                              f"bigrams), got {self.ngram_max!r}.")
        if not isinstance(self.C, (int, float)) or not self.C > 0:
            raise ConfigError(f"TfidfLRConfig.C must be a positive number, got {self.C!r}.")
        if self.class_weight not in (None, "balanced"):
            raise ConfigError(f"TfidfLRConfig.class_weight must be None or 'balanced', got {self.class_weight!r}.")
        if not isinstance(self.max_iter, int) or self.max_iter < 1:
            raise ConfigError(f"TfidfLRConfig.max_iter must be an integer >= 1, got {self.max_iter!r}.")

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> "TfidfLRConfig":
        """Build from a dict; unknown keys are rejected by name (ConfigError)."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(obj) - set(known))
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r} in TfidfLRConfig; known keys: {', '.join(known)}.")
        return cls(**obj)


class _Analyzer:
    """CAML tokens, plus space-joined bigrams of consecutive tokens when ngram_max == 2."""

    def __init__(self, ngram_max: int) -> None:
        self.ngram_max = ngram_max

    def __call__(self, text: str) -> list[str]:
        toks = tokenize(text)
        if self.ngram_max >= 2:
            toks = toks + [f"{a} {b}" for a, b in zip(toks, toks[1:])]
        return toks


def _fit_binary(x: sp.csr_matrix, y: np.ndarray, config: TfidfLRConfig) -> tuple[np.ndarray, float]:
    """One label's LR: ([V] coef, intercept); constant columns get a smoothed-prevalence intercept."""
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.size:
        p = (n_pos + _CONST_SMOOTHING) / (y.size + 2 * _CONST_SMOOTHING)
        return np.zeros(x.shape[1]), float(np.log(p / (1 - p)))
    # liblinear's dual coordinate descent: with more tf-idf features than documents it was 2-5x faster
    # than its primal Newton solver, lbfgs or newton-cg at 8k docs x 20k terms, for the same optimum
    # (liblinear also regularises the intercept; irrelevant at these sizes). random_state fixes its
    # coordinate shuffling, so fits are reproducible.
    clf = LogisticRegression(
        C=config.C, class_weight=config.class_weight, solver="liblinear", dual=True, max_iter=config.max_iter,
                             random_state=0
    )
    clf.fit(x, y)
    return clf.coef_[0], float(clf.intercept_[0])


class TfidfLR:
    """TF-IDF features over CAML tokens with a logistic regression per label (or one softmax LR).

    Args:
        config: the options (see TfidfLRConfig).
        n_labels: K, the number of output columns.
    Raises:
        ConfigError: if n_labels < 1.
    """

    def __init__(self, config: TfidfLRConfig, n_labels: int) -> None:
        if not isinstance(n_labels, (int, np.integer)) or n_labels < 1:
            raise ConfigError(f"TfidfLR needs n_labels >= 1, got {n_labels!r}.")
        self.config = config
        self.n_labels = int(n_labels)
        self.vocabulary: list[str] | None = None
        self.idf: np.ndarray | None = None  # [V] float32
        self.coef: np.ndarray | None = None  # [K, V] float32
        self.intercept: np.ndarray | None = None  # [K] float32
        self._counter: CountVectorizer | None = None

    # ---------------------------------------------------------------------------------------- features

    def _count_vectorizer(self, vocabulary: list[str] | None) -> CountVectorizer:
        c = self.config
        if vocabulary is not None:
            return CountVectorizer(analyzer=_Analyzer(c.ngram_max), vocabulary={t: i for i, t in enumerate(vocabulary)},
                                   dtype=np.float64)
        return CountVectorizer(analyzer=_Analyzer(c.ngram_max), min_df=c.min_df, max_features=c.max_features,
                               dtype=np.float64)

    def _tfidf(self, counts: sp.csr_matrix) -> sp.csr_matrix:
        """[N, V] counts -> [N, V] (sublinear) tf * idf with l2-normalised rows (sklearn's TfidfTransformer)."""
        x = sp.csr_matrix(counts, dtype=np.float64, copy=True)  # [N, V]
        if self.config.sublinear_tf:
            np.log(x.data, out=x.data)
            x.data += 1.0
        x = x @ sp.diags(self.idf.astype(np.float64))  # [N, V]
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())  # [N]
        norms[norms == 0] = 1.0  # an empty document stays all-zero
        x = sp.csr_matrix(sp.diags(1.0 / norms) @ x)  # [N, V]
        x.sum_duplicates()  # canonical (sorted) indices: solvers in worker processes get read-only memmaps
        return x

    def transform(self, texts: Sequence[str]) -> sp.csr_matrix:
        """[N, V] float64 sparse tf-idf features of `texts` in the fitted vocabulary."""
        self._require_fitted()
        return self._tfidf(self._counter.transform(list(texts)))

    # ------------------------------------------------------------------------------------- fit/predict

    def fit(self, texts: Sequence[str], y: np.ndarray, *, partly: PartlyCoded | None = None) -> "TfidfLR":
        """Fit the vocabulary, idf and one LR per label (or one multinomial LR when config.softmax).

        Args:
            texts: N training documents (raw text).
            y: [N, K] 0/1 gold matrix (float32 or any numeric dtype). In softmax mode each row must have
                exactly one 1. A label with no positive (or no negative) gets a constant predictor.
            partly: codes known only on some notes (`PartlyCoded`: added in review): each one's LR is fitted on
                those notes alone (multi-label only; a softmax LR has no per-code fit).
        Returns:
            self.
        Raises:
            ValueError: if len(texts) != N, y is not [N, n_labels] 0/1, softmax rows are not one-hot, or no
                term survives min_df / max_features.
        """
        texts = list(texts)
        y = np.asarray(y)
        if y.ndim != 2 or y.shape != (len(texts), self.n_labels):
            raise ValueError(
                f"y has shape {y.shape} but {len(texts)} texts and n_labels={self.n_labels} need shape "
                f"({len(texts)}, {self.n_labels}); pass one multi-hot row per text."
            )
        if not np.isin(y, (0, 1)).all():
            raise ValueError("y must hold only 0/1 values; pass a multi-hot matrix (e.g. LabelSet.multi_hot).")
        y = y.astype(np.int8)
        if self.config.softmax and not (y.sum(axis=1) == 1).all():
            bad = int((y.sum(axis=1) != 1).sum())
            raise ValueError(f"softmax=True needs exactly one label per document, but {bad} of {len(texts)} rows "
                             "differ; use softmax=False for multi-label data.")

        t0 = time.perf_counter()
        counter = self._count_vectorizer(None)
        try:
            counts = counter.fit_transform(texts)  # [N, V]
        except ValueError as err:
            raise ValueError(
                f"no term is left from {len(texts)} training texts with min_df={self.config.min_df}; lower "
                "min_df or pass more text."
            ) from err
        # Column order = CountVectorizer's (alphabetical); persisted as the vocabulary list.
        vocab = [""] * len(counter.vocabulary_)
        for term, j in counter.vocabulary_.items():
            vocab[j] = term
        df = np.bincount(counts.indices, minlength=len(vocab))  # [V] document frequency
        n = counts.shape[0]
        self.vocabulary = vocab
        self.idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32)  # [V] sklearn's smooth idf
        self._counter = self._count_vectorizer(vocab)
        x = self._tfidf(counts)  # [N, V]

        if self.config.softmax:
            coef, intercept = self._fit_softmax(x, y)
        else:
            # Worker processes, not threads: liblinear keeps global RNG state, so threaded fits are not
            # reproducible. Small problems stay in-process, where the pool start-up would dominate.
            n_jobs = 1 if n < _PARALLEL_MIN_DOCS else min(_N_JOBS, self.n_labels)
            rows = {} if partly is None else {int(k): partly.rows(y, k) for k in partly.columns}
            results = Parallel(n_jobs=n_jobs, backend="loky")(
                delayed(_fit_binary)(x[rows[k]] if k in rows else x, y[rows[k], k] if k in rows else y[:, k],
                                     self.config) for k in range(self.n_labels)
            )
            coef = np.stack([r[0] for r in results])  # [K, V]
            intercept = np.array([r[1] for r in results])  # [K]
        # Stored in float32 and predicted from float32, so a save/load round trip is bit-identical.
        self.coef = coef.astype(np.float32)
        self.intercept = intercept.astype(np.float32)
        logger.info("TfidfLR fit: %d docs, %d terms, %d labels in %.1fs", n, len(vocab), self.n_labels,
                    time.perf_counter() - t0)
        return self

    def _fit_softmax(self, x: sp.csr_matrix, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        target = y.argmax(axis=1)  # [N]
        classes = np.unique(target)
        coef = np.zeros((self.n_labels, x.shape[1]))  # [K, V]
        intercept = np.zeros(self.n_labels)  # [K]
        if classes.size == 1:
            intercept[:] = _ABSENT_CLASS_LOGIT
            intercept[classes[0]] = 0.0
            return coef, intercept
        clf = LogisticRegression(C=self.config.C, class_weight=self.config.class_weight, solver="lbfgs",
                                 max_iter=self.config.max_iter)
        clf.fit(x, target)
        if classes.size == 2:  # sklearn keeps one row for two classes: logit of class 1 vs class 0
            coef[classes[1]], intercept[classes[1]] = clf.coef_[0], clf.intercept_[0]
        else:
            coef[classes], intercept[classes] = clf.coef_, clf.intercept_
        absent = np.setdiff1d(np.arange(self.n_labels), classes)
        intercept[absent] = intercept[classes].min() + _ABSENT_CLASS_LOGIT
        return coef, intercept

    def decision_function(self, texts: Sequence[str]) -> np.ndarray:
        """[N, K] float32 logits X @ coef.T + intercept."""
        x = self.transform(texts).astype(np.float32)  # [N, V]
        return np.asarray(x @ self.coef.T, dtype=np.float32) + self.intercept  # [N, K]

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """Probabilities per label.

        Args:
            texts: N documents (raw text); empty documents get the intercept-only prediction.
        Returns:
            [N, K] float32: independent sigmoids, or a softmax over labels when config.softmax.
        Raises:
            RuntimeError: if the model was neither fitted nor loaded.
        """
        z = self.decision_function(texts).astype(np.float64)  # [N, K]
        if self.config.softmax:
            z = z - z.max(axis=1, keepdims=True)
            e = np.exp(z)
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        # Numerically stable sigmoid.
        return (0.5 * (1.0 + np.tanh(0.5 * z))).astype(np.float32)

    def _require_fitted(self) -> None:
        if self.coef is None or self._counter is None:
            raise RuntimeError("TfidfLR is not fitted; call fit(texts, y) or TfidfLR.load(folder) first.")

    # ------------------------------------------------------------------------------------------ save/load

    def save(self, folder: Path) -> None:
        """Write `tfidf_lr.safetensors` (idf [V], coef [K, V], intercept [K], float32) and `tfidf_lr.json`.

        Each file is written atomically; nothing is pickled.

        Args:
            folder: output folder (created if missing).
        Raises:
            RuntimeError: if the model is not fitted.
        """
        self._require_fitted()
        folder = Path(folder)
        tensors = {"idf": self.idf, "coef": self.coef, "intercept": self.intercept}
        write_bytes_atomic(folder / WEIGHTS_NAME, st_save({k: np.ascontiguousarray(v, dtype=np.float32)
                                                           for k, v in tensors.items()}))
        write_json_atomic(
            folder / META_NAME,
            {
                "format": FORMAT_NAME,
                "format_version": FORMAT_VERSION,
                "n_labels": self.n_labels,
                "n_features": len(self.vocabulary),
                "config": self.config.to_json(),
                "vocabulary": self.vocabulary,
            },
        )

    @classmethod
    def load(cls, folder: Path) -> "TfidfLR":
        """Rebuild a fitted model from a folder written by `save` (no pickle involved).

        Args:
            folder: folder holding tfidf_lr.safetensors and tfidf_lr.json.
        Returns:
            A TfidfLR whose predictions equal those of the saved model.
        Raises:
            CheckpointError: if a file is missing or unreadable, or the pieces disagree in shape
                (one-line message naming the file and the fix).
        """
        folder = Path(folder)
        missing = [name for name in (WEIGHTS_NAME, META_NAME) if not (folder / name).is_file()]
        if missing:
            raise CheckpointError(f"{folder}: missing {', '.join(missing)}; expected a folder written by TfidfLR.save. "
                                  "Re-fit and save the baseline.")
        try:
            meta = json.loads((folder / META_NAME).read_text(encoding="utf-8"))
            config = TfidfLRConfig.from_json(meta["config"])
            n_labels, vocab = int(meta["n_labels"]), meta["vocabulary"]
            if not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab):
                raise TypeError("vocabulary is not a list of strings")
        except (OSError, ValueError, KeyError, TypeError, ConfigError) as err:
            raise CheckpointError(
                f"{folder / META_NAME} is damaged ({type(err).__name__}: {err}); re-fit and save the baseline."
            ) from err
        try:
            tensors = st_load((folder / WEIGHTS_NAME).read_bytes())
        except Exception as err:  # safetensors raises its own SafetensorError for corrupt headers
            raise CheckpointError(f"{folder / WEIGHTS_NAME} is damaged ({type(err).__name__}); "
                                  "re-fit and save the baseline.") from err
        absent = sorted({"idf", "coef", "intercept"} - set(tensors))
        if absent:
            raise CheckpointError(f"{folder / WEIGHTS_NAME} lacks tensors {absent}; expected idf, coef, intercept. "
                                  "Re-fit and save the baseline.")
        idf, coef, intercept = tensors["idf"], tensors["coef"], tensors["intercept"]
        v = len(vocab)
        expected = {"idf": (v,), "coef": (n_labels, v), "intercept": (n_labels,)}
        got = {"idf": idf.shape, "coef": coef.shape, "intercept": intercept.shape}
        if got != expected:
            bad = next(k for k in expected if got[k] != expected[k])
            raise CheckpointError(
                f"{WEIGHTS_NAME} and {META_NAME} disagree: {bad} has shape {tuple(got[bad])} but the JSON "
                f"(vocabulary of {v} terms, {n_labels} labels) needs {expected[bad]}; re-fit and save the baseline."
            )
        if len(set(vocab)) != v:
            raise CheckpointError(f"{folder / META_NAME} has duplicate vocabulary terms; re-fit and save the baseline.")
        model = cls(config, n_labels)
        model.vocabulary = list(vocab)
        model.idf = idf.astype(np.float32)
        model.coef = coef.astype(np.float32)
        model.intercept = intercept.astype(np.float32)
        model._counter = model._count_vectorizer(model.vocabulary)
        return model


def fit_tfidf_lr(texts: Sequence[str], y: np.ndarray, *, single_label: bool,
                 min_doc_freq: int = TrainConfig.min_doc_freq, partly: PartlyCoded | None = None) -> TfidfLR:
    """The bag-of-words baseline `train --model tfidf-lr` fits (and the fused model's part): one LR per code, or one
    softmax LR for single-label data.

    Args:
        texts: the training notes.
        y: [N, K] 0/1 gold matrix.
        single_label: every note has exactly one code (then a multinomial LR).
        min_doc_freq: the vocabulary keeps words found in at least this many notes (`train --min-doc-freq`, as the
            tokenizer's: docs/data-safety.md promises no word of fewer training notes is kept in a checkpoint).
        partly: codes known only on some notes (`TfidfLR.fit`).
    """
    return TfidfLR(TfidfLRConfig(softmax=single_label, min_df=min_doc_freq),
                   n_labels=y.shape[1]).fit(texts, y, partly=partly)
