"""Evaluate a checkpoint on a prepared split: scores through `Predictor.score`, metrics per DOMAIN.md section 7."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clinicode.artifacts import write_json_atomic
from clinicode.data.prepared import load_dataset
from clinicode.errors import DataFormatError
from clinicode.metrics import all_metrics, per_label_metrics
from clinicode.predict import Predictor


def evaluate(*, checkpoint: Path, data_dir: Path, split: str = "test", output: Path | None = None,
             device: str = "auto", predictor: Predictor | None = None) -> dict[str, Any]:
    """Metrics of a checkpoint on one split, at its tuned threshold and at 0.5, plus per-code rows.

    Gold codes outside the checkpoint's label set are ignored and counted (`n_gold_outside_labels`).

    Args:
        checkpoint: run or checkpoint folder.
        data_dir: prepared dataset folder (or any coded-notes folder).
        split: train, dev or test.
        output: JSON file to write atomically.
    Returns:
        the metrics dict (keys auc_macro, auc_micro, f1_macro, f1_macro_mean, f1_micro, prec_at_5, prec_at_8,
        threshold, n_docs, threshold_0.5, per_code, ...).
    """
    pred = predictor or Predictor.from_checkpoint(checkpoint, device=device)
    ds = load_dataset(Path(data_dir), top_k=pred.checkpoint.train_config.top_k)
    df = ds.split(split)
    if len(df) == 0:
        raise DataFormatError(f"{data_dir}: split {split!r} holds no notes; nothing to evaluate.")
    labels = pred.labels
    outside = sum(1 for row in df["labels"] for c in row if c not in labels)
    y = labels.multi_hot(df["labels"])
    s = pred.score(df["text"].tolist())
    t = pred.threshold
    result = {
        **all_metrics(y, s, threshold=t),
        "threshold_0.5": all_metrics(y, s, threshold=0.5),
        "split": split,
        "n_gold_outside_labels": outside,
        "per_code": per_label_metrics(y, s, list(labels.codes), threshold=t),
    }
    if output is not None:
        write_json_atomic(Path(output), result)
    return result


def format_table(m: dict[str, Any]) -> str:
    """A readable two-column table: tuned threshold vs 0.5."""
    keys = ["auc_macro", "auc_micro", "f1_macro", "f1_macro_mean", "f1_micro", "prec_at_5", "prec_at_8", "accuracy"]
    half = m.get("threshold_0.5", {})
    lines = [f"{'metric':<16}{'t=' + format(m['threshold'], '.2f'):>10}{'t=0.50':>10}"]
    for k in keys:
        if k in m:
            a, b = m[k], half.get(k, float("nan"))
            lines.append(f"{k:<16}{a:>10.4f}{b:>10.4f}")
    lines.append(f"{'n_docs':<16}{m['n_docs']:>10d}")
    return "\n".join(lines)
