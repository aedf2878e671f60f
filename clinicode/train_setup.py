"""Training's set-up (`TrainingSetup`: tokenizer, vectors, --resume, memory plan, optimiser, DDP) and finishing
(`finish`: threshold on dev, test once, the final checkpoint) around `train.py`'s loop; `train_whole` for a kind
fitted without it. Everything model-specific is asked of the model kind: this module imports no model."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from clinicode.artifacts import holds_training, is_run_data, is_run_folder, make_manifest
from clinicode.checkpoint import CHECKPOINT_DIR, Checkpoint, save_checkpoint
from clinicode.codes.icd9 import load_descriptions_tsv
from clinicode.codes.icd10 import PCS_NO_TITLE
from clinicode.codes.systems import infer_code_system
from clinicode.config import TrainConfig, config_to_dict
from clinicode.constants import EVIDENCE, RUN_FILE, SCORES_TEST_FILE
from clinicode.data.labels import LabelSet
from clinicode.data.prepared import PreparedDataset, dataset_fingerprint, load_dataset
from clinicode.embeddings import initial_vectors
from clinicode.errors import ConfigError, DataFormatError
from clinicode.file_locks import claim_folder
from clinicode.files import check_output, write_json_atomic
from clinicode.metrics import EVIDENCE_K, binarize, metrics_report, spans_report, tune_threshold
from clinicode.models import ModelKind, kind_options, train_kind
from clinicode.predict import Predictor
from clinicode.runtime import init_distributed, pick_device, release_freed_memory, seed_everything, world
from clinicode.tokenizer import ClinicalTokenizer
from clinicode.train_state import STATE_DIR, WeightAverage, load_state, make_optimizer

log = logging.getLogger("clinicode.train")  # one logger for a run's messages, set-up and loop alike

__all__ = ["Objective", "ShareDropout", "TrainingSetup", "check_run_folder", "distributed", "finish",
           "marks_everything", "open_run", "train_whole"]


def with_descriptions(labels: LabelSet, descriptions_path: Path | None) -> LabelSet:
    """Fill codes without a description from --descriptions, then from the titles the label set's code system ships
    (ICD-10-CM: the CMS tables, packaged)."""
    table = load_descriptions_tsv(descriptions_path) if descriptions_path is not None else {}
    descs = [d or table.get(c, "") for c, d in zip(labels.codes, labels.descriptions)]
    system = labels.code_system or infer_code_system(labels.codes)
    cms = system.titles([c for c, d in zip(labels.codes, descs) if not d])
    if cms:
        log.info("%d codes without a description took their title from %s's packaged tables", len(cms), system.name)
    return LabelSet(labels.codes, tuple(d or cms.get(c, "") for c, d in zip(labels.codes, descs)), labels.code_system)


def marks_everything(scores: np.ndarray, threshold: float) -> bool:
    """True when [S > t] holds for every code of every note: a threshold that codes everything."""
    return bool(binarize(scores, threshold).all())


def pos_weight(y: torch.Tensor, alpha: float) -> torch.Tensor:
    """[K] BCE weights of positives, (n_neg / n_pos) ** alpha per label (alpha 1 = balanced), capped at 100."""
    n = y.shape[0]
    n_pos = y.sum(0).float().clamp(min=1.0)  # bytes sum as int64 (exact), with no float copy of y
    return ((n - n_pos).clamp(min=1.0) / n_pos).pow(alpha).clamp(max=100.0)


def single_label(ds: PreparedDataset, cfg: TrainConfig) -> bool:
    """One label per note: softmax + cross-entropy, and the top code is the prediction (decided from train)."""
    if cfg.single_label is not None:
        return cfg.single_label
    train_df = ds.split("train")
    return bool(len(train_df)) and bool((train_df["labels"].map(len) == 1).all())


class ShareDropout(torch.nn.Dropout):
    """Dropout for one process's share of a global batch under torchrun: the mask one process would draw for the whole
    batch, cut to this process's rows, so every note gets the mask it would get in one process.

    With its own mask per process (an `nn.Dropout` in each), training with dropout was a different random draw from
    one process's: the same in distribution, but on the tests' small set the default model's test micro-F1 moves by up
    to 0.1 with the dropout masks alone, which read as a gap between one and two processes (docs/training.md). Every
    process seeds torch alike and draws the global [n, ...] mask with `F.dropout` itself (so the same numbers as one
    process's `nn.Dropout` on those n notes, on the CPU and on CUDA), then keeps rows `rows`.

    `share` is (rows, n) during a training forward (`Objective` sets it); None, evaluation or p = 0: plain dropout.
    """

    share: tuple[slice, int] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.share is None or not self.training or self.p == 0:
            return super().forward(x)
        rows, n = self.share
        keep = F.dropout(x.new_ones((n, *x.shape[1:])), self.p, True)  # [n, ...] 0 or 1/(1-p): the global mask
        return x * keep[rows]


class Objective(torch.nn.Module):
    """Forward plus both losses in one module, so DistributedDataParallel sees every use of the weights.

    `forward(..., share=(rows, n))`: this process holds rows `rows` of a global batch of n notes (torchrun); the
    dropout masks are then the global batch's (`ShareDropout`, which `distributed` puts in place of the model's).
    """

    def __init__(self, kind: ModelKind, model: torch.nn.Module, pos_weight: torch.Tensor | None, plan: Any) -> None:
        super().__init__()
        self.kind, self.model, self.pos_weight, self.plan = kind, model, pos_weight, plan

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, y: torch.Tensor,
                share: tuple[slice, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        dropouts = [m for m in self.model.modules() if isinstance(m, ShareDropout)] if share is not None else []
        for m in dropouts:
            m.share = share
        try:
            logits = self.kind.forward(self.model, ids, mask, plan=self.plan)
        finally:  # the loss's own regulariser (LEAM's code vectors through the head) is no share of the batch
            for m in dropouts:
                m.share = None
        return self.kind.loss(self.model, logits, y, pos_weight=self.pos_weight)


def distributed(objective: Objective, device: torch.device) -> torch.nn.Module:
    """The objective for one process of a torchrun job: the model's dropouts become `ShareDropout` (no weights, so
    the state dict and checkpoints are unchanged), and it is wrapped in DistributedDataParallel."""
    from torch.nn.parallel import DistributedDataParallel

    for name, m in list(objective.model.named_modules()):
        if type(m) is torch.nn.Dropout:
            parent, _, child = name.rpartition(".")
            setattr(objective.model.get_submodule(parent), child, ShareDropout(m.p))
    return DistributedDataParallel(objective, device_ids=[device.index] if device.type == "cuda" else None)


class TrainingSetup:
    """One run's data, model, optimiser and state before its first (or, on --resume, next) epoch, for a model kind
    `trained_by_loop` (LEAM): the kind builds the model, its configuration and memory plan, and scores the loss.

    Under torchrun (WORLD_SIZE > 1) every process builds the same tokenizer, vectors and batch order (all seeded);
    the objective is wrapped in DistributedDataParallel. `train._Trainer` holds this state and runs the loop over it.
    """

    def __init__(self, ds: PreparedDataset, run: Path, cfg: TrainConfig, options: Any,
                 as_given: dict[str, Any], *, resume: bool, report: Callable[[str], None] | None,
                 manifest_extra: dict[str, Any], warm_start: Checkpoint | None = None) -> None:
        self.ds, self.run, self.cfg = ds, run, cfg
        # the kind the loop trains: the one named, or the part of it a loop trains (the fused model's LEAM: its
        # checkpoints until the loop ends are that part's; `train` builds the named kind's model afterwards)
        named = train_kind(cfg.model)
        self.kind = kind = getattr(named, "loop_kind", None) or named
        self.manifest_extra = manifest_extra
        self.device = pick_device(cfg.device)
        self.rank, self.world = init_distributed(self.device)
        self.amp = self.device.type == "cuda"
        self.state_dir = run / STATE_DIR
        self.labels = ds.labels
        train_df, dev_df = ds.split("train"), ds.split("dev")
        self.multilabel = not single_label(ds, cfg)
        seed_everything(cfg.seed)

        resumed = (load_state(self.state_dir, run=run, train_config=cfg, model_options=as_given,
                              data=manifest_extra["data"], config_type=kind.config_type) if resume else None)
        if resumed is not None:
            self.state, self.tokenizer, self.model_config = resumed.state, resumed.tokenizer, resumed.model_config
            self.model = kind.build(self.model_config)
            resumed.load_model(self.model)
            log.info("resuming %s after epoch %d", run, self.state["epoch"])
        elif warm_start is not None:  # `review retrain`: the checkpoint's tokenizer and weights, a fresh loop state
            self._start_warm(warm_start)
        else:
            self._start_fresh(train_df, options)
        self.plan = kind.memory_plan(self.model_config, batch_size=cfg.batch_size, max_len=cfg.max_len,
                                     budget_mb=cfg.memory_mb, device=self.device.type, training=True,
                                     fast=getattr(self.model, "fast", True))
        if self.rank == 0:
            log.info("%s", self.plan.summary())
            if report is not None:
                report(self.plan.summary())
        self.manifest_extra["memory"] = self.plan.to_dict()
        self.model.to(self.device)
        self.opt = make_optimizer(self.model, cfg)
        if resumed is not None:
            resumed.load_optimizer(self.opt)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)
        self.average = (WeightAverage(self.model, cfg.ema_decay, resumed.average() if resumed else None)
                        if cfg.ema_decay > 0 else None)

        if resumed is not None or warm_start is not None:
            self.train_ids = self.tokenizer.encode_ids(train_df["text"].tolist())
        self.dev_ids = self.tokenizer.encode_ids(dev_df["text"].tolist())
        # [N, K] 0/1 as bytes, built as bytes (a quarter of float32's memory at 50,000 notes x 9,000 codes, and no
        # float32 copy on the way); a batch's rows become float32 when used, the same values
        self.y_train = torch.from_numpy(self.labels.multi_hot(train_df["labels"], dtype=np.uint8))
        self.train_counts = self.labels.counts(train_df["labels"])  # [K] training notes per code: checkpoint, slices
        self.y_dev = self.labels.multi_hot(dev_df["labels"])
        self.pos_weight = (pos_weight(self.y_train, cfg.pos_weight).to(self.device)
                           if self.multilabel and cfg.pos_weight > 0 else None)
        self.objective: torch.nn.Module = Objective(kind, self.model, self.pos_weight, self.plan)
        if self.world > 1:
            self.objective = distributed(self.objective, self.device)
        release_freed_memory()  # the vocabulary's and word2vec's freed buffers, before the first epoch's

    def _start_warm(self, warm_start: Checkpoint) -> None:
        """A fresh loop state from WARM_START's tokenizer and weights (`review retrain`)."""
        cfg, kind = self.cfg, self.kind
        old, new = list(warm_start.labels.codes), list(self.labels.codes)
        if warm_start.kind != cfg.model or new[:len(old)] != old:
            raise ConfigError(f"a warm start needs a {cfg.model} checkpoint of the data's label set (or of its first "
                              f"codes, when codes were added after them); {warm_start.path} is {warm_start.kind} with "
                              f"{len(warm_start.labels)} codes.")
        self.state = {"epoch": 0, "best_score": -1.0, "best_epoch": 0, "bad_epochs": 0, "history": []}
        self.tokenizer = warm_start.tokenizer
        self.model_config = warm_start.model.config  # a loop kind's model carries its configuration
        if len(new) > len(old):   # codes coders added (`review retrain`): the model grows a row for each
            self.model_config = dataclasses.replace(self.model_config, n_labels=len(new))
        self.model = kind.build(self.model_config)
        titles = self.labels.descriptions[len(old):]
        words = self.tokenizer.encode_ids([t or "" for t in titles]) if titles else []
        kind.load_weights(warm_start.path, self.model,  # the checkpoint's weights, through its kind
                          **({"new_code_words": [[int(j) for j in w] for w in words]} if words else {}))
        log.info("warm start from %s", warm_start.path)

    def _start_fresh(self, train_df: Any, options: Any) -> None:
        """A fresh loop state: the tokenizer fitted on train, the model built and started from the initial vectors."""
        cfg, kind = self.cfg, self.kind
        self.state = {"epoch": 0, "best_score": -1.0, "best_epoch": 0, "bad_epochs": 0, "history": []}
        t0 = time.perf_counter()
        self.tokenizer, tokens = ClinicalTokenizer.fit_tokens(train_df["text"].tolist(),
                                                              min_doc_freq=cfg.min_doc_freq, max_len=cfg.max_len)
        self.train_ids = tokens.ids()                                 # read once: epochs and word2vec reuse them
        log.info("vocabulary of %d words from %d training notes in %.1fs", self.tokenizer.vocab_size,
                 len(train_df), time.perf_counter() - t0)
        self.model_config = kind.model_config(options, vocab_size=self.tokenizer.vocab_size,
                                              n_labels=len(self.labels), multilabel=self.multilabel)
        self.model = kind.build(self.model_config)
        t0 = time.perf_counter()
        words, codes, info = initial_vectors(
            cfg.embeddings, tokens, self.tokenizer,
            [d or c for c, d in zip(self.labels.codes, self.labels.descriptions)],
            dim=kind.vector_dim(self.model_config), seed=cfg.seed, w2v_epochs=cfg.w2v_epochs)
        kind.start_from(self.model, words, codes)
        log.info("embeddings %s in %.1fs; %d/%d codes started from description words", cfg.embeddings,
                 time.perf_counter() - t0, info["label_init_from_words"], len(self.labels))
        self.manifest_extra.update(info)
        del tokens

    def release_training(self) -> None:
        """Drop what only the epochs need (optimiser moments, gradients, the weight average, the training ids) and
        hand the freed memory back, so the final scoring does not stack on it."""
        self.opt = None  # type: ignore[assignment]
        self.average = None
        self.train_ids = []
        self.model.zero_grad(set_to_none=True)
        release_freed_memory()

    def checkpoint(self, threshold: float) -> Checkpoint:
        """The current weights as an (unsaved) checkpoint, for scoring through `Predictor`."""
        return Checkpoint(self.run / CHECKPOINT_DIR, self.kind.name, self.model, self.labels, threshold, self.cfg, {},
                          self.tokenizer)

    def save_best(self, threshold: float, metrics_dev: dict[str, Any],
                  metrics_test: dict[str, Any] | None = None) -> None:
        save_checkpoint(self.run / CHECKPOINT_DIR, kind=self.kind.name, model=self.model, labels=self.labels,
                        threshold=threshold, train_config=self.cfg, tokenizer=self.tokenizer,
                        metrics_dev=metrics_dev, metrics_test=metrics_test,
                        extra={**self.manifest_extra, "epoch": self.state["epoch"], "seed": self.cfg.seed},
                        train_counts=self.train_counts)


