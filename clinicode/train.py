"""Training: a prepared dataset -> a model kind (LEAM, tfidf-lr, ...) -> RUN/checkpoint. The loop and its decisions,
nothing else: what is model-specific it asks the kind (`clinicode.models.ModelKind`), and it imports no model.
Selection on dev, the threshold, the weight average and resume: `_Trainer`; the whole story: docs/training.md."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from clinicode.batching import bucketed_batches, pad_batch
from clinicode.checkpoint import CHECKPOINT_DIR, Checkpoint, save_checkpoint
from clinicode.codes.systems import spelling
from clinicode.config import TrainConfig
from clinicode.constants import EVIDENCE, HISTORY_FILE, RETRAIN_EPOCHS, RUN_DATA_DIR
from clinicode.errors import ConfigError, DataFormatError
from clinicode.file_locks import releases_claims
from clinicode.files import write_bytes_atomic
from clinicode.metrics import HEADLINE, all_metrics, tune_threshold
from clinicode.models import train_kind
from clinicode.predict import Predictor
from clinicode.runtime import barrier, release_freed_memory, seed_everything, world
from clinicode.train_setup import (
    TrainingSetup,
    check_run_folder,
    finish,
    given_options,
    marks_everything,
    open_run,
    single_label,
    train_whole,
)
from clinicode.train_state import STATE_DIR, make_optimizer, save_state

log = logging.getLogger(__name__)

__all__ = ["train", "retrain", "check_run_folder", "make_optimizer", "STATE_DIR", "RUN_DATA", "RETRAIN_EPOCHS"]


def _metric_view(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m[k] for k in (*HEADLINE, "accuracy") if k in m}


class _Trainer:
    """One run's epoch loop over the state its `TrainingSetup` built (held, not inherited: `self.setup`); `train()`
    below is the public entry.

    Model selection and early stopping use dev micro-F1 at the dev-tuned threshold (accuracy for single-label data);
    dev is scored by the same `Predictor` that `evaluate` and `predict` use, so per-epoch numbers come from the final
    code path. The threshold is tuned on dev (100-point grid) and saved with the checkpoint; test is scored once, at
    the end. With `ema_decay` > 0, dev scoring and the checkpoint use a moving average of the weights
    (`train_state.WeightAverage`). RUN/state (`train_state`) holds the last finished epoch, so `resume=True`
    continues an interrupted run exactly.

    Under torchrun (WORLD_SIZE > 1) each process takes its share of each global batch, and DistributedDataParallel
    averages the gradients. Each process's loss is weighted by its share of the batch, so a batch that does not divide
    evenly still weights every note equally, and each note gets the dropout mask one process would draw for it
    (`train_setup.ShareDropout`): the updates are one process's, up to float rounding. Every rank scores dev itself
    (identical weights, so identical early-stopping decisions); only rank 0 writes.
    """

    def __init__(self, setup: TrainingSetup, *, progress: bool,
                 on_epoch: Callable[[dict[str, Any]], None] | None) -> None:
        self.setup, self.progress, self.on_epoch = setup, progress, on_epoch

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
            t = tune_threshold(setup.y_dev, scores) if setup.multilabel else 0.0
            m = all_metrics(setup.y_dev, scores, threshold=t, single_label=not setup.multilabel)
            score = m["f1_micro"] if setup.multilabel else m.get("accuracy", m["f1_micro"])
            usable = not (setup.multilabel and marks_everything(scores, t))  # never save a model that codes everything
            improved = usable and score > setup.state["best_score"]
            setup.state["epoch"] = epoch
            if improved:
                setup.state.update(best_score=score, best_epoch=epoch, bad_epochs=0)
                if setup.rank == 0:
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


def _say(report: Callable[[str], None] | None, line: str) -> None:
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


@releases_claims
def train(
    *,
    out_dir: Path,
    config: TrainConfig,
    data_dir: Path,
    model_options: Any = None,
    descriptions_path: Path | None = None,
    resume: bool = False,
    progress: bool = True,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    report: Callable[[str], None] | None = None,
    warm_start: Checkpoint | None = None,
    manifest_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train the model kind `config.model` names (LEAM by default) on a prepared dataset and write RUN/checkpoint.

    Args:
        out_dir: the run folder (RUN): checkpoint/, state/, history.jsonl, scores_test.npz, run.json.
        config: training options.
        data_dir: a prepared dataset folder (or any coded-notes folder); RUN/data may be the run's own.
        model_options: the kind's options (`ModelKind.options_type`; LEAM's `ModelOptions`), or a dict of some of
            them (the rest default); a kind that takes none (tfidf-lr) refuses any with one line.
        descriptions_path: optional code<TAB>description file filling labels without a description.
        resume: continue from RUN/state after an interruption.
        on_epoch: called with each epoch's history row.
        report: called with status lines for the user (the memory plan).
        warm_start: a checkpoint of the same label set to start from (its weights and tokenizer; `retrain`).
        manifest_extra: fields added to the checkpoint's manifest (`retrain`'s `retrained_from`).
    Returns:
        {"threshold", "dev", "test", "run"} with the final metrics.
    """
    run, ds, extra, options = open_run(Path(out_dir), config, Path(data_dir), model_options,
                                       descriptions_path=descriptions_path, resume=resume)
    extra.update(manifest_extra or {})
    seed_everything(config.seed)
    if not train_kind(config.model).trained_by_loop:
        return train_whole(run, ds, config, extra, options)  # a kind fitted whole (tfidf-lr): no epoch loop

    kind = train_kind(config.model)
    before = _before_loop(kind, ds, config, report, warm_start)   # every training note (tfidf-lr: seconds)
    every, ds = ds, _loop_data(ds) if warm_start is not None else ds
    # a kind may cap its loop's epochs (the fused model's LEAM part: --fused-epochs); the checkpoint keeps the options
    # as given
    loop_config = (dataclasses.replace(config, epochs=kind.loop_epochs(config, len(ds.labels)))
                   if hasattr(kind, "loop_epochs") else config)
    setup = TrainingSetup(ds, run, loop_config, options, given_options(model_options), resume=resume, report=report,
                          manifest_extra={**extra, "world_size": world()[1]}, warm_start=warm_start)
    if ds is not every:   # the bands and the checkpoint count every training note, not only those the epochs saw
        setup.train_counts = every.labels.counts(every.split("train")["labels"])
    trainer = _Trainer(setup, progress=progress, on_epoch=on_epoch)
    if setup.world == 1 and int(setup.state["epoch"]) < loop_config.epochs:
        _say(report, estimate(setup))
    trainer.fit()
    _note_if_still_improving(trainer, setup, config, loop_config, report)
    if setup.world > 1:
        import torch.distributed as dist

        barrier()
        if setup.rank != 0:  # rank 0 alone scores dev and test and writes the final checkpoint
            dist.destroy_process_group()
            return {"run": str(run), "rank": setup.rank, "best_epoch": setup.state["best_epoch"]}
    setup.release_training()
    _load_best(run, setup)
    result, fusion = _finish(kind, run, ds, config, setup, before, report, every=every)
    if setup.world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    if fusion:
        result["fusion"] = fusion
    return {**result, "run": str(run), "best_epoch": setup.state["best_epoch"], "history": setup.state["history"],
            "stopped": trainer.stopped()}


