"""The epoch loop (`EpochLoop`, the tool `train` hands a kind's `fit`): set-up (`TrainingSetup`: tokenizer, vectors,
--resume, memory plan, optimiser, DDP) and epochs (`_Trainer`: selection on dev, schedule, weight average, state).
Model-specific answers come from the kind it is given; it imports no model. The story: docs/training.md."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from clinicode.batching import bucketed_batches, pad_batch
from clinicode.checkpoint import CHECKPOINT_DIR, Checkpoint, save_checkpoint
from clinicode.config import TrainConfig
from clinicode.constants import HISTORY_FILE
from clinicode.data.labels import PartlyCoded, coded_columns
from clinicode.data.prepared import PreparedDataset
from clinicode.embeddings import initial_vectors
from clinicode.errors import ConfigError, DataFormatError
from clinicode.files import write_bytes_atomic
from clinicode.metrics import HEADLINE, all_metrics, tune_threshold
from clinicode.models.fitting import Fitted, LoopModel
from clinicode.predict import Predictor
from clinicode.runtime import barrier, init_distributed, pick_device, release_freed_memory, seed_everything, world
from clinicode.tokenizer import ClinicalTokenizer
from clinicode.training.finish import marks_everything, single_label
from clinicode.training.state import STATE_DIR, WeightAverage, load_state, make_optimizer, save_state

log = logging.getLogger("clinicode.train")  # one logger for a run's messages, set-up and loop alike

__all__ = ["EpochLoop", "Objective", "OtherRank", "ShareDropout", "TrainingSetup", "distributed", "estimate",
           "pos_weight", "say"]


def pos_weight(y: torch.Tensor, alpha: float) -> torch.Tensor:
    """[K] BCE weights of positives, (n_neg / n_pos) ** alpha per label (alpha 1 = balanced), capped at 100."""
    n = y.shape[0]
    n_pos = y.sum(0).float().clamp(min=1.0)  # bytes sum as int64 (exact), with no float copy of y
    return ((n - n_pos).clamp(min=1.0) / n_pos).pow(alpha).clamp(max=100.0)


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


UNKNOWN = 2   # a training label neither 0 nor 1 (`PartlyCoded`): the loss leaves it out


class Objective(torch.nn.Module):
    """Forward plus both losses in one module, so DistributedDataParallel sees every use of the weights.

    `forward(..., share=(rows, n))`: this process holds rows `rows` of a global batch of n notes (torchrun); the
    dropout masks are then the global batch's (`ShareDropout`, which `distributed` puts in place of the model's).
    """

    def __init__(self, kind: LoopModel, model: torch.nn.Module, pos_weight: torch.Tensor | None, plan: Any, *,
                 partly: bool = False) -> None:
        super().__init__()
        self.kind, self.model, self.pos_weight, self.plan = kind, model, pos_weight, plan
        self.partly = partly   # labels may be UNKNOWN: those terms leave the loss

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, y: torch.Tensor,
                share: tuple[slice, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        known = None
        if self.partly:   # a code coders added, on a note never read for it: neither positive nor negative
            known = (y != UNKNOWN).to(y.dtype)
            y = y * known
        dropouts = [m for m in self.model.modules() if isinstance(m, ShareDropout)] if share is not None else []
        for m in dropouts:
            m.share = share
        try:
            logits = self.kind.forward(self.model, ids, mask, plan=self.plan, targets=y)
        finally:  # the loss's own regulariser (LEAM's code vectors through the head) is no share of the batch
            for m in dropouts:
                m.share = None
        more = {} if known is None else {"known": known}   # a kind's loss without KNOWN trains data naming none
        return self.kind.loss(self.model, logits, y, pos_weight=self.pos_weight, **more)


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
    """One run's data, model, optimiser and state before its first (or, on --resume, next) epoch, for the `LoopModel`
    a kind's `fit` hands the loop (LEAM): it builds the model, its configuration and memory plan, and scores the loss.

    Under torchrun (WORLD_SIZE > 1) every process builds the same tokenizer, vectors and batch order (all seeded);
    the objective is wrapped in DistributedDataParallel. `_Trainer` below holds this state and runs the loop over it.
    """

    def __init__(self, kind: LoopModel, ds: PreparedDataset, run: Path, cfg: TrainConfig, options: Any,
                 as_given: dict[str, Any], *, resume: bool, report: Callable[[str], None] | None,
                 manifest_extra: dict[str, Any], warm_start: Checkpoint | None = None) -> None:
        self.ds, self.run, self.cfg = ds, run, cfg
        # the kind the loop trains: the one named, or the part of it its `fit` hands the loop (the fused model's LEAM:
        # its checkpoints until the loop ends are that part's; the fused kind makes its model afterwards)
        self.kind = kind
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
        partly = PartlyCoded.of(ds.manifest, self.labels, train_df["id"]) if self.multilabel else None
        self.dev_read = coded_columns(partly, len(self.labels))   # the codes dev's F1 is over
        if partly is not None:   # codes coders added: UNKNOWN on the notes never read for them (after pos_weight)
            y = self.y_train.numpy()   # the tensor's own memory
            for k in partly.columns:
                y[~partly.rows(y, k), k] = UNKNOWN
        self.objective: torch.nn.Module = Objective(kind, self.model, self.pos_weight, self.plan,
                                                    partly=partly is not None)
        if self.world > 1:
            self.objective = distributed(self.objective, self.device)
        release_freed_memory()  # the vocabulary's and word2vec's freed buffers, before the first epoch's

    def _start_warm(self, warm_start: Checkpoint) -> None:
        """A fresh loop state from WARM_START's tokenizer and weights (`review retrain`)."""
        cfg, kind = self.cfg, self.kind
        # the codes its loop part has rows for (a fused checkpoint's `--terminology` codes follow them, rowless)
        old, new = list(warm_start.labels.codes)[:warm_start.model.config.n_labels], list(self.labels.codes)
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


