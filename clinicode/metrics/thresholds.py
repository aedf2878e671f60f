"""Every threshold of a grid at once from one counting pass: F1 by threshold, and the tuned threshold."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from clinicode.metrics.checks import _ROWS, _check_grid, _check_pair
from clinicode.metrics.definitions import _f1_mean_from_counts, _macro_from_counts, _micro_from_counts


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