def finish(run: Path, ds: PreparedDataset, ck: Checkpoint, save: Callable[[float, dict, dict], None], *,
           train_counts: np.ndarray, dev_ids: list | None = None,
           refit: Callable[[], Checkpoint] | None = None) -> dict[str, Any]:
    """Tune the threshold on dev with the inference path, score test once, save the final checkpoint.

    `train_counts`: [K] training notes per code (`LabelSet.counts`), for the test metrics' rare/frequent slices.
    `dev_ids`: dev as the checkpoint's tokenizer encodes it, when training already has it (LEAM).
    `refit`: called once dev has chosen the threshold and been scored; the checkpoint it returns (parts refitted on
    train and dev: `--fit-on train+dev`) is the one test scores and SAVE keeps. Dev's metrics stay those of CK, since
    the refitted model has seen dev.
    """
    def scorer(ck: Checkpoint) -> Predictor:
        return Predictor(ck, device=ck.model_kind.device(ck.model),
                         batch_size=ck.train_config.eval_batch_size, memory_mb=ck.train_config.memory_mb)

    pred = scorer(ck)
    one = ck.single_label
    dev = ds.split("dev")
    y_dev = ds.labels.multi_hot(dev["labels"])
    s_dev = pred.score_ids(dev_ids) if dev_ids is not None else pred.score(dev["text"].tolist())
    # codes no training note carries (only dev's, learnt by `refit`) cannot be found yet: they do not move the threshold
    known = np.asarray(train_counts) > 0
    t = 0.0 if one else tune_threshold(y_dev[:, known], s_dev[:, known])
    if not one and marks_everything(s_dev, t):
        raise DataFormatError(
            f"{run}: the threshold tuned on dev ({t:.2f}) would mark every code on every note, so the model has "
            "learnt nothing usable; check that the dev and train labels are right (the checkpoint keeps its last "
            "usable epoch)."
        )
    metrics_dev = metrics_report(y_dev, s_dev, threshold=t, single_label=one)
    if refit is not None:
        pred = scorer(refit())
    metrics_test: dict[str, Any] = {}
    if "test" in ds.splits and len(ds.split("test")):
        test = ds.split("test")
        y = ds.labels.multi_hot(test["labels"])
        s = pred.score(test["text"].tolist())
        metrics_test = metrics_report(y, s, threshold=t, single_label=one, codes=list(ds.labels.codes),
                                      train_counts=train_counts)
        if EVIDENCE in test.columns:  # gold mentions: judge the highlights, at the tuned threshold
            evidence = _evidence(pred, test["text"].tolist(), test["labels"].tolist(), test[EVIDENCE].tolist(), t)
            if evidence is not None:
                metrics_test["evidence"] = evidence
        buf = run / f".{SCORES_TEST_FILE}.tmp.npz"
        np.savez_compressed(buf, ids=np.asarray(test["id"].astype(str).tolist()), y_true=y, scores=s)
        buf.replace(run / SCORES_TEST_FILE)
    save(t, metrics_dev, metrics_test)
    return {"threshold": t, "dev": metrics_dev, "test": metrics_test}