def _metric_view(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in (*HEADLINE, "accuracy") if k in m}


class _Trainer:
    """One run's epochs over the state its `TrainingSetup` built (held, not inherited: `self.setup`); `EpochLoop`
    below is the entry a kind's `fit` calls.

    Model selection and early stopping use dev micro-F1 at the dev-tuned threshold (accuracy for single-label data);
    dev is scored by the same `Predictor` that `evaluate` and `predict` use, so per-epoch numbers come from the final
    code path. The threshold is tuned on dev (100-point grid) and saved with the checkpoint; test is scored once, at
    the end. With `ema_decay` > 0, dev scoring and the checkpoint use a moving average of the weights
    (`training.state.WeightAverage`). RUN/state (`training.state`) holds the last finished epoch, so `resume=True`
    continues an interrupted run exactly.

    Under torchrun (WORLD_SIZE > 1) each process takes its share of each global batch, and DistributedDataParallel
    averages the gradients. Each process's loss is weighted by its share of the batch, so a batch that does not divide
    evenly still weights every note equally, and each note gets the dropout mask one process would draw for it
    (`ShareDropout`): the updates are one process's, up to float rounding. Every rank scores dev itself
    (identical weights, so identical early-stopping decisions); only rank 0 writes.
    """

    def __init__(self, setup: TrainingSetup, *, progress: bool,
                 on_epoch: Callable[[dict[str, Any]], None] | None, resumable: bool = True) -> None:
        self.setup, self.progress, self.on_epoch = setup, progress, on_epoch
        # a run that cannot be resumed (`retrain`) writes no RUN/state and keeps its best weights in memory
        self.resumable = resumable
        self.best: dict[str, torch.Tensor] | None = None

    # What a caller hooks into during the loop (a test wraps the optimiser's step), read from the setup.
    @property
    def model(self) -> torch.nn.Module:
        return self.setup.model

    @property
    def opt(self) -> torch.optim.Optimizer:
        return self.setup.opt

    @property
    def model_config(self) -> Any:
        return self.setup.model_config

    def train_epoch(self, epoch: int) -> float:
        from tqdm.auto import tqdm

        setup = self.setup
        setup.model.train()
        rng = np.random.default_rng([setup.cfg.seed, epoch])
        # dropout repeats after --resume; every rank draws the global batch's masks from the same seed (ShareDropout)
        torch.manual_seed(setup.cfg.seed * 1000 + epoch)
        batches = bucketed_batches([len(s) for s in setup.train_ids], setup.cfg.batch_size, rng=rng)
        if setup.world > 1:  # this rank's share of every global batch; batches too small to share are skipped
            batches = [(b[setup.rank::setup.world], len(b)) for b in batches if len(b) >= setup.world]
        else:
            batches = [(b, len(b)) for b in batches]
        total, n = 0.0, 0
        bar = tqdm(batches, desc=f"epoch {epoch}/{setup.cfg.epochs}", unit="batch", leave=False,
                   disable=not self.progress or setup.rank != 0)
        for batch, global_size in bar:
            ids, mask = pad_batch([setup.train_ids[i] for i in batch])
            y = setup.y_train[batch].float()
            if setup.device.type == "cuda":  # page-locked host memory lets the copies overlap compute
                ids, mask, y = ids.pin_memory(), mask.pin_memory(), y.pin_memory()
            ids = ids.to(setup.device, non_blocking=True)
            mask = mask.to(setup.device, non_blocking=True)
            y = y.to(setup.device, non_blocking=True)
            with torch.autocast("cuda", enabled=setup.amp):  # under torchrun: rows rank::world of the global batch
                loss, task = (setup.objective(ids, mask, y, share=(slice(setup.rank, None, setup.world), global_size))
                              if setup.world > 1 else setup.objective(ids, mask, y))
            # 1 in one process; DDP's mean over ranks then weights notes equally
            share = len(batch) * setup.world / global_size
            setup.opt.zero_grad(set_to_none=True)
            setup.scaler.scale(loss * share if share != 1 else loss).backward()
            setup.scaler.step(setup.opt)
            setup.scaler.update()
            setup.kind.after_step(setup.model)
            step = int(setup.state.get("steps", 0))
            setup.state["steps"] = step + 1
            if setup.average is not None:
                setup.average.update(step)
            total += task.item() * len(batch)
            n += len(batch)
            bar.set_postfix(loss=f"{total / n:.4f}")
        if setup.world > 1:
            import torch.distributed as dist

            sums = torch.tensor([total, float(n)], dtype=torch.float64)
            dist.all_reduce(sums)
            total, n = float(sums[0]), int(sums[1])
        return total / max(n, 1)

    def score_dev(self) -> np.ndarray:
        """[N_dev, K] dev scores from the current weights, through `Predictor` as `evaluate` would score them."""
        setup = self.setup
        setup.model.eval()
        return Predictor(setup.checkpoint(0.5), device=setup.device, batch_size=setup.cfg.eval_batch_size,
                         memory_mb=setup.cfg.memory_mb).score_ids(setup.dev_ids)

    def fit(self) -> None:
        setup = self.setup
        cfg = setup.cfg
        start = int(setup.state["epoch"]) + 1
        # (patience, lr_patience) in epochs for this training set: one epoch is one batch per batch_size notes
        self.patience = cfg.patience_epochs(-(-len(setup.train_ids) // cfg.batch_size))
        patience, lr_patience = self.patience
        if (patience, lr_patience) != (cfg.patience, cfg.lr_patience):
            log.info("patience %d and lr patience %d epochs (at least %d and %d steps of this set's epochs)",
                     patience, lr_patience, cfg.patience_steps, cfg.lr_patience_steps)
        for epoch in range(start, cfg.epochs + 1):
            if setup.state["bad_epochs"] > patience:
                break
            t0 = time.perf_counter()
            loss = self.train_epoch(epoch)
            release_freed_memory()  # the epoch's step buffers, before dev scoring's
            if setup.average is not None:
                setup.average.swap()  # dev scoring and the best checkpoint use the averaged weights
            scores = self.score_dev()
            read = setup.dev_read   # codes dev was never coded for (`PartlyCoded`) choose no epoch
            t = tune_threshold(setup.y_dev[:, read], scores[:, read]) if setup.multilabel else 0.0
            m = all_metrics(setup.y_dev[:, read], scores[:, read], threshold=t, single_label=not setup.multilabel)
            score = m["f1_micro"] if setup.multilabel else m.get("accuracy", m["f1_micro"])
            usable = not (setup.multilabel and marks_everything(scores, t))  # never save a model that codes everything
            improved = usable and score > setup.state["best_score"]
            setup.state["epoch"] = epoch
            if improved:
                setup.state.update(best_score=score, best_epoch=epoch, bad_epochs=0)
                if not self.resumable:   # the weights as a saved checkpoint holds them, read back by `_load_best`
                    self.best = {k: v.detach().to("cpu", copy=True) for k, v in setup.model.state_dict().items()}
                elif setup.rank == 0:
                    setup.save_best(t, m)
            else:
                setup.state["bad_epochs"] += 1
            if setup.average is not None:
                setup.average.swap()
            lr_now = setup.opt.param_groups[0]["lr"]
            if not improved and cfg.lr_schedule == "plateau" and setup.state["bad_epochs"] % lr_patience == 0:
                for group in setup.opt.param_groups:  # saved with the optimiser, so --resume continues at this rate
                    group["lr"] *= cfg.lr_decay
            row = {"epoch": epoch, "train_loss": round(loss, 6), "lr": lr_now, "dev_threshold": t,
                   "seconds": round(time.perf_counter() - t0, 2),
                   "best": improved, **({} if usable else {"codes_everything": True}),
                   **{f"dev_{k}": v for k, v in _metric_view(m).items()},
                   **{k: round(v, 4) for k, v in setup.kind.epoch_stats(setup.model).items()}}
            setup.state["history"].append(row)
            if setup.rank == 0:
                write_bytes_atomic(setup.run / HISTORY_FILE,
                                   "".join(json.dumps(r) + "\n" for r in setup.state["history"]).encode())
                if self.resumable:
                    save_state(setup.state_dir, model=setup.model, opt=setup.opt, average=setup.average,
                               tokenizer=setup.tokenizer, state=setup.state, train_config=cfg,
                               model_config=setup.model_config, data=setup.manifest_extra["data"])
                if self.on_epoch:
                    self.on_epoch(row)
            barrier()
            if setup.state["bad_epochs"] > patience:
                log.info("early stop after epoch %d (best %d)", epoch, setup.state["best_epoch"])
                break
        setup.manifest_extra["stopped"] = self.stopped()

    def stopped(self) -> str:
        """How training ended: "patience" (dev stopped improving), or "epochs" (the --epochs cap came first)."""
        return "patience" if self.setup.state["bad_epochs"] > self.patience[0] else "epochs"


def say(report: Callable[[str], None] | None, line: str) -> None:
    if report is not None:
        report(line)
    log.info("%s", line)


def estimate(setup: TrainingSetup, n_steps: int = 3) -> str:
    """How long the run will roughly take, said before the first epoch: the time of a few training steps' forward and
    backward passes measured on this machine (no weight changes; dropout is reseeded at each epoch), times the
    batches of an epoch, plus dev scoring (a forward pass over dev, about a third of a training step per note),
    times the epochs."""
    cfg = setup.cfg
    n_train = len(setup.train_ids)
    if not n_train:  # on --resume the training ids are read back only when the loop needs them
        return "time estimate: unavailable on --resume"
    steps = -(-n_train // cfg.batch_size)
    rng = np.random.default_rng([cfg.seed, 0])
    batches = bucketed_batches([len(s) for s in setup.train_ids], cfg.batch_size, rng=rng)[:n_steps]
    setup.model.train()
    t0 = time.perf_counter()
    for batch in batches:
        ids, mask = pad_batch([setup.train_ids[i] for i in batch])
        loss, _ = setup.objective(ids.to(setup.device), mask.to(setup.device),
                                  setup.y_train[batch].float().to(setup.device))
        loss.backward()
    setup.model.zero_grad(set_to_none=True)
    per_step = (time.perf_counter() - t0) / max(len(batches), 1) * 1.15   # the optimiser's step: ~15% more
    epoch_s = per_step * steps * (1.0 + len(setup.dev_ids) / (3.0 * n_train))
    patience, _ = cfg.patience_epochs(steps)
    low = epoch_s * min(cfg.epochs, patience + 1)
    return (f"time estimate: ~{epoch_s:.1f} s an epoch ({steps} batches at ~{per_step * 1000:.0f} ms measured, "
            f"plus dev scoring); at most {cfg.epochs} epochs: at most ~{epoch_s * cfg.epochs / 60:.1f} min, "
            f"at least ~{low:.0f} s (patience {patience} epochs)")


class OtherRank(Exception):
    """Raised by the loop in a torchrun process other than rank 0 once the epochs end: `train` returns its result."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("not rank 0")
        self.result = result


class EpochLoop:
    """The epoch loop as the tool `train` hands a kind's `fit` (`clinicode.models.fitting.Loop`): one call trains a
    model of the kind it is given over the run's notes (a warm start's epochs over its `loop_notes`) and returns its
    best-on-dev weights, loaded."""

    def __init__(self, run: Path, ds: Any, config: TrainConfig, extra: dict[str, Any], *, given: dict[str, Any],
                 resume: bool, progress: bool, on_epoch: Callable[[dict[str, Any]], None] | None,
                 report: Callable[[str], None] | None, warm_start: Checkpoint | None,
                 resumable: bool = True) -> None:
        self.run, self.ds, self.config, self.extra, self.given = run, ds, config, extra, given
        self.resume, self.progress, self.on_epoch, self.report = resume, progress, on_epoch, report
        self.warm_start, self.resumable = warm_start, resumable

    def __call__(self, kind: Any, options: Any, *, epochs: int | None = None) -> Fitted:
        config, report, every = self.config, self.report, self.ds
        ds = _loop_data(every) if self.warm_start is not None else every
        # a kind may cap its loop's epochs (the fused model's LEAM part: --fused-epochs); the checkpoint keeps the
        # options as given
        loop_config = dataclasses.replace(config, epochs=epochs) if epochs is not None else config
        setup = TrainingSetup(kind, ds, self.run, loop_config, options, self.given, resume=self.resume, report=report,
                              manifest_extra={**self.extra, "world_size": world()[1]}, warm_start=self.warm_start)
        if ds is not every:   # the bands and the checkpoint count every training note, not only those the epochs saw
            setup.train_counts = every.labels.counts(every.split("train")["labels"])
        trainer = _Trainer(setup, progress=self.progress, on_epoch=self.on_epoch, resumable=self.resumable)
        # measured (a few training steps) only when someone reads it: a report, or the log at INFO (--verbose)
        if (setup.world == 1 and int(setup.state["epoch"]) < loop_config.epochs
                and (report is not None or log.isEnabledFor(logging.INFO))):
            say(report, estimate(setup))
        trainer.fit()
        _note_if_still_improving(trainer, setup, config, loop_config, report)
        if setup.world > 1:
            import torch.distributed as dist

            barrier()
            if setup.rank != 0:
                dist.destroy_process_group()
                raise OtherRank({"run": str(self.run), "rank": setup.rank, "best_epoch": setup.state["best_epoch"]})
        setup.release_training()
        _load_best(self.run, setup, trainer.best)
        return Fitted(model=setup.model, tokenizer=setup.tokenizer, dev_ids=setup.dev_ids, device=setup.device,
                      manifest={**setup.manifest_extra, "epoch": setup.state["best_epoch"]},
                      result={"best_epoch": setup.state["best_epoch"], "history": setup.state["history"],
                              "stopped": trainer.stopped()})


def _loop_data(ds: Any) -> Any:
    """DS with only the training notes its manifest's `loop_notes` names (`review retrain`'s data: the decided notes
    and the sample a warm start's epochs see), or DS itself when it names none."""
    keep = ds.manifest.get("loop_notes")
    if not keep:
        return ds
    train_df = ds.split("train")
    part = train_df[train_df["id"].astype(str).isin({str(i) for i in keep})].reset_index(drop=True)
    return dataclasses.replace(ds, splits={**ds.splits, "train": part})


def _note_if_still_improving(trainer: _Trainer, setup: TrainingSetup, config: TrainConfig, loop_config: TrainConfig,
                             report: Callable[[str], None] | None) -> None:
    """Tell the user when the loop ran out of --epochs while dev was still improving."""
    if (trainer.stopped() == "epochs" and setup.state["bad_epochs"] == 0 and setup.rank == 0
            and loop_config.epochs == config.epochs):
        note = (f"training reached --epochs {config.epochs} while dev was still improving (best at epoch "
                f"{setup.state['best_epoch']}); a larger --epochs would probably do better.")
        if report is not None:
            report(note)
        else:
            log.warning("%s", note)


def _load_best(run: Path, setup: TrainingSetup, best: dict[str, torch.Tensor] | None = None) -> None:
    """Load the best-on-dev weights the loop saved (or, for a run that cannot be resumed, held: BEST) into the model,
    or say in one line why there are none."""
    ck_dir = run / CHECKPOINT_DIR
    if best is not None:
        setup.model.load_state_dict(best)
        setup.model.to(setup.device).eval()
        return
    if not all((ck_dir / name).is_file() for name in setup.kind.files.required):
        history = setup.state["history"]
        if history and all(r.get("codes_everything") for r in history):
            raise DataFormatError(f"{run}: all {len(history):,} epochs finished, but after each one the model marked "
                                  "every code on every dev note at its tuned threshold, and such a model is never "
                                  "saved; train longer (--epochs), lower --lr, or check that the dev labels vary.")
        raise DataFormatError(f"{run}: training ended without a checkpoint (no epoch finished); check the data and "
                              "options.")
    setup.kind.load_weights(ck_dir, setup.model)  # the best-on-dev state, not the last one
    setup.model.to(setup.device).eval()
