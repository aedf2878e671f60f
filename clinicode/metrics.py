"""ICD-coding metrics with CAML's exact definitions (docs/domain.md section 7) over [n_docs, n_labels] arrays.

Pure numpy (no torch, no scikit-learn: the tests check every number against scikit-learn instead), and sized for full
code sets: 30,000 notes x 9,000 codes is 270 M cells, so nothing loops over cells or codes in Python where numpy can
take a block at once, float32 scores stay float32, and the [N, K] work runs in chunks of rows or codes:
- ROC AUC by ranks (Mann-Whitney U with mid-ranks for ties, which is what `roc_auc_score` computes): each code's
  column is sorted once and its positives are found in it by binary search; micro AUC the same over all cells.
- Precision/recall at k from a partial sort (`np.partition`), ties broken by label index as a stable sort would.
- Every threshold of a grid at once from one counting pass (each cell's position in the grid), not one binarisation
  per threshold.
Macro averages are stated over which codes: CAML's `f1_macro` and `f1_macro_mean` average over **all** codes of the
label set (a code absent from the split adds 0); `f1_macro_present` averages per-code F1 over the codes **present** in
the split (at least one gold note), as Edin et al. report for full code sets; AUC is only defined for codes with both
a positive and a negative note, so `auc_macro` averages over those (`n_auc_labels` of them).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from clinicode.codes.icd10 import PCS_NO_TITLE
from clinicode.codes.titles import WORD, title_words, word_runs
from clinicode.config import COMPARE

# CAML adds this to every per-label denominator of the macro averages, so 0/0 becomes 0.
_MACRO_EPS = 1e-10

DEFAULT_THRESHOLD = 0.5
DEFAULT_KS = (5, 8, 15)  # P@5 for top-50 sets; P@8 and P@15 for full code sets (CAML, Edin et al.)

# The one list of metric names every report uses (keys follow CAML; docs/metrics.md defines each), in display order.
METRIC_LABELS: dict[str, str] = {
    "auc_macro": "Macro AUC", "auc_micro": "Micro AUC", "f1_macro": "Macro F1", "f1_macro_mean": "Macro F1 (code mean)",
    "f1_macro_present": "Macro F1 (codes present)", "f1_micro": "Micro F1", "prec_at_5": "P@5", "prec_at_8": "P@8",
    "prec_at_15": "P@15", "rec_at_5": "R@5", "rec_at_8": "R@8", "rec_at_15": "R@15", "accuracy": "Accuracy",
}
HEADLINE = ("auc_macro", "auc_micro", "f1_macro", "f1_micro", "prec_at_5")  # the LEAM paper's (and CAML's) columns
SUMMARY = (*HEADLINE, "prec_at_8")                                         # the app's metric cards
REPORTED = tuple(METRIC_LABELS)                                             # `evaluate`'s table


# --------------------------------------------------------------------------------------------------
# Boundary checks
# --------------------------------------------------------------------------------------------------


def _check_gold(y_true: Any, name: str = "y_true") -> np.ndarray:
    y = np.asarray(y_true)
    if y.ndim != 2:
        raise ValueError(f"{name} must be 2-D [n_docs, n_labels], got shape {y.shape}; reshape "
                         "it to one row per document.")
    if y.shape[0] == 0 or y.shape[1] == 0:
        raise ValueError(f"{name} has shape {y.shape}; need at least one document and one label.")
    if y.dtype != bool and not np.isin(y, (0, 1)).all():
        raise ValueError(f"{name} must hold only 0/1 values, got values such as "
                         f"{np.unique(y)[:5].tolist()}; pass a multi-hot matrix.")
    return y.astype(bool, copy=False)


_ROWS = 2048    # rows per chunk of [N, K] work (a few M cells at K = 9,000)
_COLS = 256     # codes per chunk of column sorts


def _check_scores(scores: Any, name: str = "scores") -> np.ndarray:
    s = np.asarray(scores)
    if s.dtype not in (np.float32, np.float64):  # float32 stays float32: 1 GB, not 2, at 30,000 x 9,000
        s = s.astype(np.float64)
    if s.ndim != 2:
        raise ValueError(f"{name} must be 2-D [n_docs, n_labels], got shape {s.shape}; reshape "
                         "it to one row per document.")
    if not all(np.isfinite(s[i:i + _ROWS]).all() for i in range(0, len(s), _ROWS)):
        raise ValueError(f"{name} contains {int((~np.isfinite(s)).sum())} NaN or infinite values; "
                         "every score must be finite.")
    return s


def _check_pair(y_true: Any, other: Any, *, other_name: str, as_scores: bool) -> tuple[np.ndarray, np.ndarray]:
    y = _check_gold(y_true)
    o = _check_scores(other, other_name) if as_scores else _check_gold(other, other_name)
    if y.shape != o.shape:
        raise ValueError(
            f"y_true has shape {y.shape} but {other_name} has shape {o.shape}; both must be [n_docs, n_labels] "
            "with the same label order."
        )
    return y, o


def _check_k(k: int, n_labels: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n_labels:
        raise ValueError(f"k must be an integer with 1 <= k <= n_labels = {n_labels}, got k={k!r}.")
    return int(k)


def _check_grid(grid: Any) -> np.ndarray:
    g = np.asarray(grid, dtype=np.float64)
    if g.ndim != 1 or g.size == 0 or not np.isfinite(g).all():
        raise ValueError(f"grid must be a non-empty 1-D array of finite thresholds, got shape {g.shape}.")
    return g


# --------------------------------------------------------------------------------------------------
# Thresholded metrics
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Ranking metrics
# --------------------------------------------------------------------------------------------------


def _u_auc(sorted_all: np.ndarray, pos: np.ndarray) -> float:
    """AUC = P(positive > negative) + 0.5 P(tie), from every score sorted and the positives' scores.

    Mann-Whitney: the positives' mid-ranks among all scores, minus their ranks among themselves.
    """
    n_pos, n = pos.size, sorted_all.size
    less = np.searchsorted(sorted_all, pos, side="left")
    leq = np.searchsorted(sorted_all, pos, side="right")
    u = ((less.sum(dtype=np.float64) + (leq - less).sum(dtype=np.float64) / 2.0 + n_pos / 2.0)
         - n_pos * (n_pos + 1) / 2.0)
    return float(u / (n_pos * (n - n_pos)))


def _positives_by_label(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the gold cells grouped by label: (values, start offsets [K+1]); label k's are values[o[k]:o[k+1]]."""
    rows, cols = np.nonzero(y)                                            # row-major order
    order = np.argsort(cols, kind="stable")
    values = s[rows[order], cols[order]]
    return values, np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=y.shape[1]))])


