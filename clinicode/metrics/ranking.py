"""Ranking metrics over [n_docs, n_labels] scores: ROC AUC per code, macro and micro, P@k, R@k and accuracy."""

from __future__ import annotations

import math

import numpy as np

from clinicode.metrics.checks import _COLS, _ROWS, _check_k, _check_pair


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

    By ranks (Mann-Whitney U with mid-ranks for ties, what `roc_auc_score` computes): each code's column is sorted
    once, a block of codes at a time, and its positives are found in it by binary search.

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
