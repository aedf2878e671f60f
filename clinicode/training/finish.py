"""Finishing a run (`finish`): the threshold tuned on dev through the inference path (or on the dev scores a kind's
fit already made), test scored once for its metrics and its evidence figures, the metrics and the final checkpoint;
`finish_fitted` for what a kind's `fit` gave. Imports no model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from clinicode.checkpoint import CHECKPOINT_DIR, Checkpoint, save_checkpoint
from clinicode.codes.icd10 import PCS_NO_TITLE
from clinicode.config import TrainConfig
from clinicode.constants import EVIDENCE, SCORES_TEST_FILE
from clinicode.data.labels import PartlyCoded, coded_columns
from clinicode.data.prepared import PreparedDataset
from clinicode.errors import DataFormatError
from clinicode.metrics import EVIDENCE_K, binarize, metrics_report, spans_report, tune_threshold
from clinicode.models.fitting import Fitted
from clinicode.predict import Predictor

__all__ = ["finish", "finish_fitted", "marks_everything", "single_label"]


def marks_everything(scores: np.ndarray, threshold: float) -> bool:
    """True when [S > t] holds for every code of every note: a threshold that codes everything."""
    return bool(binarize(scores, threshold).all())


def single_label(ds: PreparedDataset, cfg: TrainConfig) -> bool:
    """One label per note: softmax + cross-entropy, and the top code is the prediction (decided from train)."""
    if cfg.single_label is not None:
        return cfg.single_label
    train_df = ds.split("train")
    return bool(len(train_df)) and bool((train_df["labels"].map(len) == 1).all())


def finish(run: Path, ds: PreparedDataset, ck: Checkpoint, save: Callable[[float, dict, dict], None], *,
           train_counts: np.ndarray, dev_ids: list | None = None, dev_scores: np.ndarray | None = None,
           device: Any = "cpu", refit: Callable[[], Checkpoint] | None = None) -> dict[str, Any]:
    """Tune the threshold on dev with the inference path, score test once, save the final checkpoint.

    `train_counts`: [K] training notes per code (`LabelSet.counts`), for the test metrics' rare/frequent slices.
    `dev_ids`: dev as the checkpoint's tokenizer encodes it, when training already has it (LEAM).
    `dev_scores`: [N_dev, K] CK's dev scores as its scorer gives them, when training already has them (the fused
    model's fusion): dev is not scored again.
    `device`: where the model's weights are (`Fitted.device`); dev and test are scored there.
    `refit`: called once dev has chosen the threshold and been scored; the checkpoint it returns (parts refitted on
    train and dev: `--fit-on train+dev`) is the one test scores and SAVE keeps. Dev's metrics stay those of CK, since
    the refitted model has seen dev.
    """
    def scorer(ck: Checkpoint) -> Predictor:
        return Predictor(ck, device=device,
                         batch_size=ck.train_config.eval_batch_size, memory_mb=ck.train_config.memory_mb)

    pred = scorer(ck)
    one = pred.single_label
    dev = ds.split("dev")
    y_dev = ds.labels.multi_hot(dev["labels"])
    if dev_scores is not None:
        s_dev = dev_scores
    else:
        s_dev = pred.score_ids(dev_ids) if dev_ids is not None else pred.score(dev["text"].tolist())
    # codes no training note carries (only dev's, learnt by `refit`) cannot be found yet, and dev's and test's notes
    # were never read for codes coders added in review (`PartlyCoded`): those move no threshold and count in no metric
    read = coded_columns(PartlyCoded.of(ds.manifest, ds.labels, ()), len(train_counts))
    known = (np.asarray(train_counts) > 0) & read
    t = 0.0 if one else tune_threshold(y_dev[:, known], s_dev[:, known])
    if not one and marks_everything(s_dev, t):
        raise DataFormatError(
            f"{run}: the threshold tuned on dev ({t:.2f}) would mark every code on every note, so the model has "
            "learnt nothing usable; check that the dev and train labels are right (the checkpoint keeps its last "
            "usable epoch)."
        )
    metrics_dev = metrics_report(y_dev[:, read], s_dev[:, read], threshold=t, single_label=one)
    if refit is not None:
        pred = scorer(refit())
    metrics_test: dict[str, Any] = {}
    if "test" in ds.splits and len(ds.split("test")):
        test = ds.split("test")
        y = ds.labels.multi_hot(test["labels"])
        s = pred.score(test["text"].tolist())
        metrics_test = metrics_report(y[:, read], s[:, read], threshold=t, single_label=one,
                                      codes=list(np.asarray(ds.labels.codes)[read]),
                                      train_counts=np.asarray(train_counts)[read])
        if EVIDENCE in test.columns:  # gold mentions: judge the highlights, at the tuned threshold
            evidence = _evidence(pred, test["text"].tolist(), test["labels"].tolist(), test[EVIDENCE].tolist(), t,
                                 scores=s)
            if evidence is not None:
                metrics_test["evidence"] = evidence
        buf = run / f".{SCORES_TEST_FILE}.tmp.npz"
        np.savez_compressed(buf, ids=np.asarray(test["id"].astype(str).tolist()), y_true=y, scores=s)
        buf.replace(run / SCORES_TEST_FILE)
    if not read.all():   # named beside the metrics that leave them out
        for m in (m for m in (metrics_dev, metrics_test) if m):
            m["codes_not_coded_in_split"] = [c for c, r in zip(ds.labels.codes, read) if not r]
    save(t, metrics_dev, metrics_test)
    return {"threshold": t, "dev": metrics_dev, "test": metrics_test}


def _evidence(pred: Predictor, texts: list[str], gold: list[Any], mentions: list[Any],
              threshold: float, *, scores: np.ndarray) -> dict[str, Any] | None:
    """The evidence figures `evaluate` reports (`clinicode.evaluate.evidence_of`, which a verb's set-up may not
    import), at the tuned threshold: None when no note has a gold mention. SCORES: the notes' [N, K] scores, which
    the test metrics read; the notes are not scored again, only encoded for their spans."""
    if not any(len(m) for m in mentions):
        return None
    known = set(pred.codes)
    titles = {c: "" if t == PCS_NO_TITLE else t for c, t in zip(pred.codes, pred.labels.descriptions)}
    shown = pred.code_spans(texts, explain=EVIDENCE_K, threshold=threshold, scores=scores)
    return spans_report(texts, gold, mentions, shown,
                        titles=titles, spell=lambda code: pred.code_system.canonical(code, known),
                        spanless=None if pred.model_kind.abilities.explain else pred.kind)


def finish_fitted(kind: Any, run: Path, ds: Any, config: TrainConfig, fitted: Fitted,
            extra: dict[str, Any]) -> dict[str, Any]:
    """Tune the threshold on dev, score test and save the final checkpoint of FITTED (what KIND's `fit` gave); with a
    `refit` (`--fit-on train+dev`), test scores and the checkpoint keeps the model it returns once dev has chosen; with
    `labels`, DS's label set becomes them."""
    ck_dir = run / CHECKPOINT_DIR
    # the model holds more codes than the data (`--terminology`'s after them): dev, test, the refit's notes
    # (`TrainingData.train_and_dev`) and the checkpoint count them from now on
    if fitted.labels is not None:
        ds.labels = fitted.labels
    counts = ds.labels.counts(ds.split("train")["labels"]) if fitted.train_counts is None else fitted.train_counts
    final = fitted

    def refit() -> Checkpoint:
        nonlocal final
        final = fitted.refit()
        return Checkpoint(ck_dir, kind.name, final.model, ds.labels, 0.5, config, {}, final.tokenizer)

    def save(t: float, md: dict, mt: dict) -> None:
        save_checkpoint(ck_dir, kind=kind.name, model=final.model, labels=ds.labels, threshold=t, train_config=config,
                        tokenizer=final.tokenizer, metrics_dev=md, metrics_test=mt,
                        extra={**extra, **final.manifest, "seed": config.seed},
                        train_counts=counts if final.train_counts is None else final.train_counts)

    ck = Checkpoint(ck_dir, kind.name, fitted.model, ds.labels, 0.5, config, {}, fitted.tokenizer)
    return finish(run, ds, ck, save, train_counts=counts, dev_ids=fitted.dev_ids, dev_scores=fitted.dev_scores,
                  device=fitted.device, refit=refit if fitted.refit is not None else None)