def _evidence(pred: Predictor, texts: list[str], gold: list[Any], mentions: list[Any],
              threshold: float) -> dict[str, Any] | None:
    """The evidence figures `evaluate` reports (`clinicode.evaluate.evidence_of`, which a verb's set-up may not
    import), at the tuned threshold: None when no note has a gold mention."""
    if not any(len(m) for m in mentions):
        return None
    known = set(pred.codes)
    titles = {c: "" if t == PCS_NO_TITLE else t for c, t in zip(pred.codes, pred.labels.descriptions)}
    return spans_report(texts, gold, mentions, pred.code_spans(texts, explain=EVIDENCE_K, threshold=threshold),
                        titles=titles, spell=lambda code: pred.code_system.canonical(code, known),
                        spanless=None if pred.model_kind.can_explain else pred.kind)


def start_run(run: Path, config: TrainConfig, model_options: dict[str, Any] | None, *, resume: bool) -> None:
    """Claim RUN (created atomically and locked until `train` returns: a second run into it stops here) and write its
    run.json, which marks it as a run folder from the start (kept on --resume; rewritten by a fresh run into a folder
    whose earlier run never finished an epoch)."""
    run.parent.mkdir(parents=True, exist_ok=True)
    if world()[0] != 0:
        run.mkdir(exist_ok=True)
        return
    claim_folder(run, option="--out")
    if holds_training(run) and not resume:  # another run finished an epoch here between the check and the claim
        raise ConfigError(f"--out {run} already holds a run; pass --resume to continue it, or choose a new --out "
                          "folder.")
    if not resume or not (run / RUN_FILE).is_file():
        write_json_atomic(run / RUN_FILE, make_manifest("run", train_config=config_to_dict(config),
                                                        model_options=model_options or {}))


