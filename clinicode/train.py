"""Training: a prepared dataset -> LEAM (or tfidf-lr) -> RUN/checkpoint. The loop and its decisions, nothing else.

Model selection and early stopping use dev micro-F1 at the dev-tuned threshold (accuracy for single-label data); dev is
scored by the same `Predictor` that `evaluate` and `predict` use, so per-epoch numbers come from the final code path.
The threshold is tuned on dev (100-point grid) and saved with the checkpoint; test is scored once, at the end. With
`ema_decay` > 0, dev scoring and the checkpoint use a moving average of the weights (`train_state.WeightAverage`).
RUN/state (`train_state`) holds the last finished epoch, so `resume=True` continues an interrupted run exactly.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors.torch import load_file

from clinicode.artifacts import (check_output, holds_training, is_run_data, is_run_folder, make_manifest,
                                 write_bytes_atomic, write_json_atomic)
from clinicode.batching import bucketed_batches, pad_batch
from clinicode.checkpoint import CHECKPOINT_DIR, Checkpoint, save_checkpoint
from clinicode.config import LEAMConfig, TrainConfig, config_from_dict, config_to_dict
from clinicode.constants import HISTORY_FILE, RUN_FILE, SCORES_TEST_FILE, WEIGHTS_FILE
from clinicode.codes.icd9 import load_descriptions_tsv
from clinicode.codes.icd10 import icd10_cm_titles
from clinicode.data.labels import LabelSet
from clinicode.data.prepared import PreparedDataset, dataset_fingerprint, load_dataset
from clinicode.embeddings import initial_vectors
from clinicode.errors import ConfigError, DataFormatError
from clinicode.memory import plan
from clinicode.metrics import HEADLINE, all_metrics, binarize, metrics_report, tune_threshold
from clinicode.model import LEAM
from clinicode.predict import Predictor
from clinicode.runtime import barrier, init_distributed, pick_device, seed_everything, world
from clinicode.safe_io import claim_folder, releases_claims
from clinicode.tokenizer import ClinicalTokenizer
from clinicode.train_state import STATE_DIR, WeightAverage, load_state, make_optimizer, save_state

log = logging.getLogger(__name__)

__all__ = ["train", "make_optimizer", "STATE_DIR"]


def _metric_view(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in (*HEADLINE, "accuracy") if k in m}


def _with_descriptions(labels: LabelSet, descriptions_path: Path | None) -> LabelSet:
    """Fill codes without a description from --descriptions, then ICD-10-CM codes from the CMS tables (packaged)."""
    table = load_descriptions_tsv(descriptions_path) if descriptions_path is not None else {}
    descs = [d or table.get(c, "") for c, d in zip(labels.codes, labels.descriptions)]
    cms = icd10_cm_titles([c for c, d in zip(labels.codes, descs) if not d])
    if cms:
        log.info("%d codes without a description took their ICD-10-CM title from the CMS tables", len(cms))
    return LabelSet(labels.codes, tuple(d or cms.get(c, "") for c, d in zip(labels.codes, descs)))


def _marks_everything(scores: np.ndarray, threshold: float) -> bool:
    """True when [S > t] holds for every code of every note: a threshold that codes everything."""
    return bool(binarize(scores, threshold).all())


def _pos_weight(y: torch.Tensor, alpha: float) -> torch.Tensor:
    """[K] BCE weights of positives, (n_neg / n_pos) ** alpha per label (alpha 1 = balanced), capped at 100."""
    n = y.shape[0]
    n_pos = y.float().sum(0).clamp(min=1.0)
    return ((n - n_pos).clamp(min=1.0) / n_pos).pow(alpha).clamp(max=100.0)


def _single_label(ds: PreparedDataset, cfg: TrainConfig) -> bool:
    """One label per note: softmax + cross-entropy, and the top code is the prediction (decided from train)."""
    if cfg.single_label is not None:
        return cfg.single_label
    train_df = ds.split("train")
    return bool(len(train_df)) and bool((train_df["labels"].map(len) == 1).all())


class _Objective(torch.nn.Module):
    """Forward plus both losses in one module, so DistributedDataParallel sees every use of the weights."""

    def __init__(self, model: LEAM, pos_weight: torch.Tensor | None, block: tuple[int, int], order: str) -> None:
        super().__init__()
        self.model, self.pos_weight, self.block, self.order = model, pos_weight, block, order

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(ids, mask, block=self.block, order=self.order).logits
        return self.model.loss(logits.float(), y, pos_weight=self.pos_weight)


class _Trainer:
    """One LEAM run's data, model and loop; `train()` below is the public entry.

    Under torchrun (WORLD_SIZE > 1) every process builds the same tokenizer, vectors and batch order (all seeded),
    takes its share of each global batch, and DistributedDataParallel averages the gradients. Each process's loss is
    weighted by its share of the batch, so a batch that does not divide evenly still weights every note equally.
    Every rank scores dev itself (identical weights, so identical early-stopping decisions); only rank 0 writes.
    """

    def __init__(self, ds: PreparedDataset, run: Path, cfg: TrainConfig, model_options: dict[str, Any], *,
                 resume: bool, progress: bool, on_epoch: Callable[[dict[str, Any]], None] | None,
                 report: Callable[[str], None] | None, manifest_extra: dict[str, Any]) -> None:
        self.ds, self.run, self.cfg = ds, run, cfg
        self.progress, self.on_epoch = progress, on_epoch
        self.manifest_extra = manifest_extra
        self.device = pick_device(cfg.device)
        self.rank, self.world = init_distributed(self.device)
        self.amp = self.device.type == "cuda"
        self.state_dir = run / STATE_DIR
        self.labels = ds.labels
        train_df, dev_df = ds.split("train"), ds.split("dev")
        self.multilabel = not _single_label(ds, cfg)
        seed_everything(cfg.seed)

        resumed = (load_state(self.state_dir, run=run, train_config=cfg, model_options=model_options,
                              data=manifest_extra["data"]) if resume else None)
        if resumed is not None:
            self.state, self.tokenizer, self.model_config = resumed.state, resumed.tokenizer, resumed.model_config
            self.model = LEAM(self.model_config)
            resumed.load_model(self.model)
            log.info("resuming %s after epoch %d", run, self.state["epoch"])
        else:
            self.state = {"epoch": 0, "best_score": -1.0, "best_epoch": 0, "bad_epochs": 0, "history": []}
            t0 = time.perf_counter()
            self.tokenizer, tokens = ClinicalTokenizer.fit_tokens(train_df["text"].tolist(), min_doc_freq=cfg.min_doc_freq,
                                                                  max_len=cfg.max_len)
            self.train_ids = tokens.ids()                                 # read once: epochs and word2vec reuse them
            log.info("vocabulary of %d words from %d training notes in %.1fs", self.tokenizer.vocab_size, len(train_df),
                     time.perf_counter() - t0)
            self.model_config = LEAMConfig(vocab_size=self.tokenizer.vocab_size, n_labels=len(self.labels),
                                           multilabel=self.multilabel, **model_options)
            self.model = LEAM(self.model_config)
            t0 = time.perf_counter()
            words, codes, info = initial_vectors(
                cfg.embeddings, tokens, self.tokenizer,
                [d or c for c, d in zip(self.labels.codes, self.labels.descriptions)],
                dim=self.model_config.embed_dim, seed=cfg.seed, w2v_epochs=cfg.w2v_epochs)
            with torch.no_grad():
                self.model.word_emb.weight.copy_(torch.from_numpy(words))
                self.model.label_emb.copy_(torch.from_numpy(codes))
            log.info("embeddings %s in %.1fs; %d/%d codes started from description words", cfg.embeddings,
                     time.perf_counter() - t0, info["label_init_from_words"], len(self.labels))
            self.manifest_extra.update(info)
            del tokens
        self.plan = plan(self.model_config, batch_size=cfg.batch_size, max_len=cfg.max_len, budget_mb=cfg.memory_mb,
                         device=self.device.type, training=True, fast=self.model.fast)
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

        if resumed is not None:
            self.train_ids = self.tokenizer.encode_ids(train_df["text"].tolist())
        self.dev_ids = self.tokenizer.encode_ids(dev_df["text"].tolist())
        self.y_train = torch.from_numpy(self.labels.multi_hot(train_df["labels"]))
        self.y_dev = self.labels.multi_hot(dev_df["labels"])
        self.pos_weight = (_pos_weight(self.y_train, cfg.pos_weight).to(self.device)
                           if self.multilabel and cfg.pos_weight > 0 else None)
        self.objective: torch.nn.Module = _Objective(self.model, self.pos_weight, self.plan.block, self.plan.order)
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.objective = DistributedDataParallel(
                self.objective, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def checkpoint(self, threshold: float) -> Checkpoint:
        """The current weights as an (unsaved) checkpoint, for scoring through `Predictor`."""
        return Checkpoint(self.run / CHECKPOINT_DIR, "leam", self.model, self.labels, threshold, self.cfg, {}, self.tokenizer)

    def train_epoch(self, epoch: int) -> float:
        from tqdm.auto import tqdm

        self.model.train()
        rng = np.random.default_rng([self.cfg.seed, epoch])
        torch.manual_seed(self.cfg.seed * 1000 + epoch + 7919 * self.rank)  # dropout repeats after --resume
        batches = bucketed_batches([len(s) for s in self.train_ids], self.cfg.batch_size, rng=rng)
        if self.world > 1:  # this rank's share of every global batch; batches too small to share are skipped
            batches = [(b[self.rank::self.world], len(b)) for b in batches if len(b) >= self.world]
        else:
            batches = [(b, len(b)) for b in batches]
        total, n = 0.0, 0
        bar = tqdm(batches, desc=f"epoch {epoch}/{self.cfg.epochs}", unit="batch", leave=False,
                   disable=not self.progress or self.rank != 0)
        for batch, global_size in bar:
            ids, mask = pad_batch([self.train_ids[i] for i in batch])
            y = self.y_train[batch]
            if self.device.type == "cuda":  # page-locked host memory lets the copies overlap compute
                ids, mask, y = ids.pin_memory(), mask.pin_memory(), y.pin_memory()
            ids = ids.to(self.device, non_blocking=True)
            mask = mask.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
            with torch.autocast("cuda", enabled=self.amp):
                loss, task = self.objective(ids, mask, y)
            share = len(batch) * self.world / global_size  # 1 in one process; DDP's mean over ranks then weights notes equally
            self.opt.zero_grad(set_to_none=True)
            self.scaler.scale(loss * share if share != 1 else loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
            self.model.constrain()
            step = int(self.state.get("steps", 0))
            self.state["steps"] = step + 1
            if self.average is not None:
                self.average.update(step)
            total += task.item() * len(batch)
            n += len(batch)
            bar.set_postfix(loss=f"{total / n:.4f}")
        if self.world > 1:
            import torch.distributed as dist

            sums = torch.tensor([total, float(n)], dtype=torch.float64)
            dist.all_reduce(sums)
            total, n = float(sums[0]), int(sums[1])
        return total / max(n, 1)

    def score_dev(self) -> np.ndarray:
        """[N_dev, K] dev scores from the current weights, through `Predictor` as `evaluate` would score them."""
        self.model.eval()
        return Predictor(self.checkpoint(0.5), device=self.device, batch_size=self.cfg.eval_batch_size,
                         memory_mb=self.cfg.memory_mb).score_ids(self.dev_ids)

    def save_best(self, threshold: float, metrics_dev: dict[str, Any], metrics_test: dict[str, Any] | None = None) -> None:
        save_checkpoint(self.run / CHECKPOINT_DIR, kind="leam", model=self.model, labels=self.labels, threshold=threshold,
                        train_config=self.cfg, tokenizer=self.tokenizer, metrics_dev=metrics_dev, metrics_test=metrics_test,
                        extra={**self.manifest_extra, "epoch": self.state["epoch"], "seed": self.cfg.seed},
                        train_counts=self.labels.counts(self.ds.split("train")["labels"]))

    def fit(self) -> None:
        cfg = self.cfg
        start = int(self.state["epoch"]) + 1
        for epoch in range(start, cfg.epochs + 1):
            if self.state["bad_epochs"] > cfg.patience:
                break
            t0 = time.perf_counter()
            loss = self.train_epoch(epoch)
            if self.average is not None:
                self.average.swap()  # dev scoring and the best checkpoint use the averaged weights
            scores = self.score_dev()
            t = tune_threshold(self.y_dev, scores) if self.multilabel else 0.0
            m = all_metrics(self.y_dev, scores, threshold=t, single_label=not self.multilabel)
            score = m["f1_micro"] if self.multilabel else m.get("accuracy", m["f1_micro"])
            usable = not (self.multilabel and _marks_everything(scores, t))  # never save a model that codes everything
            improved = usable and score > self.state["best_score"]
            self.state["epoch"] = epoch
            if improved:
                self.state.update(best_score=score, best_epoch=epoch, bad_epochs=0)
                if self.rank == 0:
                    self.save_best(t, m)
            else:
                self.state["bad_epochs"] += 1
            if self.average is not None:
                self.average.swap()
            lr_now = self.opt.param_groups[0]["lr"]
            if not improved and cfg.lr_schedule == "plateau" and self.state["bad_epochs"] % cfg.lr_patience == 0:
                for group in self.opt.param_groups:  # saved with the optimiser, so --resume continues at this rate
                    group["lr"] *= cfg.lr_decay
            row = {"epoch": epoch, "train_loss": round(loss, 6), "lr": lr_now, "dev_threshold": t,
                   "seconds": round(time.perf_counter() - t0, 2),
                   "best": improved, **{f"dev_{k}": v for k, v in _metric_view(m).items()}}
            self.state["history"].append(row)
            if self.rank == 0:
                write_bytes_atomic(self.run / HISTORY_FILE, "".join(json.dumps(r) + "\n" for r in self.state["history"]).encode())
                save_state(self.state_dir, model=self.model, opt=self.opt, average=self.average, tokenizer=self.tokenizer,
                           state=self.state, train_config=cfg, model_config=self.model_config, data=self.manifest_extra["data"])
                if self.on_epoch:
                    self.on_epoch(row)
            barrier()
            if self.state["bad_epochs"] > cfg.patience:
                log.info("early stop after epoch %d (best %d)", epoch, self.state["best_epoch"])
                break
        self.manifest_extra["stopped"] = self.stopped()

    def stopped(self) -> str:
        """How training ended: "patience" (dev stopped improving), or "epochs" (the --epochs cap came first)."""
        return "patience" if self.state["bad_epochs"] > self.cfg.patience else "epochs"


def _finish(run: Path, ds: PreparedDataset, ck: Checkpoint, save: Callable[[float, dict, dict], None],
            dev_ids: list | None = None) -> dict[str, Any]:
    """Tune the threshold on dev with the inference path, score test once, save the final checkpoint.

    `dev_ids`: dev as the checkpoint's tokenizer encodes it, when training already has it (LEAM).
    """
    pred = Predictor(ck, device=ck.model.word_emb.weight.device if ck.kind == "leam" else "cpu",
                     batch_size=ck.train_config.eval_batch_size, memory_mb=ck.train_config.memory_mb)
    one = ck.single_label
    dev = ds.split("dev")
    y_dev = ds.labels.multi_hot(dev["labels"])
    s_dev = pred.score_ids(dev_ids) if dev_ids is not None else pred.score(dev["text"].tolist())
    t = 0.0 if one else tune_threshold(y_dev, s_dev)
    if not one and _marks_everything(s_dev, t):
        raise DataFormatError(
            f"{run}: the threshold tuned on dev ({t:.2f}) would mark every code on every note, so the model has learnt "
            "nothing usable; check that the dev and train labels are right (the checkpoint keeps its last usable epoch)."
        )
    metrics_dev = metrics_report(y_dev, s_dev, threshold=t, single_label=one)
    metrics_test: dict[str, Any] = {}
    if "test" in ds.splits and len(ds.split("test")):
        test = ds.split("test")
        y = ds.labels.multi_hot(test["labels"])
        s = pred.score(test["text"].tolist())
        train_counts = ds.labels.multi_hot(ds.split("train")["labels"]).sum(axis=0)  # frequency bands in the app
        metrics_test = metrics_report(y, s, threshold=t, single_label=one, codes=list(ds.labels.codes),
                                      train_counts=train_counts)
        buf = run / f".{SCORES_TEST_FILE}.tmp.npz"
        np.savez_compressed(buf, ids=np.asarray(test["id"].astype(str).tolist()), y_true=y, scores=s)
        buf.replace(run / SCORES_TEST_FILE)
    save(t, metrics_dev, metrics_test)
    return {"threshold": t, "dev": metrics_dev, "test": metrics_test}


def _start_run(run: Path, config: TrainConfig, model_options: dict[str, Any] | None, *, resume: bool) -> None:
    """Claim RUN (created atomically and locked until `train` returns: a second run into it stops here) and write its
    run.json, which marks it as a run folder from the start (kept on --resume; rewritten by a fresh run into a folder
    whose earlier run never finished an epoch)."""
    run.parent.mkdir(parents=True, exist_ok=True)
    if world()[0] != 0:
        run.mkdir(exist_ok=True)
        return
    claim_folder(run, option="--out")
    if holds_training(run) and not resume:  # another run finished an epoch here between the check and the claim
        raise ConfigError(f"--out {run} already holds a run; pass --resume to continue it, or choose a new --out folder.")
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
        raise ConfigError(f"--out {run} already holds a run; pass --resume to continue it, or choose a new --out folder.")
    return check_output(run, option="--out", command="train", folder=True, recognise=is_run_folder,
                        inputs={k: (None if k == "--data" and is_run_data(run, v) else v) for k, v in inputs.items()})


@releases_claims
def train(
    *,
    out_dir: Path,
    config: TrainConfig,
    data_dir: Path,
    model_options: dict[str, Any] | None = None,
    descriptions_path: Path | None = None,
    resume: bool = False,
    progress: bool = True,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train LEAM (or tfidf-lr) on a prepared dataset and write RUN/checkpoint.

    Args:
        out_dir: the run folder (RUN): checkpoint/, state/, history.jsonl, scores_test.npz, run.json.
        config: training options.
        data_dir: a prepared dataset folder (or any coded-notes folder); RUN/data may be the run's own.
        model_options: LEAMConfig fields (embed_dim, radius, hidden_dim, dropout, label_reg_weight, compat).
        descriptions_path: optional code<TAB>description file filling labels without a description.
        resume: continue from RUN/state after an interruption.
        on_epoch: called with each epoch's history row.
        report: called with status lines for the user (the memory plan).
    Returns:
        {"threshold", "dev", "test", "run"} with the final metrics.
    """
    vectors = config.embeddings if config.embeddings not in ("w2v", "random") else None
    run = check_run_folder(Path(out_dir), resume=resume,
                           inputs={"--data": data_dir, "--descriptions": descriptions_path, "--embeddings": vectors})
    ck_dir = run / CHECKPOINT_DIR
    if config.model == "leam":  # unknown or out-of-range model options fail before anything is written
        config_from_dict(LEAMConfig, {"vocab_size": 3, "n_labels": 1, **(model_options or {})}, source="model options")
    ds = load_dataset(Path(data_dir), top_k=config.top_k)
    ds.labels = _with_descriptions(ds.labels, descriptions_path)
    if len(ds.split("train")) == 0 or len(ds.split("dev")) == 0:
        raise DataFormatError(f"{data_dir}: the train and dev splits must both hold notes (got {len(ds.split('train'))} and {len(ds.split('dev'))}).")
    for split, why in (("train", "there is nothing to learn"), ("dev", "the threshold cannot be tuned")):
        if not any(len(row) for row in ds.split(split)["labels"]):
            raise DataFormatError(f"{data_dir}: no {split} note has a code of the label set ({len(ds.labels)} codes), so {why}; "
                                  "check the data's labels (and labels.json).")
    if config.model == "leam":  # a batch that cannot fit the memory budget fails now, not after the vocabulary
        plan(config_from_dict(LEAMConfig, {"vocab_size": 3, "n_labels": len(ds.labels), **(model_options or {})}),
             batch_size=config.batch_size, max_len=config.max_len, budget_mb=config.memory_mb,
             device=pick_device(config.device).type, training=True)
    fingerprint = hashlib.sha256((dataset_fingerprint(Path(data_dir)) + json.dumps(ds.labels.to_json())).encode()).hexdigest()
    extra: dict[str, Any] = {"data": {
        "path": str(Path(data_dir).resolve()), "n_train": len(ds.split("train")), "n_dev": len(ds.split("dev")),
        "n_test": len(ds.splits.get("test", [])), "label_set": ds.manifest.get("label_set"), "fingerprint": fingerprint}}
    if ds.stats.get("leakage"):
        extra["data"]["leakage"] = ds.stats["leakage"]
    dropped = ds.stats.get("documents_without_top_k_label") or {}
    if sum(dropped.values()):
        extra["data"]["dropped_without_top_k_label"] = dropped
        if world()[0] == 0:  # one warning under torchrun, not one per process
            log.warning("--top-k %d kept %d labels and dropped %d notes that have none of them (%s); they are neither "
                        "trained on nor scored. Leave out --top-k to keep them.", config.top_k, len(ds.labels),
                        sum(dropped.values()), ", ".join(f"{k} {v:,}" for k, v in dropped.items()))
    _start_run(run, config, model_options, resume=resume)  # only now: bad data or options leave no empty run folder behind
    seed_everything(config.seed)

    if config.model == "tfidf-lr":
        from clinicode.baseline import fit_tfidf_lr

        if world()[1] > 1:
            raise ConfigError("--model tfidf-lr trains in one process; run it without torchrun.")
        train_df = ds.split("train")
        model = fit_tfidf_lr(train_df["text"].tolist(), ds.labels.multi_hot(train_df["labels"]), single_label=_single_label(ds, config))

        def save(t: float, md: dict, mt: dict) -> None:
            save_checkpoint(ck_dir, kind="tfidf-lr", model=model, labels=ds.labels, threshold=t, train_config=config,
                            metrics_dev=md, metrics_test=mt, extra={**extra, "seed": config.seed},
                            train_counts=ds.labels.counts(train_df["labels"]))

        result = _finish(run, ds, Checkpoint(ck_dir, "tfidf-lr", model, ds.labels, 0.5, config, {}), save)
        return {**result, "run": str(run)}

    trainer = _Trainer(ds, run, config, model_options or {}, resume=resume, progress=progress, on_epoch=on_epoch,
                       report=report, manifest_extra={**extra, "world_size": world()[1]})
    trainer.fit()
    if trainer.stopped() == "epochs" and trainer.state["bad_epochs"] == 0 and trainer.rank == 0:
        note = (f"training reached --epochs {config.epochs} while dev was still improving (best at epoch "
                f"{trainer.state['best_epoch']}); a larger --epochs would probably do better.")
        if report is not None:
            report(note)
        else:
            log.warning("%s", note)
    if trainer.world > 1:
        import torch.distributed as dist

        barrier()
        if trainer.rank != 0:  # rank 0 alone scores dev and test and writes the final checkpoint
            dist.destroy_process_group()
            return {"run": str(run), "rank": trainer.rank, "best_epoch": trainer.state["best_epoch"]}
    if not (ck_dir / WEIGHTS_FILE).is_file():
        raise DataFormatError(f"{run}: training ended without a checkpoint (no epoch finished); check the data and options.")
    trainer.model.load_state_dict(load_file(str(ck_dir / WEIGHTS_FILE)))  # the best-on-dev state, not the last one
    trainer.model.to(trainer.device).eval()

    def save_final(t: float, md: dict, mt: dict) -> None:
        trainer.state["epoch"] = trainer.state["best_epoch"]
        trainer.save_best(t, md, mt)

    result = _finish(run, ds, trainer.checkpoint(0.5), save_final, dev_ids=trainer.dev_ids)
    if trainer.world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return {**result, "run": str(run), "best_epoch": trainer.state["best_epoch"], "history": trainer.state["history"],
            "stopped": trainer.stopped()}