def _loop_data(ds: Any) -> Any:
    """DS with only the training notes its manifest's `loop_notes` names (`review retrain`'s data: the decided notes
    and the sample a warm start's epochs see), or DS itself when it names none."""
    keep = ds.manifest.get("loop_notes")
    if not keep:
        return ds
    train_df = ds.split("train")
    part = train_df[train_df["id"].astype(str).isin({str(i) for i in keep})].reset_index(drop=True)
    return dataclasses.replace(ds, splits={**ds.splits, "train": part})


def _before_loop(kind: Any, ds: Any, config: TrainConfig, report: Callable[[str], None] | None,
                 warm_start: Checkpoint | None) -> Any:
    """What a kind fits before the epochs (the fused model's tfidf-lr: seconds), or None for a kind without it."""
    if not hasattr(kind, "before_loop"):
        return None
    t0 = time.perf_counter()
    train_df = ds.split("train")
    before = kind.before_loop(train_df["text"].tolist(), ds.labels.multi_hot(train_df["labels"]),
                              single_label=single_label(ds, config), codes=ds.labels.codes,
                              evidence=_evidence(ds, train_df, config), warm_start=warm_start,
                              min_doc_freq=config.min_doc_freq)
    said = getattr(before, "note", "")
    _say(report, f"{kind.name}: the part before the epochs fitted in {time.perf_counter() - t0:.0f} s"
         + (f"; {said}" if said else ""))
    return before


def _evidence(ds: Any, df: Any, config: TrainConfig) -> list | None:
    """Each note of DF's coders' spans, their codes spelled as the labels are; None when DF has no evidence column
    or `--no-mentions` keeps their words out."""
    if EVIDENCE not in df.columns or not config.mentions:
        return None
    spell = spelling(ds.labels.codes, ds.labels.code_system)
    return [[{**m, "code": spell(m.get("code", ""))} if isinstance(m, dict) else m
             for m in (note if isinstance(note, (list, tuple)) else ())]
            for note in df[EVIDENCE].tolist()]


