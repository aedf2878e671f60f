"""The metrics' input checks: gold and score matrices, k and threshold grids (one clear message each)."""

from __future__ import annotations

from typing import Any

import numpy as np


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