def label_aucs(y_true: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """[n_labels] ROC AUC of each label, NaN for a label without a positive or without a negative document.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        scores: [n_docs, n_labels] scores.
    Returns:
        float64 array; equal to `roc_auc_score` on each column where defined.
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    n, n_labels = y.shape
    values, start = _positives_by_label(y, s)
    n_pos = np.diff(start)
    out = np.full(n_labels, np.nan)
    todo = np.flatnonzero((n_pos > 0) & (n_pos < n))
    for c0 in range(0, todo.size, _COLS):
        ks = todo[c0:c0 + _COLS]
        block = np.ascontiguousarray(s[:, ks].T)                          # [c, N] one row per code
        block.sort(axis=1)
        for j, k in enumerate(ks):
            out[k] = _u_auc(block[j], values[start[k]:start[k + 1]])
    return out


def auc_macro(y_true: np.ndarray, scores: np.ndarray) -> tuple[float, int]:
    """Unweighted mean of per-label ROC AUC over labels with at least one positive and one negative.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        scores: [n_docs, n_labels] scores (any monotone scale works).
    Returns:
        (auc_macro, n_labels_counted). auc_macro is NaN only when no label has both classes
        (then n_labels_counted is 0).
    Raises:
        ValueError: if the shapes differ, or the arrays are not 2-D, or scores are not finite.
    """
    aucs = label_aucs(y_true, scores)
    ok = ~np.isnan(aucs)
    if not ok.any():
        return math.nan, 0
    return float(aucs[ok].mean()), int(ok.sum())


def auc_micro(y_true: np.ndarray, scores: np.ndarray) -> float:
    """One ROC AUC over all n_docs * n_labels (score, gold) pairs.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        scores: [n_docs, n_labels] scores.
    Returns:
        The micro AUC, or NaN when all cells are positive or all are negative.
    Raises:
        ValueError: if the shapes differ, or the arrays are not 2-D, or scores are not finite.
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    pos = s[y]
    if pos.size == 0 or pos.size == y.size:
        return math.nan
    return _u_auc(np.sort(s, axis=None), pos)


def _top_k_hits(y: np.ndarray, s: np.ndarray, k: int) -> np.ndarray:
    """[n_docs] number of gold codes among each document's k highest scores.

    The same codes as a stable sort of -scores would take (score descending, then label index): every code above the
    k-th largest score, then the lowest-index codes equal to it until there are k. Rows are taken a chunk at a time.
    """
    n, n_labels = s.shape
    hits = np.empty(n, dtype=np.int64)
    for r0 in range(0, n, _ROWS):
        sc, yc = s[r0:r0 + _ROWS], y[r0:r0 + _ROWS]
        kth = -np.partition(-sc, k - 1, axis=1)[:, k - 1:k]                 # [c, 1] the k-th largest score
        above = sc > kth
        room = k - above.sum(axis=1, keepdims=True)                        # places left for codes equal to it
        tied = sc == kth
        take = above | (tied & (np.cumsum(tied, axis=1) <= room))
        hits[r0:r0 + _ROWS] = (take & yc).sum(axis=1)
    return hits


def precision_at_k(y_true: np.ndarray, scores: np.ndarray, *, k: int = 5) -> float:
    """Mean fraction of each document's k highest-scored codes that are gold codes.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels (0/1).
        scores: [n_docs, n_labels] probabilities; ties broken by label index (lower index first).
        k: codes per document, 1 <= k <= n_labels.
    Returns:
        P@k in [0, 1]; a document with fewer than k gold codes cannot reach 1.
    Raises:
        ValueError: if the shapes differ or k is out of range (the message gives both).
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    k = _check_k(k, y.shape[1])
    return float((_top_k_hits(y, s, k) / k).mean())


def recall_at_k(y_true: np.ndarray, scores: np.ndarray, *, k: int = 5) -> float:
    """Mean over documents of (gold codes among the k highest scores) / (number of gold codes).

    Documents without any gold code have no defined recall and are **excluded** from the mean (in
    hoc about 15% of abstracts have an empty label list); if no document has a gold code the result is 0.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels (0/1).
        scores: [n_docs, n_labels] probabilities; ties broken by label index (lower index first).
        k: codes per document, 1 <= k <= n_labels.
    Returns:
        R@k in [0, 1].
    Raises:
        ValueError: if the shapes differ or k is out of range (the message gives both).
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    k = _check_k(k, y.shape[1])
    return _recall_from_hits(y, _top_k_hits(y, s, k))


def _recall_from_hits(y: np.ndarray, hits: np.ndarray) -> float:
    n_gold = y.sum(axis=1)  # [N]
    has_gold = n_gold > 0
    if not has_gold.any():
        return 0.0
    return float((hits[has_gold] / n_gold[has_gold]).mean())


def accuracy(y_true: np.ndarray, scores: np.ndarray) -> float:
    """Single-label accuracy: fraction of documents whose highest-scored label is a gold label.

    For single-label data (one gold label per row) this is argmax(scores) == argmax(y_true); ties in the
    scores go to the lower label index, as in P@1.

    Args:
        y_true: [n_docs, n_labels] one-hot gold labels.
        scores: [n_docs, n_labels] scores.
    Returns:
        Accuracy in [0, 1]; equals P@1.
    Raises:
        ValueError: if the shapes differ or the arrays are not 2-D.
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    pred = s.argmax(axis=1)  # [N] first maximum = lowest index among ties
    return float(y[np.arange(y.shape[0]), pred].mean())


# --------------------------------------------------------------------------------------------------
# Threshold sweeps
# --------------------------------------------------------------------------------------------------


def _counts_by_threshold(y: np.ndarray, s: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-threshold, per-label TP [G, K], PP [G, K] and GP [K] for Ŷ = [S > t], without G binarize passes.

    A cell is above threshold g exactly when g is among the first c grid values, c = how many grid values lie
    strictly below its score (`searchsorted(..., side="left")` on the sorted grid). One pass counts the cells of
    every (label, c); a cumulative sum from the top turns those counts into "cells above each threshold".
    """
    n, n_labels = s.shape
    order = np.argsort(grid, kind="stable")
    g_sorted = grid[order]
    G = grid.size
    pp_c = np.zeros(n_labels * (G + 1), dtype=np.int64)                   # cells of label k with count c
    tp_c = np.zeros(n_labels * (G + 1), dtype=np.int64)
    base = np.arange(n_labels, dtype=np.int64) * (G + 1)
    for r0 in range(0, n, _ROWS):
        c = np.searchsorted(g_sorted, s[r0:r0 + _ROWS], side="left") + base  # [rows, K]
        pp_c += np.bincount(c.ravel(), minlength=pp_c.size)
        tp_c += np.bincount(c[y[r0:r0 + _ROWS]], minlength=tp_c.size)
    # above threshold g (sorted) <=> c > g: counts with c in g+1..G, summed from the top
    above = lambda counts: np.cumsum(counts.reshape(n_labels, G + 1)[:, ::-1], axis=1)[:, ::-1][:, 1:].T  # noqa: E731
    tp_sorted, pp_sorted = above(tp_c), above(pp_c)                       # [G, K] in sorted grid order
    tp, pp = np.empty_like(tp_sorted), np.empty_like(pp_sorted)
    tp[order], pp[order] = tp_sorted, pp_sorted
    gp = y.sum(axis=0, dtype=np.int64)  # [K]
    return tp, pp, gp


def f1_by_threshold(y_true: np.ndarray, scores: np.ndarray,
                    grid: Sequence[float] | np.ndarray) -> dict[str, np.ndarray]:
    """Micro and macro F1 at every threshold of `grid` (for the app's threshold plot and for tuning).

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        scores: [n_docs, n_labels] probabilities.
        grid: [G] thresholds t; predictions are [S > t].
    Returns:
        Dict of float64 arrays, each [G]: "threshold" (the grid), "f1_micro", "f1_macro" (CAML
        harmonic-mean form) and "f1_macro_mean" (per-label mean form). Entry g equals what
        `micro_prf` / `macro_prf` / `f1_macro_mean` give on `binarize(scores, grid[g])`.
    Raises:
        ValueError: if the shapes differ or the grid is empty, not 1-D, or not finite.
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    g = _check_grid(grid)
    tp, pp, gp = _counts_by_threshold(y, s, g)
    gp_b = np.broadcast_to(gp, tp.shape)  # [G, K]
    return {
        "threshold": g.copy(),
        "f1_micro": _micro_from_counts(tp, pp, gp_b)[2],  # [G]
        "f1_macro": _macro_from_counts(tp, pp, gp_b)[2],  # [G]
        "f1_macro_mean": _f1_mean_from_counts(tp, pp, gp_b),  # [G]
    }


def tune_threshold(y_true: np.ndarray, scores: np.ndarray, *,
                   grid: Sequence[float] | np.ndarray | None = None) -> float:
    """The global threshold that maximises micro-F1 on (dev) data; never call this on test.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels of the tuning split.
        scores: [n_docs, n_labels] probabilities on that split.
        grid: [G] candidate thresholds; default `np.linspace(0, 1, 100)` (docs/domain.md section 7).
    Returns:
        The first (smallest-index) grid value with the highest micro-F1 of [S > t].
    Raises:
        ValueError: if the shapes differ or the grid is empty, not 1-D, or not finite.
    """
    g = np.linspace(0.0, 1.0, 100) if grid is None else grid
    curve = f1_by_threshold(y_true, scores, g)
    return float(curve["threshold"][int(np.argmax(curve["f1_micro"]))])


# --------------------------------------------------------------------------------------------------
# Comparing two models on the same documents
# --------------------------------------------------------------------------------------------------


def _weighted_f1_micro(y: np.ndarray, s: np.ndarray, threshold: float | None, w: np.ndarray) -> np.ndarray:
    """[R] micro-F1 of [S > t] (threshold None: each row's top code) when document i counts w[r, i] times."""
    yhat = binarize(s, 0.0 if threshold is None else threshold, single_label=threshold is None)
    tp = (y & yhat).sum(axis=1, dtype=np.int64)  # [N] per-document counts
    pp = yhat.sum(axis=1, dtype=np.int64)  # [N]
    gp = y.sum(axis=1, dtype=np.int64)  # [N]
    return _micro_from_counts((w @ tp)[:, None], (w @ pp)[:, None], (w @ gp)[:, None])[2]  # [R]


_AUC_BLOCK_BYTES = 32 << 20  # one block of pair indicators, [N, columns] float64, in `_weighted_auc_macro`


def _weighted_auc_macro(y: np.ndarray, s: np.ndarray, w: np.ndarray) -> np.ndarray:
    """[R] macro-AUC when document i counts w[r, i] times; NaN where no label has both classes.

    Per label, AUC = P(score of a positive > score of a negative) + 0.5 P(tie), each document weighted by its count:
    AUC_k = sum_{i pos} w_i sum_{j neg} w_j c_ij / (n_pos n_neg), c_ij = 1 (s_j < s_i), 0.5 (tie), 0. The pair
    indicators c do not depend on the resample, so each code's are built once, [N, n_pos], and every resample's
    negative weight below each positive is one matrix product, w @ c, for a block of codes at a time (BLAS instead of
    a sort, a gather and a cumulative sum per code and resample). A code with more positives than negatives is
    counted from its negatives' side (sum_{j neg} w_j sum_{i pos} w_i c_ji = n_pos n_neg - the same sum), so a block
    column never exceeds half the documents. Equal to `auc_macro` on the explicitly repeated rows.
    """
    n_res, n = w.shape
    wf = w.astype(np.float64)                                                     # [R, N] counts
    yb = y.astype(bool)
    n_p = wf @ yb.astype(np.float64)                                              # [R, K] positive weight per code
    n_n = wf.sum(axis=1, keepdims=True) - n_p                                     # [R, K]
    num = np.zeros_like(n_p)                                                      # [R, K] sum w_i w_j c_ij
    width = max(1, _AUC_BLOCK_BYTES // (8 * n))                                   # block columns
    cols: list[np.ndarray] = []                                                   # [N, n_side] pair indicators
    sides: list[np.ndarray] = []                                                  # the side each is summed over
    codes: list[tuple[int, bool]] = []                                            # (code, counted from negatives)

    def flush() -> None:
        if not cols:
            return
        below = wf @ np.concatenate(cols, axis=1)                                 # [R, columns] weight below each
        idx = np.concatenate(sides)
        starts = np.cumsum([0] + [len(x) for x in sides[:-1]])
        sums = np.add.reduceat(wf[:, idx] * below, starts, axis=1)                # [R, codes]
        for j, (k, flipped) in enumerate(codes):
            num[:, k] = n_p[:, k] * n_n[:, k] - sums[:, j] if flipped else sums[:, j]
        cols.clear(), sides.clear(), codes.clear()

    used = 0
    for k in range(y.shape[1]):
        pos = yb[:, k]
        n_pos = int(pos.sum())
        if n_pos == 0 or n_pos == n:
            continue
        flipped = n_pos > n - n_pos
        side = np.flatnonzero(~pos if flipped else pos)                           # the smaller class
        col = s[:, k]
        at = col[side][None, :]                                                   # [1, n_side]
        other = (pos if flipped else ~pos)[:, None]                               # [N, 1] the other class
        c = ((col[:, None] < at) + 0.5 * (col[:, None] == at)) * other            # [N, n_side] c_(other, side)
        if used + len(side) > width and cols:
            flush()
            used = 0
        cols.append(c)
        sides.append(side)
        codes.append((k, flipped))
        used += len(side)
    flush()
    ok = (n_p > 0) & (n_n > 0)                                                    # [R, K]
    auc = np.where(ok, num / np.where(ok, n_p * n_n, 1.0), 0.0)
    counted = ok.sum(axis=1)
    return np.where(counted > 0, auc.sum(axis=1) / np.maximum(counted, 1), np.nan)


def _weighted_auc_macro_by_sorting(y: np.ndarray, s: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The previous form of `_weighted_auc_macro` (a sort and a cumulative sum per code and resample), kept as the
    tests' second oracle and the benchmark's baseline."""
    n_res = w.shape[0]
    total = np.zeros(n_res)
    counted = np.zeros(n_res)
    for k in range(y.shape[1]):
        order = np.argsort(s[:, k], kind="stable")
        col, pos = s[order, k], y[order, k]  # [N] sorted scores and their gold
        ws = w[:, order].astype(np.float64)  # [R, N]
        w_pos, w_neg = ws * pos, ws * ~pos  # [R, N]
        cum_neg = np.concatenate([np.zeros((n_res, 1)), np.cumsum(w_neg, axis=1)], axis=1)  # [R, N+1]
        lo, hi = np.searchsorted(col, col, side="left"), np.searchsorted(col, col, side="right")  # tie groups
        below, tied = cum_neg[:, lo], cum_neg[:, hi] - cum_neg[:, lo]  # [R, N]
        n_p, n_n = w_pos.sum(axis=1), w_neg.sum(axis=1)  # [R]
        ok = (n_p > 0) & (n_n > 0)
        auc = (w_pos * (below + 0.5 * tied)).sum(axis=1) / np.where(ok, n_p * n_n, 1.0)
        total += np.where(ok, auc, 0.0)
        counted += ok
    return np.where(counted > 0, total / np.maximum(counted, 1), np.nan)


def paired_bootstrap(
    y_true: np.ndarray,
    runs_a: Sequence[tuple[np.ndarray, float]],
    runs_b: Sequence[tuple[np.ndarray, float]],
    *,
    n_boot: int = COMPARE.n_boot,
    level: float = 0.95,
    seed: int = COMPARE.seed,
) -> dict[str, dict[str, float]]:
    """How sure is "A beats (or matches) B"? A paired bootstrap over documents of micro-F1 and macro-AUC.

    Every resample draws n_docs documents with replacement and scores all runs on the same draw, so the
    document-to-document variation the two models share cancels. Each side may hold several runs (e.g.
    seeds); a side's value is the mean of its runs' metrics, so seed-to-seed spread is part of the result.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        runs_a, runs_b: (scores [n_docs, n_labels], threshold) per run; the threshold applies to micro-F1
            (None for a single-label model, whose prediction is each row's top code).
        n_boot: number of resamples.
        level: central confidence level of the percentile interval.
        seed: seed of the resampling.
    Returns:
        {"f1_micro": {...}, "auc_macro": {...}}, each {"diff": mean_a - mean_b on the documents as given,
        "lo", "hi": the percentile interval of the resampled differences, "p_a_below_b": share of resamples
        with a negative difference}.
    Raises:
        ValueError: if a side is empty, shapes differ, n_boot < 1 or level is outside (0, 1).
    """
    if not runs_a or not runs_b:
        raise ValueError("paired_bootstrap needs at least one run on each side.")
    if n_boot < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"n_boot must be >= 1 and level in (0, 1), got {n_boot} and {level}.")
    y = _check_gold(y_true)
    checked = [[(_check_pair(y, s, other_name="scores", as_scores=True)[1], None if t is None else float(t))
                for s, t in runs]
               for runs in (runs_a, runs_b)]
    n = y.shape[0]
    rng = np.random.default_rng(seed)
    w = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)  # [R, N] how often each document is drawn
    w_all = np.vstack([np.ones((1, n), dtype=w.dtype), w])  # row 0: the documents as given
    out: dict[str, dict[str, float]] = {}
    for key, fn in (("f1_micro", lambda s, t: _weighted_f1_micro(y, s, t, w_all)),
                    ("auc_macro", lambda s, t: _weighted_auc_macro(y, s, w_all))):
        a, b = (np.mean([fn(s, t) for s, t in runs], axis=0) for runs in checked)  # [1 + R] each
        d = a - b
        boot = d[1:][~np.isnan(d[1:])]
        alpha = (1.0 - level) / 2.0
        lo, hi = (np.quantile(boot, [alpha, 1.0 - alpha]) if boot.size else (math.nan, math.nan))
        out[key] = {"diff": float(d[0]), "lo": float(lo), "hi": float(hi),
                    "p_a_below_b": float((boot < 0).mean()) if boot.size else math.nan}
    return out


# --------------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------------


def all_metrics(
    y_true: np.ndarray,
    scores: np.ndarray,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    ks: Sequence[int] = DEFAULT_KS,
    single_label: bool = False,
) -> dict[str, float | int]:
    """Every headline metric under CAML's key names, as plain JSON-serialisable Python numbers.

    Keys: prec_micro, rec_micro, f1_micro, prec_macro, rec_macro, f1_macro, f1_macro_mean (these two over all
    labels), f1_macro_present and n_codes_present (per-label F1 mean over the labels with a gold document in
    these data, Edin et al.'s form), auc_macro, auc_micro, n_auc_labels, prec_at_{k} and rec_at_{k} for each k
    in `ks` that is <= n_labels (larger k are skipped, e.g. P@8 on a 5-label set), threshold, n_docs, n_labels;
    plus accuracy when every gold row has exactly one label (single-label data).

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        scores: [n_docs, n_labels] probabilities.
        threshold: t of the predictions [S > t]; 0.5 for the headline, the dev-tuned value otherwise.
        ks: cut-offs for P@k and R@k; each must be >= 1.
        single_label: predictions are each row's top code (`binarize`), whatever the threshold.
    Returns:
        Dict of floats and ints; only auc_macro / auc_micro may be NaN (when undefined).
    Raises:
        ValueError: if the shapes differ, the arrays are not 2-D, scores are not finite, or some k < 1.
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    n_docs, n_labels = y.shape
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"ks must hold integers >= 1, got {list(ks)!r}.")
    yhat = binarize(s, threshold, single_label=single_label)
    tp, pp, gp = _counts(y, yhat)
    p_mi, r_mi, f_mi = _micro_from_counts(tp, pp, gp)
    p_ma, r_ma, f_ma = _macro_from_counts(tp, pp, gp)
    present = gp > 0
    a_ma, n_auc = auc_macro(y, s)
    out: dict[str, float | int] = {
        "prec_micro": float(p_mi),
        "rec_micro": float(r_mi),
        "f1_micro": float(f_mi),
        "prec_macro": float(p_ma),
        "rec_macro": float(r_ma),
        "f1_macro": float(f_ma),
        "f1_macro_mean": float(_f1_mean_from_counts(tp, pp, gp)),
        "f1_macro_present": float(_f1_mean_from_counts(tp[present], pp[present],
                                                       gp[present])) if present.any() else 0.0,
        "n_codes_present": int(present.sum()),
        "auc_macro": a_ma,
        "auc_micro": auc_micro(y, s),
        "n_auc_labels": int(n_auc),
    }
    for k in ks:
        if k > n_labels:
            continue
        hits = _top_k_hits(y, s, int(k))                                   # shared by P@k and R@k
        out[f"prec_at_{int(k)}"] = float((hits / k).mean())
        out[f"rec_at_{int(k)}"] = _recall_from_hits(y, hits)
    if (y.sum(axis=1) == 1).all():
        out["accuracy"] = accuracy(y, s)
    out["threshold"] = float(threshold)
    out["n_docs"] = int(n_docs)
    out["n_labels"] = int(n_labels)
    return out


def per_label_metrics(
    y_true: np.ndarray,
    scores: np.ndarray,
    codes: Sequence[str],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    single_label: bool = False,
) -> list[dict[str, Any]]:
    """One row per label for the app's per-code table.

    Per-label precision = TP / PP and recall = TP / GP use 0 for 0/0 (no 1e-10 here, so a perfect
    label shows exactly 1.0); f1 = 2TP / (2TP + FP + FN), 0 when that is 0/0.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        scores: [n_docs, n_labels] probabilities.
        codes: [n_labels] label codes in column order.
        threshold: t of the predictions [S > t].
    Returns:
        List of n_labels dicts {code, support (gold positives, int), precision, recall, f1, auc}; auc
        is None when the label has no positive or no negative document.
    Raises:
        ValueError: if the shapes differ or len(codes) != n_labels.
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    if len(codes) != y.shape[1]:
        raise ValueError(f"codes has {len(codes)} entries but the arrays have {y.shape[1]} label columns; "
                         "pass one code per column.")
    tp, pp, gp = _counts(y, binarize(s, threshold, single_label=single_label))
    prec, rec, f1 = _safe_div(tp, pp), _safe_div(tp, gp), _safe_div(2 * tp, pp + gp)  # each [K]
    aucs = label_aucs(y, s)
    return [
        {
            "code": str(code),
            "support": int(gp[k]),
            "precision": float(prec[k]),
            "recall": float(rec[k]),
            "f1": float(f1[k]),
            "auc": None if np.isnan(aucs[k]) else float(aucs[k]),
        }
        for k, code in enumerate(codes)
    ]


RARE_BELOW = 20  # a code with fewer training notes than this is "rare" (the accuracy issue's rare-code slice)


def frequency_slices(per_code: Sequence[dict[str, Any]], *, rare_below: int = RARE_BELOW) -> dict[str, dict[str, Any]]:
    """Macro AUC and macro F1 of the rare codes (fewer than `rare_below` training notes) and of the frequent ones.

    Args:
        per_code: `per_label_metrics` rows, each with the code's number of training notes as `train_count`.
        rare_below: the training-note count from which a code is frequent.
    Returns:
        {"rare": {...}, "frequent": {...}}, each with n_codes (of the label set), n_present (with a gold note in the
        split), auc_macro (mean per-code AUC over codes with a positive and a negative note; None when there is none)
        and f1_macro (mean per-code F1 over the codes present; None when none is), plus "rare_below".
    Raises:
        ValueError: when a row has no train_count (runs from before it was recorded).
    """
    if any("train_count" not in r for r in per_code):
        raise ValueError("per-code rows need train_count (the code's training notes); this run did not record it.")
    out: dict[str, Any] = {"rare_below": int(rare_below)}
    for name, keep in (("rare", lambda n: n < rare_below), ("frequent", lambda n: n >= rare_below)):
        rows = [r for r in per_code if keep(r["train_count"])]
        aucs = [r["auc"] for r in rows if r["auc"] is not None]
        f1s = [r["f1"] for r in rows if r["support"] > 0]
        out[name] = {"n_codes": len(rows), "n_present": len(f1s),
                     "auc_macro": float(np.mean(aucs)) if aucs else None,
                     "f1_macro": float(np.mean(f1s)) if f1s else None}
    return out


def metrics_report(
    y_true: np.ndarray,
    scores: np.ndarray,
    *,
    threshold: float,
    single_label: bool = False,
    codes: Sequence[str] | None = None,
    train_counts: Sequence[int] | np.ndarray | None = None,
) -> dict[str, Any]:
    """THE metrics report of a scored split: what `train` writes (metrics_dev.json, metrics_test.json) and `evaluate`.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        scores: [n_docs, n_labels] probabilities.
        threshold: the tuned threshold t.
        single_label: predictions are each row's top code.
        codes: [n_labels] label codes in column order; adds the per-code rows ("per_code").
        train_counts: [n_labels] each code's training notes (with `codes`); adds them to the rows ("train_count")
            and the rare/frequent "slices" (`frequency_slices`).
    Returns:
        `all_metrics` at t, the same at 0.5 under "threshold_0.5", then "per_code" and "slices" when asked for.
    """
    out: dict[str, Any] = {**all_metrics(y_true, scores, threshold=threshold, single_label=single_label),
                           "threshold_0.5": all_metrics(y_true, scores, threshold=DEFAULT_THRESHOLD,
                                                        single_label=single_label)}
    if codes is not None:
        per_code = per_label_metrics(y_true, scores, codes, threshold=threshold, single_label=single_label)
        if train_counts is not None:
            for row, n in zip(per_code, train_counts, strict=True):
                row["train_count"] = int(n)
        out["per_code"] = per_code
        if train_counts is not None:
            out["slices"] = frequency_slices(per_code)
    return out


# --------------------------------------------------------------------------------------------------
# Evidence quality: how well a code's shown spans point at the note's gold mentions of it (docs/metrics.md)
# --------------------------------------------------------------------------------------------------

# A word of the metric: a run of letters or digits (`clinicode.codes.titles.WORD`), not the model's tokenizer's, so that
# models with different tokenizers (and the floors) are measured in the same units.
EVIDENCE_K = 5     # spans per code: `predict --explain 5`, the count docs/predict.md and the app use
EVIDENCE_SEED = 0  # of the random floor's placement


def word_spans(text: str) -> np.ndarray:
    """The words of a note as character spans: [n_words, 2] int64 (start, end), in text order.

    A word is a maximal run of letters or digits (`[^\\W_]+`): "Drug-induced QT-prolongation" is 4 words.
    """
    spans = [m.span() for m in WORD.finditer(text)]
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def _as_spans(spans: Any) -> np.ndarray:
    return np.asarray([(int(a), int(b)) for a, b in spans], dtype=np.int64).reshape(-1, 2)


def words_covered(words: np.ndarray, spans: Any) -> np.ndarray:
    """Which words overlap at least one of the spans (a word half inside a span counts: it is shown or mentioned).

    Args:
        words: [n_words, 2] `word_spans` of the note.
        spans: (start, end) character spans, end exclusive.
    Returns:
        [n_words] bool.
    """
    s = _as_spans(spans)
    if not len(s) or not len(words):
        return np.zeros(len(words), dtype=bool)
    return ((words[:, None, 0] < s[None, :, 1]) & (words[:, None, 1] > s[None, :, 0])).any(axis=1)


def _overlaps_any(span: tuple[int, int], gold: np.ndarray) -> bool:
    return bool(((gold[:, 0] < span[1]) & (gold[:, 1] > span[0])).any()) if len(gold) else False


def evidence_quality(shown: Sequence[Sequence[tuple[int, int]]], gold: Sequence[Sequence[tuple[int, int]]],
                     words: Sequence[np.ndarray], *, k: int) -> dict[str, Any]:
    """Evidence quality over (note, code) pairs: do the spans shown for a code point at the note's gold mentions of it?

    Each pair is one correctly predicted code of one note (the caller picks them). Its shown spans are ranked, best
    first; only the first k count. Per pair: hit@1 is 1 when the first span overlaps a gold mention (by at least one
    character), hit@k when any of the k does. Token precision and recall are micro over pairs, in words
    (`word_spans`): S = the words overlapping a shown span, G = the words overlapping a gold mention;
    precision = sum |S & G| / sum |S|, recall = sum |S & G| / sum |G|, F1 their harmonic mean (0 when both are 0).

    Args:
        shown: per pair, its shown (start, end) spans, best first (may be empty: a miss, no words shown).
        gold: per pair, the gold mention spans of that code in that note (at least one).
        words: per pair, the note's [n_words, 2] `word_spans` (pairs of one note may share one array).
        k: spans counted per pair (the explain count), >= 1.
    Returns:
        {"n_pairs", "k", "hit_at_1", "hit_at_k", "token_precision", "token_recall", "token_f1", "words_per_code"
        (mean |S|)}; the rates are None when there is no pair.
    Raises:
        ValueError: if the three lists differ in length, k < 1, or a pair has no gold mention.
    """
    if not len(shown) == len(gold) == len(words):
        raise ValueError(f"shown, gold and words must have one entry per pair, got {len(shown)}, {len(gold)} and "
                         f"{len(words)}.")
    if k < 1:
        raise ValueError(f"k must be >= 1 (spans counted per code), got {k}.")
    n = len(shown)
    out: dict[str, Any] = {"n_pairs": n, "k": int(k)}
    if n == 0:
        return {**out, **dict.fromkeys(("hit_at_1", "hit_at_k", "token_precision", "token_recall", "token_f1",
                                        "words_per_code"))}
    hit1 = hitk = inter = n_shown = n_gold = 0
    for i, (spans, mentions, w) in enumerate(zip(shown, gold, words)):
        g = _as_spans(mentions)
        if not len(g):
            raise ValueError(f"pair {i} has no gold mention; pass only codes with gold evidence in the note.")
        top = [(int(a), int(b)) for a, b in list(spans)[:k]]
        hits = [_overlaps_any(s, g) for s in top]
        hit1 += bool(hits[:1] and hits[0])
        hitk += any(hits)
        s_words, g_words = words_covered(w, top), words_covered(w, g)
        inter += int((s_words & g_words).sum())
        n_shown += int(s_words.sum())
        n_gold += int(g_words.sum())
    p = inter / n_shown if n_shown else 0.0
    r = inter / n_gold if n_gold else 0.0
    return {**out, "hit_at_1": hit1 / n, "hit_at_k": hitk / n, "token_precision": p, "token_recall": r,
            "token_f1": float(_f1(p, r)), "words_per_code": n_shown / n}


def random_spans(shown: Sequence[Sequence[tuple[int, int]]], words: Sequence[np.ndarray], *,
                 seed: int = 0) -> list[list[tuple[int, int]]]:
    """The random floor: each shown span replaced by a run of as many words, placed uniformly at random in the note.

    Args:
        shown: per pair, its shown spans.
        words: per pair, the note's [n_words, 2] `word_spans`.
        seed: of the placement (fixed, so the floor is reproducible).
    Returns:
        per pair, one random (start, end) span per shown span (a span covering no word counts as one word).
    """
    rng = np.random.default_rng(seed)
    out = []
    for spans, w in zip(shown, words):
        pair = []
        for span in spans:
            if not len(w):
                break
            m = min(max(1, int(words_covered(w, [span]).sum())), len(w))
            first = int(rng.integers(0, len(w) - m + 1))
            pair.append((int(w[first, 0]), int(w[first + m - 1, 1])))
        out.append(pair)
    return out


def title_spans(title: str, text: str) -> list[tuple[int, int]]:
    """The title floor: the note's words that are words of the code's title, as spans, best first.

    Words match case-insensitively and exactly (`word_spans` words; `clinicode.codes.titles.STOPWORDS` never match, as
    in `predict --titles`). Matched words next to each other (consecutive words of the note) form one span; spans with
    more matched words come first, then the earlier.

    Args:
        title: the code's title (e.g. its description in labels.json).
        text: the note.
    Returns:
        (start, end) spans, best first; [] when no title word occurs.
    """
    runs = sorted(word_runs(text, title_words(title)), key=lambda x: (-x[0], x[1]))
    return [(a, b) for _, a, b in runs]


def evidence_figures(texts: Sequence[str], mentions: Sequence[Sequence[Mapping[str, Any]]],
                     correct: Sequence[Mapping[str, Sequence[tuple[int, int]] | None]], titles: Mapping[str, str], *,
                     k: int = EVIDENCE_K, seed: int = EVIDENCE_SEED) -> dict[str, Any]:
    """The evidence report of a scored split: the model's spans and both floors over the same (note, code) pairs.

    A pair is a correctly predicted code of a note with at least one gold mention of it in that note.

    Args:
        texts: [n_notes] the notes.
        mentions: per note, its gold mentions {"code", "start", "end"} (text[start:end]).
        correct: per note, its correctly predicted codes (gold, and predicted at the threshold), each with the spans
            shown for it, best first; None instead of spans when the model shows none (tfidf-lr).
        titles: code -> title, for the title floor ("", absent or the display placeholder `PCS_NO_TITLE`: no title,
            no title spans).
        k: spans counted per code.
        seed: of the random floor.
    Returns:
        {"k", "n_pairs", "n_correct", "n_correct_without_evidence", "model" (None when no spans were given),
        "random" (the model's span lengths; the title spans' when there are none), "title"}, each of the three an
        `evidence_quality` dict.
    """
    shown, gold, words, by_title = [], [], [], []
    n_correct, has_spans = 0, True
    for text, notes_mentions, right in zip(texts, mentions, correct, strict=True):
        by_code: dict[str, list[tuple[int, int]]] = {}
        for m in notes_mentions:
            by_code.setdefault(str(m["code"]), []).append((int(m["start"]), int(m["end"])))
        n_correct += len(right)
        w = word_spans(text) if any(c in by_code for c in right) else None
        for code, spans in right.items():
            if code not in by_code:
                continue
            has_spans = has_spans and spans is not None
            shown.append(list(spans or []))
            gold.append(by_code[code])
            words.append(w)
            title = titles.get(code, "")
            by_title.append(title_spans("" if title == PCS_NO_TITLE else title, text))  # a placeholder is no title
    model = evidence_quality(shown, gold, words, k=k) if has_spans else None
    lengths = shown if has_spans else by_title
    return {"k": int(k), "n_pairs": len(shown), "n_correct": n_correct,
            "n_correct_without_evidence": n_correct - len(shown), "model": model,
            "random": evidence_quality(random_spans(lengths, words, seed=seed), gold, words, k=k),
            "title": evidence_quality(by_title, gold, words, k=k)}