def _refit_on_all(kind: Any, ds: Any, config: TrainConfig, final: Any) -> tuple[Any, np.ndarray]:
    """(FINAL refitted on train and dev by KIND.refit, every code's notes in train and dev): `--fit-on train+dev`."""
    import pandas as pd

    both = pd.concat([ds.split("train"), ds.split("dev")], ignore_index=True)
    one = single_label(ds, config)
    if one:   # a softmax learns from notes of exactly one code: a dev note with none or several teaches it nothing
        both = both[both["labels"].map(len) == 1].reset_index(drop=True)
    y = ds.labels.multi_hot(both["labels"])
    model = kind.refit(final, both["text"].tolist(), y, codes=ds.labels.codes,
                       descriptions=ds.labels.descriptions, evidence=_evidence(ds, both, config),
                       single_label=one, min_doc_freq=config.min_doc_freq)
    return model, y.sum(axis=0)


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


def _load_best(run: Path, setup: TrainingSetup) -> None:
    """Load the best-on-dev weights the loop saved into the model, or say in one line why there are none."""
    ck_dir = run / CHECKPOINT_DIR
    if not all((ck_dir / name).is_file() for name in setup.kind.files):
        history = setup.state["history"]
        if history and all(r.get("codes_everything") for r in history):
            raise DataFormatError(f"{run}: all {len(history):,} epochs finished, but after each one the model marked "
                                  "every code on every dev note at its tuned threshold, and such a model is never "
                                  "saved; train longer (--epochs), lower --lr, or check that the dev labels vary.")
        raise DataFormatError(f"{run}: training ended without a checkpoint (no epoch finished); check the data and "
                              "options.")
    setup.kind.load_weights(ck_dir, setup.model)  # the best-on-dev state, not the last one
    setup.model.to(setup.device).eval()


def _finish(kind: Any, run: Path, ds: Any, config: TrainConfig, setup: TrainingSetup, before: Any,
            report: Callable[[str], None] | None, *, every: Any = None) -> tuple[dict[str, Any], Any]:
    """Tune the threshold on dev, score test and save the final checkpoint: the loop's model, or the kind's model
    made from it (`after_loop`: the fused model, its fusion fitted on dev; with `--fit-on train+dev`, its parts
    without epochs then refitted on EVERY's train, all of it, and dev). Returns (the result, the fusion or None)."""

    def save_final(t: float, md: dict, mt: dict) -> None:
        setup.state["epoch"] = setup.state["best_epoch"]
        setup.save_best(t, md, mt)

    fusion = None
    if hasattr(kind, "after_loop"):  # the kind's model from the loop's (the fused model: its fusion learnt on dev)
        t0 = time.perf_counter()
        dev = ds.split("dev")
        final = kind.after_loop(setup.model, setup.tokenizer, before, dev_texts=dev["text"].tolist(),
                                y_dev=setup.y_dev, train_counts=setup.train_counts,
                                descriptions=setup.labels.descriptions, max_len=config.max_len, device=setup.device,
                                batch_size=config.eval_batch_size, memory_mb=config.memory_mb)
        fusion = getattr(final, "fusion", None)
        if fusion:
            _say(report, f"fusion fitted on dev in {time.perf_counter() - t0:.0f} s: LEAM's share per band "
                         f"{fusion['weights']}, title match {fusion['title_weights']} (bands up to "
                         f"{fusion['edges']} training notes, then more), {fusion['per_code_thresholds']} per-code "
                         f"thresholds, {fusion.get('mentions', 0):,} phrases from the training notes' evidence spans"
                         + (f"; {fusion['codes_outside_train']:,} codes only dev carries joined the label set, "
                            "learnt from dev when the parts refit" if fusion.get("codes_outside_train") else ""))

        counts = setup.train_counts
        refit = None
        if config.fit_on == "train+dev" and hasattr(kind, "refit") and len(ds.split("dev")):
            def refit() -> Checkpoint:
                nonlocal final, counts
                t1 = time.perf_counter()
                final, counts = _refit_on_all(kind, every if every is not None else ds, config, final)
                _say(report, f"--fit-on train+dev: tfidf-lr, the titles and the mentions refitted on train and dev "
                             f"in {time.perf_counter() - t1:.0f} s, each code keeping the fusion dev chose; test "
                             "scores this model")
                return Checkpoint(run / CHECKPOINT_DIR, kind.name, final, setup.labels, 0.5, config, {},
                                  setup.tokenizer)

        def save_kind(t: float, md: dict, mt: dict) -> None:
            save_checkpoint(run / CHECKPOINT_DIR, kind=kind.name, model=final, labels=setup.labels, threshold=t,
                            train_config=config, tokenizer=setup.tokenizer, metrics_dev=md, metrics_test=mt,
                            extra={**setup.manifest_extra, "epoch": setup.state["best_epoch"], "seed": config.seed},
                            train_counts=counts)

        ck = Checkpoint(run / CHECKPOINT_DIR, kind.name, final, setup.labels, 0.5, config, {}, setup.tokenizer)
        result = finish(run, ds, ck, save_kind, train_counts=setup.train_counts, refit=refit)
    else:
        result = finish(run, ds, setup.checkpoint(0.5), save_final, train_counts=setup.train_counts,
                        dev_ids=setup.dev_ids)
    return result, fusion


