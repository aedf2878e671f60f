"""Comparing two models on the same notes: a paired bootstrap over documents of micro-F1 and macro-AUC."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from clinicode.config import COMPARE
from clinicode.metrics.checks import _check_gold, _check_pair
from clinicode.metrics.definitions import _micro_from_counts, binarize


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
