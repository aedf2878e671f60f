"""CAML's definitions (docs/metrics.md): which codes are "predicted" (one tie rule), and micro and macro
precision, recall and F1 from per-code counts."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from clinicode.metrics.checks import _check_pair

# CAML adds this to every per-label denominator of the macro averages, so 0/0 becomes 0.
_MACRO_EPS = 1e-10

DEFAULT_THRESHOLD = 0.5
DEFAULT_KS = (5, 8, 15)  # P@5 for top-50 sets; P@8 and P@15 for full code sets (CAML, Edin et al.)


def predicted_indices(scores: np.ndarray, threshold: float = DEFAULT_THRESHOLD, *,
                      single_label: bool = False) -> np.ndarray:
    """THE definition of one note's predicted codes, as label indices, highest score first.

    Multi-label: every code scoring strictly above `threshold` (CAML's `np.round` sends exactly 0.5 to 0; this keeps
    that for every threshold; `binarize` uses the same `>`). Single-label (softmax scores, where no threshold fits):
    the top-scored code alone, whatever `threshold` is. **Tie rule, the one everywhere:** equal
    scores go by label index, the lower first; so among tied top scores a single-label model predicts the lowest
    label index (as `np.argmax`, `binarize` and `accuracy` do).

    Args:
        scores: [n_labels] one note's probabilities.
        threshold: the cut-off t.
        single_label: one code per note, the arg-max.
    Returns:
        [n_predicted] int64 label indices, by score descending, then index ascending.
    """
    s = np.asarray(scores)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D [n_labels] (one note), got shape {s.shape}; use binarize for a matrix.")
    if single_label:
        return np.asarray([s.argmax()] if s.size else [], dtype=np.int64)
    above = np.flatnonzero(s > threshold)
    return above[np.lexsort((above, -s[above]))].astype(np.int64)


def predicted_codes(scores: Mapping[str, float], threshold: float = DEFAULT_THRESHOLD, *,
                    single_label: bool = False) -> list[str]:
    """`predicted_indices` over a code -> score mapping whose iteration order is the label order.

    A `Prediction.scores` of every code (top_k=None) is ordered by score, ties by label index, so its order among
    tied codes is the label order, and the tie rule gives the same codes as on the checkpoint's score vector.

    Args:
        scores: code -> probability, in label order (or in `Prediction.scores` order).
        threshold: the cut-off t.
        single_label: one code per note, the top-scored.
    Returns:
        The predicted codes, highest score first (ties: earlier in `scores` first).
    """
    codes = list(scores)
    s = np.fromiter((float(v) for v in scores.values()), dtype=np.float64, count=len(codes))
    return [codes[i] for i in predicted_indices(s, threshold, single_label=single_label)]


def binarize(scores: np.ndarray, threshold: float = DEFAULT_THRESHOLD, *, single_label: bool = False) -> np.ndarray:
    """`predicted_indices` for a whole matrix, as a mask: Ŷ = [S > t], or each row's top code when single-label.

    Args:
        scores: [n_docs, n_labels] probabilities (any shape is accepted when not single_label).
        threshold: the cut-off t.
        single_label: one code per row, the arg-max (ties: the lowest label index, the rule of `predicted_indices`).
    Returns:
        Bool array with the shape of `scores`.
    """
    s = np.asarray(scores)
    if single_label:
        out = np.zeros(s.shape, dtype=bool)
        if s.size:
            np.put_along_axis(out, s.argmax(axis=-1)[..., None], True, axis=-1)
        return out
    return s > threshold


def _f1(p: np.ndarray | float, r: np.ndarray | float) -> np.ndarray:
    """Harmonic mean with 0 where p + r = 0 (elementwise)."""
    p, r = np.asarray(p, dtype=np.float64), np.asarray(r, dtype=np.float64)
    den = p + r
    return np.where(den > 0, 2 * p * r / np.where(den > 0, den, 1.0), 0.0)


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den elementwise, 0 where den == 0."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def _counts(y: np.ndarray, yhat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-label TP, PP (predicted positives) and GP (gold positives), each [n_labels] int64."""
    tp = (y & yhat).sum(axis=0, dtype=np.int64)  # [K]
    pp = yhat.sum(axis=0, dtype=np.int64)  # [K]
    gp = y.sum(axis=0, dtype=np.int64)  # [K]
    return tp, pp, gp


