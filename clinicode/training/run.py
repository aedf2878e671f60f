"""A training run (`train`, `retrain`): the run folder checked and claimed (`open_run`), the kind's
`fit(data, options, loop=)` given the notes and the epoch loop, then `finish`. One path for every kind; it names none
and imports no model."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from clinicode.artifacts import holds_training, is_run_data, is_run_folder, make_manifest
from clinicode.checkpoint import Checkpoint
from clinicode.codes.icd9 import load_descriptions_tsv
from clinicode.codes.systems import LOCAL, infer_code_system, spelling
from clinicode.codes.terminology import read_terminology, terminology_titles
from clinicode.config import TrainConfig, config_to_dict
from clinicode.constants import EVIDENCE, ID, RETRAIN_EPOCHS, RUN_DATA_DIR, RUN_FILE
from clinicode.data.labels import LabelSet, PartlyCoded
from clinicode.data.prepared import PreparedDataset, dataset_fingerprint, load_dataset
from clinicode.errors import ConfigError, DataFormatError
from clinicode.file_locks import claim_folder, releases_claims
from clinicode.files import check_output, write_json_atomic
from clinicode.models import RunNeeds, kind_options, option_names, run_needs, train_kind
from clinicode.models.fitting import TrainingData
from clinicode.runtime import pick_device, seed_everything, world
from clinicode.training.finish import finish_fitted, single_label
from clinicode.training.loop import EpochLoop, OtherRank, say
from clinicode.training.state import STATE_DIR, check_resume

log = logging.getLogger("clinicode.train")  # one logger for a run's messages, set-up and loop alike

__all__ = ["FRESH_GROWTH", "RUN_DATA", "WARM_PATIENCE", "OpenRun", "check_run_folder", "given_options", "open_run",
           "retrain", "retrain_start", "train"]


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


class OpenRun(NamedTuple):
    """A run `open_run` checked and claimed, and what its kind's `fit` is prepared from."""

    run: Path                    # the run folder, resolved
    ds: PreparedDataset          # the dataset, descriptions filled
    extra: dict[str, Any]        # the manifest's extra fields ({"data": ...})
    options: Any                 # the kind's options (an `options_type`), or None for a kind that takes none
    needs: RunNeeds              # what the options ask of the run (`run_needs`), asked once
    terminology: dict[str, str]  # --terminology's code -> title, read once, in the label set's spelling ({}: none)


