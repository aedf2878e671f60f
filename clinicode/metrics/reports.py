"""The metrics reports: every headline metric under CAML's keys, the per-code table, the rare/frequent slices."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from clinicode.metrics.checks import _check_pair
from clinicode.metrics.definitions import (
    DEFAULT_KS,
    DEFAULT_THRESHOLD,
    _counts,
    _f1_mean_from_counts,
    _macro_from_counts,
    _micro_from_counts,
    _safe_div,
    binarize,
)
from clinicode.metrics.ranking import _recall_from_hits, _top_k_hits, accuracy, auc_macro, auc_micro, label_aucs

# The one list of metric names every report uses (keys follow CAML; docs/metrics.md defines each), in display order.
METRIC_LABELS: dict[str, str] = {
    "auc_macro": "Macro AUC", "auc_micro": "Micro AUC", "f1_macro": "Macro F1", "f1_macro_mean": "Macro F1 (code mean)",
    "f1_macro_present": "Macro F1 (codes present)", "f1_micro": "Micro F1", "prec_at_5": "P@5", "prec_at_8": "P@8",
    "prec_at_15": "P@15", "rec_at_5": "R@5", "rec_at_8": "R@8", "rec_at_15": "R@15", "accuracy": "Accuracy",
}
HEADLINE = ("auc_macro", "auc_micro", "f1_macro", "f1_micro", "prec_at_5")  # the LEAM paper's (and CAML's) columns
SUMMARY = (*HEADLINE, "prec_at_8")                                         # the app's metric cards
REPORTED = tuple(METRIC_LABELS)                                             # `evaluate`'s table


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