RUN_DATA = RUN_DATA_DIR  # where `review retrain` writes the new run's own data (RUN/data)
WARM_PATIENCE = 2        # a warm start stops after this many epochs in a row without a dev gain (no step floor)
FRESH_GROWTH = 1.25      # a loop kind starts fresh once the training notes outgrow its vocabulary's notes by this


def retrain_start(checkpoint: Checkpoint, n_train: int) -> tuple[str, int]:
    """("warm" or "fresh", the training notes CHECKPOINT's vocabulary was built from) for a retrain on N_TRAIN
    training notes. A warm start keeps the checkpoint's tokenizer: words first met in the new notes are unknown to it,
    so once the notes outgrow those the vocabulary came from by more than FRESH_GROWTH, the retrain starts fresh, as
    `train` would, and a chain of retrains never drifts far from a fresh train on the same notes."""
    built_on = checkpoint.manifest.get("vocabulary_notes") or (checkpoint.manifest.get("data") or {}).get("n_train")
    built_on = int(built_on or 0)
    return ("warm" if built_on and n_train <= FRESH_GROWTH * built_on else "fresh"), built_on


def retrain(*, checkpoint: Checkpoint, out_dir: Path, data_dir: Path, epochs: int = RETRAIN_EPOCHS, seed: int = 0,
            device: str | None = None, provenance: dict[str, Any] | None = None, start: str = "auto",
            progress: bool = False) -> dict[str, Any]:
    """A new run from CHECKPOINT and DATA_DIR (`review retrain`: decided notes with the checkpoint's label set, and
    base training notes); the old checkpoint is only read. A kind fitted whole (tfidf-lr) is refitted on DATA_DIR's
    train. A kind trained by the loop (LEAM, the fused model's LEAM part) starts from CHECKPOINT's weights and
    tokenizer and trains until dev stops improving (WARM_PATIENCE epochs, at most EPOCHS), or, when START is "fresh"
    or is "auto" and the notes outgrew the checkpoint's vocabulary (`retrain_start`), trains as `train` does. The
    fused model's parts without epochs (tfidf-lr, titles, mentions) and its fusion refit either way. The new manifest
    records `retrained_from` (PROVENANCE: the old checkpoint's path and hash, the review database, how many decided
    notes) and, after a warm start, `vocabulary_notes`.

    Returns:
        `train`'s result with "seconds" (the whole retrain's wall time), "start" ("warm", "fresh" or "refit"),
        "notes" (training notes) and "vocabulary_notes" (those the checkpoint's vocabulary was built from).
    """
    from clinicode.data.prepared import load_dataset

    if start not in ("auto", "warm", "fresh"):
        raise ConfigError(f"a retrain's start must be auto, warm or fresh, got {start!r}.")
    t0 = time.perf_counter()
    cfg = dataclasses.replace(checkpoint.train_config, top_k=None, seed=seed,
                              **({"device": device} if device else {}))
    extra: dict[str, Any] = {"retrained_from": provenance or {"checkpoint": str(checkpoint.path),
                                                              "checkpoint_sha256": checkpoint.manifest_sha256}}
    n_train = len(load_dataset(Path(data_dir)).split("train"))
    how, built_on = retrain_start(checkpoint, n_train)
    how = start if start != "auto" else how
    if not checkpoint.model_kind.trained_by_loop:
        how = "refit"
        result = train(out_dir=out_dir, config=cfg, data_dir=data_dir, progress=progress, manifest_extra=extra)
    elif how == "warm":
        cfg = dataclasses.replace(cfg, epochs=epochs, patience=WARM_PATIENCE, patience_steps=0, lr_patience_steps=0)
        result = train(out_dir=out_dir, config=cfg, data_dir=data_dir, progress=progress, warm_start=checkpoint,
                       manifest_extra={**extra, "vocabulary_notes": built_on or n_train})
    else:
        result = train(out_dir=out_dir, config=cfg, data_dir=data_dir, progress=progress, manifest_extra=extra)
    return {**result, "seconds": time.perf_counter() - t0, "start": how, "notes": n_train,
            "vocabulary_notes": built_on}