def open_run(out_dir: Path, config: TrainConfig, data_dir: Path, model_options: Any, *,
             descriptions_path: Path | None, resume: bool) -> OpenRun:
    """Check RUN, the data and the options, then claim RUN and write run.json; bad input leaves no run folder.

    `model_options`: the kind's options (`ModelKind.options_type`), or a dict of some of them (the rest default),
    saved in run.json as given; a kind that takes none refuses any.

    Raises:
        ConfigError: an unknown --model (before anything is written), or bad options.
    """
    kind = train_kind(config.model)
    options = kind_options(kind, model_options)  # unknown or out-of-range options fail before anything is written
    needs = run_needs(kind, options)
    vectors = config.embeddings if config.embeddings not in ("w2v", "random") else None
    run = check_run_folder(Path(out_dir), resume=resume,
                           inputs={"--data": data_dir, "--descriptions": descriptions_path, "--embeddings": vectors,
                                   "--terminology": needs.terminology if needs.terminology != "auto" else None})
    # a kind that refits on train and dev (the fused model's --fit-on train+dev) learns the codes only dev carries too
    grows = needs.dev_codes and config.top_k is None
    ds = in_id_order(load_dataset(Path(data_dir), top_k=config.top_k,
                                  label_splits=("train", "dev") if grows else ("train",)))
    ds.labels = with_descriptions(ds.labels, descriptions_path)
    table: dict[str, str] = {}
    if needs.terminology is not None:   # a missing file or another code system's codes fail before anything is written
        table = read_terminology(needs.terminology, ds.labels.codes, ds.labels.code_system or LOCAL)
        _leave_to_terminology(ds, table)
    n_train, n_dev = len(ds.split("train")), len(ds.split("dev"))
    if n_train == 0 or n_dev == 0:
        raise DataFormatError(f"{data_dir}: the train and dev splits must both hold notes (got {n_train} and "
                              f"{n_dev}).")
    for split, why in (("train", "there is nothing to learn"), ("dev", "the threshold cannot be tuned")):
        if not any(len(row) for row in ds.split(split)["labels"]):
            raise DataFormatError(f"{data_dir}: no {split} note has a code of the label set ({len(ds.labels)} codes), "
                                  f"so {why}; check the data's labels (and labels.json).")
    looped = kind.loop_model
    if looped is not None:  # a batch that cannot fit the memory budget fails now, not after the vocabulary
        looped.memory_plan(looped.model_config(options, vocab_size=3, n_labels=len(ds.labels), multilabel=True),
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
    return OpenRun(run, ds, extra, options, needs, table)


def in_id_order(ds: PreparedDataset) -> PreparedDataset:
    """DS with its train and dev notes sorted by id: a model is fitted from the notes, not from the order a file
    lists them in, so the same notes in any order (`review retrain`'s data lists the decided ones first) train the
    same checkpoint with the same seed. Test keeps the file's order, which `scores_test.npz` follows."""
    for name in ("train", "dev"):   # both required, their ids unique strings (`load_dataset`)
        ds.splits[name] = ds.splits[name].sort_values(ID, ignore_index=True)
    return ds


def _leave_to_terminology(ds: PreparedDataset, table: dict[str, str]) -> None:
    """Fill DS's codes without a description from the terminology TABLE (its titles are descriptions too), and take
    out of its label set (a labels.json may fix them in: `review retrain`'s data keeps a checkpoint's codes) the
    terminology's codes that no train or dev note carries: they rejoin after the loop, scored from their titles
    (`train --terminology`), and never cost a LEAM or tfidf-lr row (70,000 ICD-10-CM codes would)."""
    labels = ds.labels
    ds.labels = LabelSet(labels.codes, tuple(d or table.get(c, "") for c, d in zip(labels.codes, labels.descriptions)),
                         labels.code_system)
    carried = {c for split in ("train", "dev") if split in ds.splits for row in ds.split(split)["labels"] for c in row}
    out = {c for c in ds.labels.codes if c in table and c not in carried}
    if not out:
        return
    keep = [i for i, c in enumerate(ds.labels.codes) if c not in out]
    ds.labels = LabelSet(tuple(ds.labels.codes[i] for i in keep), tuple(ds.labels.descriptions[i] for i in keep),
                         ds.labels.code_system)
    for name, df in list(ds.splits.items()):
        ds.splits[name] = df.assign(labels=[[c for c in row if c not in out] for row in df["labels"]])
    log.info("%d codes of labels.json that no train or dev note carries are left to --terminology", len(out))


def given_options(model_options: Any) -> dict[str, Any]:
    """The model options as the user gave them (run.json, --resume's comparison): a dict of some, or all of them."""
    if model_options is not None and not isinstance(model_options, dict):  # the kind's options type (a dataclass)
        return config_to_dict(model_options)
    return dict(model_options or {})


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
    resumable: bool = True,
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
        resumable: write RUN/state after each epoch and the best epoch's checkpoint when it comes, so that `resume`
            continues the run and a kill leaves its best epoch; False (`retrain`, which cannot be resumed and removes
            a run it did not finish) keeps the best weights in memory and writes only the final checkpoint.
    Returns:
        {"threshold", "dev", "test", "run"} with the final metrics.
    """
    run, ds, extra, options, needs, terms = open_run(Path(out_dir), config, Path(data_dir), model_options,
                                                     descriptions_path=descriptions_path, resume=resume)
    extra.update(manifest_extra or {})
    seed_everything(config.seed)
    kind = train_kind(config.model)
    if world()[1] > 1 and kind.loop_model is None:
        raise ConfigError(f"--model {kind.name} trains in one process; run it without torchrun.")
    given = given_options(model_options)
    if resume and kind.loop_model is not None:   # other options or data are refused before a part is fitted
        check_resume(run / STATE_DIR, run=run, train_config=config, model_options=given, data=extra["data"],
                     config_type=kind.loop_model.config_type)
    loop = EpochLoop(run, ds, config, extra, given=given, resume=resume, progress=progress,
                      on_epoch=on_epoch, report=report, warm_start=warm_start, resumable=resumable)
    try:
        fitted = kind.fit(_training_data(ds, config, needs, terms, warm_start, report), options, loop=loop)
    except OtherRank as other:   # under torchrun rank 0 alone finishes: scores dev and test, writes the checkpoint
        return other.result
    result = finish_fitted(kind, run, ds, config, fitted, extra)
    if world()[1] > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return {**result, **fitted.result, "run": str(run)}


def _training_data(ds: Any, config: TrainConfig, needs: RunNeeds, terms: dict[str, str],
                   warm_start: Checkpoint | None, report: Callable[[str], None] | None) -> TrainingData:
    """What a kind's `fit` is given: every training note (a warm start's loop may see fewer: `_loop_data`), dev, and
    what its options need (`run_needs`): the coders' spans, train and dev together (the fused model's `--fit-on
    train+dev`) and the codes of the terminology TERMS (as `open_run` read it) that the label set lacks, which the
    fused model scores from their titles alone."""
    train_df, dev_df = ds.split("train"), ds.split("dev")
    more = terminology_titles(terms, ds.labels.codes)
    return TrainingData(texts=train_df["text"].tolist(), y=ds.labels.multi_hot(train_df["labels"]), labels=ds.labels,
                        dev_texts=dev_df["text"].tolist(), y_dev=ds.labels.multi_hot(dev_df["labels"]),
                        train_counts=ds.labels.counts(train_df["labels"]),
                        evidence=_evidence(ds, train_df, needs.evidence),
                        single_label=single_label(ds, config), config=config, warm_start=warm_start,
                        train_and_dev=(lambda: _train_and_dev(ds, config, needs.evidence)) if needs.dev_codes else None,
                        terminology=more, y_dev_terminology=(LabelSet(tuple(more), tuple(more.values()),
                                                                      ds.labels.code_system).multi_hot(dev_df["labels"])
                                                             if more else None),
                        say=lambda line: say(report, line),
                        partly=PartlyCoded.of(ds.manifest, ds.labels, train_df["id"]))


def _evidence(ds: Any, df: Any, wanted: bool) -> list | None:
    """Each note of DF's coders' spans, their codes spelled as the labels are; None when DF has no evidence column
    or they are not WANTED (`--no-mentions` keeps their words out)."""
    if EVIDENCE not in df.columns or not wanted:
        return None
    spell = spelling(ds.labels.codes, ds.labels.code_system)
    return [[{**m, "code": spell(m.get("code", ""))} if isinstance(m, dict) else m
             for m in (note if isinstance(note, (list, tuple)) else ())]
            for note in df[EVIDENCE].tolist()]


def _train_and_dev(ds: Any, config: TrainConfig, evidence: bool) -> tuple[list[str], np.ndarray, list | None]:
    """Every labelled note outside test as (texts, [N, K] y, evidence or None): `--fit-on train+dev`'s refit."""
    import pandas as pd

    both = pd.concat([ds.split("train"), ds.split("dev")], ignore_index=True)
    if single_label(ds, config):   # a softmax learns from notes of exactly one code: a dev note with none or several
        both = both[both["labels"].map(len) == 1].reset_index(drop=True)   # teaches it nothing
    return both["text"].tolist(), ds.labels.multi_hot(both["labels"]), _evidence(ds, both, evidence)


