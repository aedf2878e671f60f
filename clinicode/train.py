"""Training: a prepared dataset -> LEAM (or tfidf-lr) -> RUN/checkpoint. The loop and its decisions, nothing else.

Model selection and early stopping use dev micro-F1 at the dev-tuned threshold (accuracy for single-label data); dev is
scored by the same `Predictor` that `evaluate` and `predict` use, so per-epoch numbers come from the final code path.
The threshold is tuned on dev (100-point grid) and saved with the checkpoint; test is scored once, at the end. With
`ema_decay` > 0, dev scoring and the checkpoint use a moving average of the weights (`train_state.WeightAverage`).
RUN/state (`train_state`) holds the last finished epoch, so `resume=True` continues an interrupted run exactly.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors.torch import load_file

from clinicode.artifacts import write_bytes_atomic
from clinicode.batching import bucketed_batches, pad_batch
from clinicode.checkpoint import CHECKPOINT_DIR
from clinicode.config import ModelOptions, TrainConfig
from clinicode.constants import HISTORY_FILE, WEIGHTS_FILE
from clinicode.data.prepared import PreparedDataset
from clinicode.errors import DataFormatError
from clinicode.metrics import HEADLINE, all_metrics, tune_threshold
from clinicode.predict import Predictor
from clinicode.runtime import barrier, release_freed_memory, seed_everything, world
from clinicode.safe_io import releases_claims
from clinicode.train_setup import (
    TrainingSetup,
    check_run_folder,
    finish,
    given_options,
    marks_everything,
    open_run,
    train_tfidf_lr,
)
from clinicode.train_state import STATE_DIR, make_optimizer, save_state

log = logging.getLogger(__name__)

__all__ = ["train", "check_run_folder", "make_optimizer", "STATE_DIR"]


def _metric_view(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in (*HEADLINE, "accuracy") if k in m}


class _Trainer(TrainingSetup):
    """One LEAM run's loop over the state `TrainingSetup` builds; `train()` below is the public entry.

    Under torchrun (WORLD_SIZE > 1) each process takes its share of each global batch, and DistributedDataParallel
    averages the gradients. Each process's loss is weighted by its share of the batch, so a batch that does not divide
    evenly still weights every note equally, and each note gets the dropout mask one process would draw for it
    (`train_setup.ShareDropout`): the updates are one process's, up to float rounding. Every rank scores dev itself
    (identical weights, so identical early-stopping decisions); only rank 0 writes.
    """

    def __init__(self, ds: PreparedDataset, run: Path, cfg: TrainConfig, options: ModelOptions,
                 as_given: dict[str, Any], *, resume: bool, progress: bool,
                 on_epoch: Callable[[dict[str, Any]], None] | None, report: Callable[[str], None] | None,
                 manifest_extra: dict[str, Any]) -> None:
        self.progress, self.on_epoch = progress, on_epoch
        super().__init__(ds, run, cfg, options, as_given, resume=resume, report=report,
                         manifest_extra=manifest_extra)

    def train_epoch(self, epoch: int) -> float:
        from tqdm.auto import tqdm

        self.model.train()
        rng = np.random.default_rng([self.cfg.seed, epoch])
        # dropout repeats after --resume; every rank draws the global batch's masks from the same seed (ShareDropout)
        torch.manual_seed(self.cfg.seed * 1000 + epoch)
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
            y = self.y_train[batch].float()
            if self.device.type == "cuda":  # page-locked host memory lets the copies overlap compute
                ids, mask, y = ids.pin_memory(), mask.pin_memory(), y.pin_memory()
            ids = ids.to(self.device, non_blocking=True)
            mask = mask.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
            with torch.autocast("cuda", enabled=self.amp):  # under torchrun: rows rank::world of the global batch
                loss, task = (self.objective(ids, mask, y, share=(slice(self.rank, None, self.world), global_size))
                              if self.world > 1 else self.objective(ids, mask, y))
            # 1 in one process; DDP's mean over ranks then weights notes equally
            share = len(batch) * self.world / global_size
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

    def fit(self) -> None:
        cfg = self.cfg
        start = int(self.state["epoch"]) + 1
        # (patience, lr_patience) in epochs for this training set: one epoch is one batch per batch_size notes
        self.patience = cfg.patience_epochs(-(-len(self.train_ids) // cfg.batch_size))
        patience, lr_patience = self.patience
        if (patience, lr_patience) != (cfg.patience, cfg.lr_patience):
            log.info("patience %d and lr patience %d epochs (at least %d and %d steps of this set's epochs)",
                     patience, lr_patience, cfg.patience_steps, cfg.lr_patience_steps)
        for epoch in range(start, cfg.epochs + 1):
            if self.state["bad_epochs"] > patience:
                break
            t0 = time.perf_counter()
            loss = self.train_epoch(epoch)
            release_freed_memory()  # the epoch's step buffers, before dev scoring's
            if self.average is not None:
                self.average.swap()  # dev scoring and the best checkpoint use the averaged weights
            scores = self.score_dev()
            t = tune_threshold(self.y_dev, scores) if self.multilabel else 0.0
            m = all_metrics(self.y_dev, scores, threshold=t, single_label=not self.multilabel)
            score = m["f1_micro"] if self.multilabel else m.get("accuracy", m["f1_micro"])
            usable = not (self.multilabel and marks_everything(scores, t))  # never save a model that codes everything
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
            if not improved and cfg.lr_schedule == "plateau" and self.state["bad_epochs"] % lr_patience == 0:
                for group in self.opt.param_groups:  # saved with the optimiser, so --resume continues at this rate
                    group["lr"] *= cfg.lr_decay
            row = {"epoch": epoch, "train_loss": round(loss, 6), "lr": lr_now, "dev_threshold": t,
                   "seconds": round(time.perf_counter() - t0, 2),
                   "best": improved, **{f"dev_{k}": v for k, v in _metric_view(m).items()},
                   **{k: round(v, 4) for k, v in self.model.window_stats().items()}}
            self.state["history"].append(row)
            if self.rank == 0:
                write_bytes_atomic(self.run / HISTORY_FILE,
                                   "".join(json.dumps(r) + "\n" for r in self.state["history"]).encode())
                save_state(self.state_dir, model=self.model, opt=self.opt, average=self.average,
                           tokenizer=self.tokenizer, state=self.state, train_config=cfg,
                           model_config=self.model_config, data=self.manifest_extra["data"])
                if self.on_epoch:
                    self.on_epoch(row)
            barrier()
            if self.state["bad_epochs"] > patience:
                log.info("early stop after epoch %d (best %d)", epoch, self.state["best_epoch"])
                break
        self.manifest_extra["stopped"] = self.stopped()

    def stopped(self) -> str:
        """How training ended: "patience" (dev stopped improving), or "epochs" (the --epochs cap came first)."""
        return "patience" if self.state["bad_epochs"] > self.patience[0] else "epochs"


@releases_claims
def train(
    *,
    out_dir: Path,
    config: TrainConfig,
    data_dir: Path,
    model_options: ModelOptions | dict[str, Any] | None = None,
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
        model_options: the LEAM options (`config.ModelOptions`), or a dict of some of them (the rest default).
        descriptions_path: optional code<TAB>description file filling labels without a description.
        resume: continue from RUN/state after an interruption.
        on_epoch: called with each epoch's history row.
        report: called with status lines for the user (the memory plan).
    Returns:
        {"threshold", "dev", "test", "run"} with the final metrics.
    """
    run, ds, extra, options = open_run(Path(out_dir), config, Path(data_dir), model_options,
                                       descriptions_path=descriptions_path, resume=resume)
    seed_everything(config.seed)
    if options is None:
        return train_tfidf_lr(run, ds, config, extra)

    trainer = _Trainer(ds, run, config, options, given_options(model_options), resume=resume, progress=progress,
                       on_epoch=on_epoch, report=report, manifest_extra={**extra, "world_size": world()[1]})
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
    trainer.release_training()
    ck_dir = run / CHECKPOINT_DIR
    if not (ck_dir / WEIGHTS_FILE).is_file():
        raise DataFormatError(f"{run}: training ended without a checkpoint (no epoch finished); check the data and "
                              "options.")
    trainer.model.load_state_dict(load_file(str(ck_dir / WEIGHTS_FILE)))  # the best-on-dev state, not the last one
    trainer.model.to(trainer.device).eval()

    def save_final(t: float, md: dict, mt: dict) -> None:
        trainer.state["epoch"] = trainer.state["best_epoch"]
        trainer.save_best(t, md, mt)

    result = finish(run, ds, trainer.checkpoint(0.5), save_final, train_counts=trainer.train_counts,
                    dev_ids=trainer.dev_ids)
    if trainer.world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return {**result, "run": str(run), "best_epoch": trainer.state["best_epoch"], "history": trainer.state["history"],
            "stopped": trainer.stopped()}