def check_run_folder(run: Path, *, resume: bool, inputs: dict[str, Path | str | None]) -> Path:
    """Refuse an --out that holds another run (without --resume) or anything `train` did not write; before any work.

    RUN/data, the run's own prepared dataset (`train --mimic-dir`, the pipelines), may sit inside the run folder.
    Under torchrun only rank 0 checks: the others would see the run.json that rank 0 has just written.

    Returns:
        RUN resolved (links and `..` as the system follows them), the path every later step writes to.
    """
    if world()[0] != 0:
        return Path(os.path.realpath(run))
    if holds_training(run) and not resume:
        raise ConfigError(f"--out {run} already holds a run; pass --resume to continue it, or choose a new --out "
                          "folder.")
    return check_output(run, option="--out", command="train", folder=True, recognise=is_run_folder,
                        inputs={k: (None if k == "--data" and is_run_data(run, v) else v) for k, v in inputs.items()})


def open_run(out_dir: Path, config: TrainConfig, data_dir: Path, model_options: Any, *,
             descriptions_path: Path | None, resume: bool) -> tuple[Path, PreparedDataset, dict[str, Any], Any]:
    """Check RUN, the data and the options, then claim RUN and write run.json; bad input leaves no run folder.

    `model_options`: the kind's options (`ModelKind.options_type`), or a dict of some of them (the rest default),
    saved in run.json as given; a kind that takes none refuses any.

    Returns:
        (RUN resolved, the dataset with descriptions filled, the manifest's extra fields ({"data": ...}), the
        model options (an `options_type`, or None for a kind that takes none, such as tfidf-lr)).
    Raises:
        ConfigError: an unknown --model (before anything is written), or bad options.
    """
    kind = train_kind(config.model)
    vectors = config.embeddings if config.embeddings not in ("w2v", "random") else None
    run = check_run_folder(Path(out_dir), resume=resume,
                           inputs={"--data": data_dir, "--descriptions": descriptions_path, "--embeddings": vectors})
    options = kind_options(kind, model_options)  # unknown or out-of-range options fail before anything is written
    # a kind that refits on train and dev (the fused model's --fit-on train+dev) learns the codes only dev carries too
    grows = config.fit_on == "train+dev" and hasattr(kind, "refit") and config.top_k is None
    ds = load_dataset(Path(data_dir), top_k=config.top_k, label_splits=("train", "dev") if grows else ("train",))
    ds.labels = with_descriptions(ds.labels, descriptions_path)
    n_train, n_dev = len(ds.split("train")), len(ds.split("dev"))
    if n_train == 0 or n_dev == 0:
        raise DataFormatError(f"{data_dir}: the train and dev splits must both hold notes (got {n_train} and "
                              f"{n_dev}).")
    for split, why in (("train", "there is nothing to learn"), ("dev", "the threshold cannot be tuned")):
        if not any(len(row) for row in ds.split(split)["labels"]):
            raise DataFormatError(f"{data_dir}: no {split} note has a code of the label set ({len(ds.labels)} codes), "
                                  f"so {why}; check the data's labels (and labels.json).")
    if kind.trained_by_loop:  # a batch that cannot fit the memory budget fails now, not after the vocabulary
        kind.memory_plan(kind.model_config(options, vocab_size=3, n_labels=len(ds.labels), multilabel=True),
                         batch_size=config.batch_size, max_len=config.max_len, budget_mb=config.memory_mb,
                         device=pick_device(config.device).type, training=True)
    fingerprint = hashlib.sha256((dataset_fingerprint(Path(data_dir))
                                  + json.dumps(ds.labels.to_json())).encode()).hexdigest()
    extra: dict[str, Any] = {"data": {
        "path": str(Path(data_dir).resolve()), "n_train": n_train, "n_dev": n_dev,
        "n_test": len(ds.splits.get("test", [])), "label_set": ds.manifest.get("label_set"),
        "fingerprint": fingerprint}}
    if ds.stats.get("leakage"):
        extra["data"]["leakage"] = ds.stats["leakage"]
    dropped = ds.stats.get("documents_without_top_k_label") or {}
    if sum(dropped.values()):
        extra["data"]["dropped_without_top_k_label"] = dropped
        if world()[0] == 0:  # one warning under torchrun, not one per process
            log.warning("--top-k %d kept %d labels and dropped %d notes that have none of them (%s); they are neither "
                        "trained on nor scored. Leave out --top-k to keep them.", config.top_k, len(ds.labels),
                        sum(dropped.values()), ", ".join(f"{k} {v:,}" for k, v in dropped.items()))
    start_run(run, config, given_options(model_options), resume=resume)  # only now: bad input leaves no run folder
    return run, ds, extra, options