RUN_DATA = RUN_DATA_DIR  # where `review retrain` writes the new run's own data (RUN/data)
WARM_PATIENCE = 2        # a warm start stops after this many epochs in a row without a dev gain (no step floor)
FRESH_GROWTH = 1.5       # a loop kind starts fresh once the training notes outgrow its vocabulary's notes by this
FRESH_SCHEDULE = "fresh_schedule"   # a warm start's manifest: the schedule a fresh start down the chain trains on
_SCHEDULE = ("epochs", "patience", "patience_steps", "lr_patience_steps")


def _retrain_options(checkpoint: Checkpoint) -> dict[str, Any]:
    """The model options a retrain of CHECKPOINT trains with: every option its kind takes, as the checkpoint's card
    shows them back (its sizes, `--paper`'s switches, the fused model's --fit-on, --mentions, --terminology and
    --fused-epochs). A fresh start trains as `train` did for CHECKPOINT, never with the defaults; a warm start takes
    its model's configuration from the checkpoint's weights either way."""
    saved = checkpoint.model_kind.card(checkpoint.model).get("model_config") or {}
    return {k: saved[k] for k in option_names(checkpoint.model_kind) if k in saved}


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
            progress: bool = False, n_train: int | None = None) -> dict[str, Any]:
    """A new run from CHECKPOINT and DATA_DIR (`review retrain`: decided notes with the checkpoint's label set, and
    base training notes); the old checkpoint is only read. A kind fitted whole (tfidf-lr) is refitted on DATA_DIR's
    train. A kind trained by the loop (LEAM, the fused model's LEAM part) starts from CHECKPOINT's weights and
    tokenizer and trains until dev stops improving (WARM_PATIENCE epochs, at most EPOCHS), or, when START is "fresh"
    or is "auto" and the notes outgrew the checkpoint's vocabulary (`retrain_start`), trains as `train` does. The
    fused model's parts without epochs (tfidf-lr, titles, mentions) and its fusion refit either way. The new manifest
    records `retrained_from` (PROVENANCE: the old checkpoint's path and hash, the review database, how many decided
    notes) and, after a warm start, `vocabulary_notes` and `fresh_schedule` (the epochs and patience of the chain's
    last fresh train, which a fresh start down the chain trains with, not the warm start's short ones). N_TRAIN:
    DATA_DIR's training notes when the caller wrote them (`review.export.retrain_data` counts them), else read.

    Returns:
        `train`'s result with "seconds" (the whole retrain's wall time), "start" ("warm", "fresh" or "refit"),
        "notes" (training notes) and "vocabulary_notes" (those the checkpoint's vocabulary was built from).
    """
    from clinicode.data.prepared import read_split_codes

    if start not in ("auto", "warm", "fresh"):
        raise ConfigError(f"a retrain's start must be auto, warm or fresh, got {start!r}.")
    t0 = time.perf_counter()
    cfg = dataclasses.replace(checkpoint.train_config, top_k=None, seed=seed,
                              **({"device": device} if device else {}))
    extra: dict[str, Any] = {"retrained_from": provenance or {"checkpoint": str(checkpoint.path),
                                                              "checkpoint_sha256": checkpoint.manifest_sha256}}
    # the notes `train` will count (top_k is None: it drops none), read without dev, test or the label set
    n_train = len(read_split_codes(Path(data_dir), "train")) if n_train is None else n_train
    how, built_on = retrain_start(checkpoint, n_train)
    how = start if start != "auto" else how
    # a fresh start trains on the schedule of the chain's last fresh train, not on a warm start's short one
    schedule = checkpoint.manifest.get(FRESH_SCHEDULE) or {k: getattr(cfg, k) for k in _SCHEDULE}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in schedule.items() if k in _SCHEDULE})
    options = _retrain_options(checkpoint)
    warm: Checkpoint | None = None
    if checkpoint.model_kind.loop_model is None:
        how = "refit"
    elif how == "warm":
        cfg = dataclasses.replace(cfg, epochs=epochs, patience=WARM_PATIENCE, patience_steps=0, lr_patience_steps=0)
        warm = checkpoint
        extra = {**extra, "vocabulary_notes": built_on or n_train, FRESH_SCHEDULE: schedule}
    # a retrain cannot be resumed (its command removes a run it did not finish): no RUN/state, no checkpoint per epoch
    result = train(out_dir=out_dir, config=cfg, data_dir=data_dir, model_options=options, progress=progress,
                   warm_start=warm, manifest_extra=extra, resumable=False)
    return {**result, "seconds": time.perf_counter() - t0, "start": how, "notes": n_train,
            "vocabulary_notes": built_on}