def _micro_from_counts(tp: np.ndarray, pp: np.ndarray, gp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Micro P, R, F1 from counts summed over the last axis ([..., K] -> [...])."""
    p = _safe_div(tp.sum(axis=-1), pp.sum(axis=-1))
    r = _safe_div(tp.sum(axis=-1), gp.sum(axis=-1))
    return p, r, _f1(p, r)


def _macro_from_counts(tp: np.ndarray, pp: np.ndarray, gp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CAML macro P, R and harmonic-mean F1 from counts over the last axis ([..., K] -> [...])."""
    p = (tp / (pp + _MACRO_EPS)).mean(axis=-1)
    r = (tp / (gp + _MACRO_EPS)).mean(axis=-1)
    return p, r, _f1(p, r)


def _f1_mean_from_counts(tp: np.ndarray, pp: np.ndarray, gp: np.ndarray) -> np.ndarray:
    """Mean over labels of 2TP / (2TP + FP + FN) = 2TP / (PP + GP), 0 when the denominator is 0."""
    return _safe_div(2 * tp, pp + gp).mean(axis=-1)


def micro_prf(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[float, float, float]:
    """Micro precision, recall and F1, pooling all n_docs * n_labels cells.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels (0/1 or bool).
        y_pred: [n_docs, n_labels] multi-hot predictions (0/1 or bool), e.g. from `binarize`.
    Returns:
        (prec_micro, rec_micro, f1_micro). P is 0 when nothing is predicted, R is 0 when there is no gold
        label, and F1 is 0 when P + R = 0 (CAML returns NaN there).
    Raises:
        ValueError: if the arrays are not 2-D 0/1 matrices of the same shape (the message gives both shapes).
    """
    y, yhat = _check_pair(y_true, y_pred, other_name="y_pred", as_scores=False)
    p, r, f = _micro_from_counts(*_counts(y, yhat))
    return float(p), float(r), float(f)


def macro_prf(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[float, float, float]:
    """CAML macro precision, recall and F1 (the headline `f1_macro`).

    prec_macro = mean over **all** labels of TP_k / (PP_k + 1e-10) (a never-predicted label adds 0);
    rec_macro = mean over all labels of TP_k / (GP_k + 1e-10) (a label without gold positives adds 0);
    f1_macro = 2 * prec_macro * rec_macro / (prec_macro + rec_macro): the harmonic mean of the two
    macro averages, **not** the mean of per-label F1 (that is `f1_macro_mean`). Because of the 1e-10,
    a perfect prediction gives 1 - 1e-10-ish rather than exactly 1.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        y_pred: [n_docs, n_labels] multi-hot predictions.
    Returns:
        (prec_macro, rec_macro, f1_macro); f1_macro is 0 when both averages are 0.
    Raises:
        ValueError: if the arrays are not 2-D 0/1 matrices of the same shape.
    """
    y, yhat = _check_pair(y_true, y_pred, other_name="y_pred", as_scores=False)
    p, r, f = _macro_from_counts(*_counts(y, yhat))
    return float(p), float(r), float(f)


def f1_macro_mean(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean over all labels of per-label F1 = 2TP / (2TP + FP + FN), 0 when that denominator is 0.

    This is the form used by Edin et al. and AnEMIC (sklearn's `average="macro"` with zero_division=0).

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        y_pred: [n_docs, n_labels] multi-hot predictions.
    Returns:
        The per-label-mean macro F1 in [0, 1].
    Raises:
        ValueError: if the arrays are not 2-D 0/1 matrices of the same shape.
    """
    y, yhat = _check_pair(y_true, y_pred, other_name="y_pred", as_scores=False)
    return float(_f1_mean_from_counts(*_counts(y, yhat)))