def given_options(model_options: Any) -> dict[str, Any]:
    """The model options as the user gave them (run.json, --resume's comparison): a dict of some, or all of them."""
    if model_options is not None and not isinstance(model_options, dict):  # the kind's options type (a dataclass)
        return config_to_dict(model_options)
    return dict(model_options or {})


def train_whole(run: Path, ds: PreparedDataset, config: TrainConfig, extra: dict[str, Any], options: Any = None
                ) -> dict[str, Any]:
    """A model kind fitted whole (`ModelKind.fit`, e.g. the tfidf-lr baseline) with its OPTIONS (`kind_options`):
    fit on train, then `finish` (threshold on dev, test, checkpoint); one process only."""
    kind = train_kind(config.model)
    if world()[1] > 1:
        raise ConfigError(f"--model {kind.name} trains in one process; run it without torchrun.")
    ck_dir = run / CHECKPOINT_DIR
    train_df, dev_df = ds.split("train"), ds.split("dev")
    model = kind.fit(train_df["text"].tolist(), ds.labels.multi_hot(train_df["labels"]), options=options,
                     labels=ds.labels, dev_texts=dev_df["text"].tolist(), y_dev=ds.labels.multi_hot(dev_df["labels"]),
                     single_label=single_label(ds, config), seed=config.seed, min_doc_freq=config.min_doc_freq)

    counts = ds.labels.counts(train_df["labels"])

    def save(t: float, md: dict, mt: dict) -> None:
        save_checkpoint(ck_dir, kind=kind.name, model=model, labels=ds.labels, threshold=t, train_config=config,
                        metrics_dev=md, metrics_test=mt, extra={**extra, "seed": config.seed}, train_counts=counts)

    result = finish(run, ds, Checkpoint(ck_dir, kind.name, model, ds.labels, 0.5, config, {}), save,
                    train_counts=counts)
    return {**result, "run": str(run)}
