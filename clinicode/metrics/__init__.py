"""ICD-coding metrics with CAML's exact definitions over [n_docs, n_labels] arrays (docs/metrics.md): pure numpy,
sized for full code sets. One module a topic; this package's names are its API: `from clinicode.metrics import X`."""

from __future__ import annotations

from clinicode.metrics.bootstrap import paired_bootstrap
from clinicode.metrics.definitions import (
    DEFAULT_KS,
    DEFAULT_THRESHOLD,
    binarize,
    f1_macro_mean,
    macro_prf,
    micro_prf,
    predicted_codes,
    predicted_indices,
)
from clinicode.metrics.evidence import (
    EVIDENCE_K,
    EVIDENCE_SEED,
    NO_PHRASES,
    evidence_figures,
    evidence_quality,
    random_spans,
    spans_report,
    title_spans,
    word_spans,
    words_covered,
)
from clinicode.metrics.ranking import accuracy, auc_macro, auc_micro, label_aucs, precision_at_k, recall_at_k
from clinicode.metrics.reports import (
    HEADLINE,
    METRIC_LABELS,
    RARE_BELOW,
    REPORTED,
    SUMMARY,
    all_metrics,
    frequency_slices,
    metrics_report,
    per_label_metrics,
)
from clinicode.metrics.retrieval import MAP_DEPTH, average_precisions, map_figures, mean_average_precision
from clinicode.metrics.span_code import SPAN_SLACK, span_code_prf, span_holds
from clinicode.metrics.thresholds import f1_by_threshold, tune_threshold

__all__ = [
    "DEFAULT_KS", "DEFAULT_THRESHOLD", "EVIDENCE_K", "EVIDENCE_SEED", "HEADLINE", "MAP_DEPTH", "METRIC_LABELS",
    "NO_PHRASES", "RARE_BELOW", "REPORTED", "SPAN_SLACK", "SUMMARY", "accuracy", "all_metrics", "auc_macro",
    "auc_micro", "average_precisions", "binarize", "evidence_figures", "evidence_quality", "f1_by_threshold",
    "f1_macro_mean", "frequency_slices", "label_aucs", "macro_prf", "map_figures", "mean_average_precision",
    "metrics_report", "micro_prf", "paired_bootstrap", "per_label_metrics", "precision_at_k", "predicted_codes",
    "predicted_indices", "random_spans", "recall_at_k", "span_code_prf", "span_holds", "spans_report", "title_spans",
    "tune_threshold", "word_spans", "words_covered",
]
