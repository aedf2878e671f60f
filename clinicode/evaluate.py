"""Evaluate a checkpoint on a prepared split (scores through `Predictor.score`, metrics per DOMAIN.md section 7),
or compare two models on the same notes with a paired bootstrap."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from clinicode.artifacts import write_json_atomic
from clinicode.data.prepared import load_dataset
from clinicode.errors import ConfigError, DataFormatError
from clinicode.metrics import all_metrics, paired_bootstrap, per_label_metrics
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


def compare(*, runs_a: Sequence[Path], runs_b: Sequence[Path], data_dir: Path, split: str = "test", n_boot: int = 2000,
            seed: int = 0, output: Path | None = None, device: str = "auto") -> dict[str, Any]:
    """Is model A better than, as good as, or worse than model B on this split? A paired bootstrap over notes.

    Each side is one run or several (e.g. seeds of one configuration, averaged). Every run is scored at its own
    tuned threshold; see `clinicode.metrics.paired_bootstrap` for the interval.

    Args:
        runs_a, runs_b: run or checkpoint folders; all must share one label set.
        data_dir: prepared dataset folder, loaded as the first run of A was trained (its --top-k).
        split: train, dev or test.
        n_boot: bootstrap resamples.
        seed: seed of the resampling.
        output: JSON file to write atomically.
    Returns:
        {"split", "n_docs", "n_boot", "a": [...], "b": [...], "metrics_a", "metrics_b" (means over runs),
        "f1_micro": {diff, lo, hi, p_a_below_b}, "auc_macro": {...}}.
    Raises:
        ConfigError: if a side is empty or the runs have different label sets.
        DataFormatError: if the split holds no notes.
    """
    if not runs_a or not runs_b:
        raise ConfigError("compare needs at least one run on each side (--a RUN and --b RUN).")
    if n_boot < 1:
        raise ConfigError(f"--n-boot must be >= 1, got {n_boot}.")
    preds = [[Predictor.from_checkpoint(r, device=device) for r in runs] for runs in (runs_a, runs_b)]
    first = preds[0][0]
    codes = sorted(first.codes)
    for side, runs in zip(preds, (runs_a, runs_b)):
        for p, r in zip(side, runs):
            if sorted(p.codes) != codes:
                raise ConfigError(f"{r}: its label set ({len(p.codes)} codes) differs from {runs_a[0]}'s ({len(codes)} codes); "
                                  "compare runs trained on the same labels.")
    ds = load_dataset(Path(data_dir), top_k=first.checkpoint.train_config.top_k)
    df = ds.split(split)
    if len(df) == 0:
        raise DataFormatError(f"{data_dir}: split {split!r} holds no notes; nothing to compare.")
    texts = df["text"].tolist()

    def columns(p: Predictor) -> list[int]:  # this run's column of each code, in `codes` order
        where = {c: i for i, c in enumerate(p.codes)}
        return [where[c] for c in codes]

    y = first.labels.multi_hot(df["labels"])[:, columns(first)]
    sides = [[(p.score(texts)[:, columns(p)], p.threshold) for p in side] for side in preds]
    boot = paired_bootstrap(y, sides[0], sides[1], n_boot=n_boot, seed=seed)
    keys = ("f1_micro", "auc_macro", "auc_micro", "f1_macro", "prec_at_5")

    def mean_metrics(runs: list[tuple[np.ndarray, float]]) -> dict[str, float]:
        ms = [all_metrics(y, s, threshold=t) for s, t in runs]
        return {k: float(np.mean([m[k] for m in ms])) for k in keys if k in ms[0]}

    result = {"split": split, "n_docs": int(len(df)), "n_boot": n_boot,
              "a": [str(r) for r in runs_a], "b": [str(r) for r in runs_b],
              "metrics_a": mean_metrics(sides[0]), "metrics_b": mean_metrics(sides[1]), **boot}
    if output is not None:
        write_json_atomic(Path(output), result)
    return result


def format_comparison(c: dict[str, Any]) -> str:
    """Means of both sides, A − B, the bootstrap interval and how often A came out below B."""
    lines = [f"{'metric':<12}{'A':>9}{'B':>9}{'A - B':>10}   {'95% interval':<20}{'A below B':>10}"]
    for k in ("f1_micro", "auc_macro"):
        b = c[k]
        lines.append(f"{k:<12}{c['metrics_a'][k]:>9.4f}{c['metrics_b'][k]:>9.4f}{b['diff']:>+10.4f}   "
                     f"[{b['lo']:+.4f}, {b['hi']:+.4f}]  {100 * b['p_a_below_b']:>8.1f}%")
    lines.append(f"{c['n_docs']:,} {c['split']} notes, {c['n_boot']:,} paired resamples; A = {len(c['a'])} run(s), B = {len(c['b'])} run(s).")
    return "\n".join(lines)
