"""Mean average precision over each note's ranked codes, as trec_eval computes it (the CodiEsp and CANTEMIST coding
tasks' metric; docs/metrics.md): gold codes the model has no column for count as never retrieved."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from clinicode.metrics.checks import _ROWS, _check_pair

MAP_DEPTH = 1000  # trec_eval's default cut: ranks below it retrieve nothing (CodiEsp, CANTEMIST)


def _check_n_gold(n_gold: Any, at_least: np.ndarray, name: str = "n_gold") -> np.ndarray:
    g = np.asarray(n_gold)
    if g.shape != at_least.shape:
        raise ValueError(f"{name} must hold one count per note ({at_least.shape[0]}), got shape {g.shape}.")
    if g.size and (not np.issubdtype(g.dtype, np.number) or not np.all(g == np.round(g))):
        raise ValueError(f"{name} must hold whole numbers of gold codes per note, got e.g. {g.ravel()[:3].tolist()}.")
    g = g.astype(np.int64)
    short = np.flatnonzero(g < at_least)
    if short.size:
        i = int(short[0])
        raise ValueError(f"{name}[{i}] = {int(g[i])} is fewer than the note's {int(at_least[i])} gold codes in y_true; "
                         "count every gold code of the note (those outside the columns too).")
    return g


def _check_depth(depth: Any) -> int:
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1 (ranks counted per note), got {depth!r}.")
    return int(depth)


def average_precisions(y_true: np.ndarray, scores: np.ndarray, *, n_gold: Any = None,
                       depth: int = MAP_DEPTH) -> np.ndarray:
    """Each note's average precision over its codes ranked by score, cut at `depth`.

    AP = (sum over the gold codes ranked r <= depth of (gold codes in the top r) / r) / (the note's gold codes), so
    a gold code ranked below `depth`, or with no column at all (counted in `n_gold` only), adds 0 to the sum but 1 to
    the denominator: trec_eval's `map` over one query.

    Args:
        y_true: [n_docs, n_labels] multi-hot gold labels.
        scores: [n_docs, n_labels] scores; ties ranked by label index (the lower first, as P@k).
        n_gold: [n_docs] each note's number of gold codes, its gold codes outside the columns included (default:
            y_true's row sums, every gold code has a column).
        depth: ranks counted per note (trec_eval's 1000).
    Returns:
        [n_docs] float64 AP in [0, 1]; NaN for a note without a gold code (no AP is defined).
    Raises:
        ValueError: if the shapes differ, scores are not finite, n_gold counts fewer codes than y_true holds, or
            depth < 1.
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    in_cols = y.sum(axis=1)
    g = in_cols.astype(np.int64) if n_gold is None else _check_n_gold(n_gold, in_cols)
    d = min(_check_depth(depth), y.shape[1])
    ranks = np.arange(1, d + 1, dtype=np.float64)                             # [d]
    total = np.zeros(len(y))
    for r0 in range(0, len(y), _ROWS):
        sc, yc = s[r0:r0 + _ROWS], y[r0:r0 + _ROWS]
        order = np.argsort(-sc, axis=1, kind="stable")[:, :d]                 # [c, d] best first, ties by index
        rel = np.take_along_axis(yc, order, axis=1)                          # [c, d] gold at each rank
        total[r0:r0 + _ROWS] = (rel * (np.cumsum(rel, axis=1) / ranks)).sum(axis=1)
    out = np.full(len(y), np.nan)
    has = g > 0
    out[has] = total[has] / g[has]
    return out


def mean_average_precision(y_true: np.ndarray, scores: np.ndarray, *, n_gold: Any = None,
                           depth: int = MAP_DEPTH) -> tuple[float, int]:
    """MAP: the mean of `average_precisions` over the notes with at least one gold code.

    Args:
        y_true, scores, n_gold, depth: as `average_precisions`.
    Returns:
        (MAP, notes counted); MAP is NaN only when no note has a gold code (then 0 notes counted).
    Raises:
        ValueError: as `average_precisions`.
    """
    ap = average_precisions(y_true, scores, n_gold=n_gold, depth=depth)
    ok = ~np.isnan(ap)
    if not ok.any():
        return math.nan, 0
    return float(ap[ok].mean()), int(ok.sum())


def map_figures(y_true: np.ndarray, scores: np.ndarray, *, n_gold: Any = None,
                families: Sequence[str] | None = None, family_gold: Mapping[str, Any] | None = None,
                depth: int = MAP_DEPTH) -> dict[str, Any]:
    """MAP over every code and, when the codes fall into more than one family (diagnoses and procedures), per family:
    each family ranked alone against its own gold codes, as CodiEsp scored its D and P sub-tracks.

    Args:
        y_true, scores, n_gold, depth: as `average_precisions`.
        families: [n_labels] each column's family name (e.g. "diagnoses"); None: no split.
        family_gold: family name -> [n_docs] each note's gold codes of that family, those without a column included
            (default: y_true's row sums over the family's columns). A family here with no column is ranked nowhere:
            its notes' AP is 0.
    Returns:
        {"map", "n_map_notes", "map_depth"} (map None when no note has a gold code) and, with two families or more,
        "map_<family>" and "n_map_notes_<family>" for each.
    Raises:
        ValueError: as `average_precisions`, or families does not name every column.
    """
    y, s = _check_pair(y_true, scores, other_name="scores", as_scores=True)
    value, n = mean_average_precision(y, s, n_gold=n_gold, depth=depth)
    out: dict[str, Any] = {"map": None if n == 0 else value, "n_map_notes": n, "map_depth": _check_depth(depth)}
    if families is None:
        return out
    fam = np.asarray([str(f) for f in families])
    if fam.shape != (y.shape[1],):
        raise ValueError(f"families must name one family per column ({y.shape[1]}), got {len(fam)}.")
    gold = dict(family_gold or {})
    names = sorted(set(fam.tolist()) | set(gold))
    if len(names) < 2:
        return out
    for name in names:
        cols = np.flatnonzero(fam == name)
        in_cols = y[:, cols].sum(axis=1)
        g = _check_n_gold(gold[name], in_cols, f"family_gold[{name!r}]") if name in gold else in_cols
        if len(cols):
            v, k = mean_average_precision(y[:, cols], s[:, cols], n_gold=g, depth=depth)
        else:                                                 # no column: every gold code of the family is missed
            k = int((g > 0).sum())
            v = 0.0
        out[f"map_{name}"] = None if k == 0 else v
        out[f"n_map_notes_{name}"] = k
    return out
