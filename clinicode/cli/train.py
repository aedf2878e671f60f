"""`clinicode train`: its options in four typed groups (data, schedule, model, fit), a prepared dataset or MIMIC
tables in, a run folder with its checkpoint out."""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from clinicode.cli.options import given, opt, option_groups
from clinicode.cli.prepare import LABEL_SET_HELP, print_summary
from clinicode.cli.root import friendly
from clinicode.config import PrepareConfig, TrainConfig, config_to_dict, default_of
from clinicode.errors import ConfigError
from clinicode.files import claim_folder, releases_claims
from clinicode.models import MODEL_KINDS, option_names, parse_model_options, train_kind

# where each default lives: training's, LEAM's options (its flags below) and the fused model's own, asked of the
# registered kinds
_T, _M, _F = TrainConfig, MODEL_KINDS["leam"].options_type, MODEL_KINDS["fused"].options_type


@dataclass(frozen=True, kw_only=True)
class TrainData:
    """The run folder, and where its notes come from: a prepared dataset, or MIMIC tables prepared into RUN/data."""

    out: Annotated[Path, typer.Option(help="Run folder to write (checkpoint/, history.jsonl, ...).")]
    data: Annotated[Optional[Path],
                    typer.Option(help="Prepared dataset (or any folder of "
                                      "{train,dev,test}.{parquet,jsonl,csv}).")] = None
    mimic_dir: Annotated[Optional[Path],
                         typer.Option(help="MIMIC tables: prepare into RUN/data first "
                                           "(as `prepare`), then train.")] = None
    note_dir: Annotated[Optional[Path],
                        typer.Option(help="With a MIMIC-IV --mimic-dir: the folder holding note/.")] = None
    icd_version: Annotated[Optional[int], typer.Option(help="With a MIMIC-IV --mimic-dir: 9 or 10.")] = None
    splits_dir: Annotated[Optional[Path],
                          typer.Option(help="With --mimic-dir: a folder of published split id lists "
                                            "(MIMIC-III: CAML's packaged ones by default).")] = None
    splits_file: Annotated[Optional[Path],
                           typer.Option(help="With --mimic-dir: Edin et al.'s hadm_id,split CSV.")] = None
    label_set: Annotated[Optional[str], typer.Option(help="With --mimic-dir: " + LABEL_SET_HELP)] = None
    min_code_count: Annotated[Optional[int], opt("With --mimic-dir and --label-set full: the code-count cut.",
                                                 default_of(PrepareConfig, "min_code_count"))] = None

    def check(self) -> None:
        """Exactly one source of notes."""
        if (self.data is None) == (self.mimic_dir is None):
            raise ConfigError("give exactly one of --data DIR (a prepared dataset) or --mimic-dir DIR (MIMIC-III "
                              "tables).")

    def prepare_options(self, *, top_k: Optional[int]) -> dict[str, Any]:
        """`prepare_mimic`'s options given with --mimic-dir (the label set is chosen when preparing)."""
        return given(note_dir=self.note_dir, icd_version=self.icd_version, splits_file=self.splits_file,
                     label_set=self.label_set, top_k=top_k, min_code_count=self.min_code_count)


@dataclass(frozen=True, kw_only=True)
class TrainSchedule:
    """Which model kind trains on which codes, and for how long: epochs, early stopping, the learning-rate schedule."""

    model: Annotated[Optional[str], opt(" or ".join(f"{k.name} ({k.summary})" for k in MODEL_KINDS.values()) + ".",
                                        default_of(_T, "model"))] = None
    top_k: Annotated[Optional[int], typer.Option(help="Keep the K most frequent training codes.")] = None
    epochs: Annotated[Optional[int], opt("Maximum epochs (a cap: the schedule and --patience end runs first).",
                                         default_of(_T, "epochs"))] = None
    fused_epochs: Annotated[Optional[int], opt("--model fused on more than 100 codes (300 without mentions): its "
                                               "LEAM part trains at most this many epochs (and at most --epochs).",
                                               default_of(_F, "fused_epochs"))] = None
    mentions: Annotated[Optional[bool],
                        opt("--model fused: learn each code's mentions from the training split's evidence spans, "
                            "when it has them (the checkpoint keeps their words, owner-only; docs/training.md).",
                            default_of(_F, "mentions"), "--mentions/--no-mentions")] = None
    fit_on: Annotated[Optional[str],
                      opt("--model fused: once dev has chosen the fusion and the threshold, refit tfidf-lr, the titles "
                          "and the mentions on 'train+dev' (every labelled note outside test), or keep them as "
                          "fitted on 'train' (docs/training.md).", default_of(_F, "fit_on"))] = None
    terminology: Annotated[Optional[str],
                           typer.Option(metavar="FILE|auto",
                                        help="--model fused: the codes of a code<TAB>title file (or 'auto': the code "
                                             "system's own titles, ICD-10-CM's) that no note carries join the "
                                             "ranking, scored from their titles (docs/training.md).")] = None
    patience: Annotated[Optional[int], opt("Stop when more than this many epochs in a row bring no dev micro-F1 gain.",
                                           default_of(_T, "patience"))] = None
    patience_steps: Annotated[Optional[int],
                              opt("--patience is never shorter than this many optimiser steps (small sets have "
                                  "short epochs); 0 = off.", default_of(_T, "patience_steps"))] = None
    lr_patience_steps: Annotated[Optional[int],
                                 opt("--lr-patience is never shorter than this many optimiser steps; 0 = off.",
                                     default_of(_T, "lr_patience_steps"))] = None
    lr_schedule: Annotated[Optional[str],
                           opt("plateau (multiply lr by --lr-decay after each --lr-patience epochs "
                               "without a dev gain) or constant.", default_of(_T, "lr_schedule"))] = None
    lr_decay: Annotated[Optional[float], opt("plateau schedule: factor applied to the learning rate at each decay.",
                                             default_of(_T, "lr_decay"))] = None
    lr_patience: Annotated[Optional[int],
                           opt("plateau schedule: epochs in a row without a dev gain before each decay.",
                               default_of(_T, "lr_patience"))] = None


@dataclass(frozen=True, kw_only=True)
class ModelFlags:
    """The chosen kind's options: --model-option KEY=VALUE for any kind's, and LEAM's spelt as flags (the leam kind
    and the fused one's LEAM part); a kind without them refuses them."""

    model_option: Annotated[Optional[list[str]],
                            typer.Option("--model-option", metavar="KEY=VALUE",
                                         help="One of the --model kind's options (repeatable), read by its type, e.g. "
                                              "--model-option label_reg_codes=128 (LEAM's: docs/cli.md).")] = None

    embed_dim: Annotated[Optional[int], opt("Word and code vector size P.", default_of(_M, "embed_dim"))] = None
    radius: Annotated[Optional[int],
                      opt("Phrase radius r (the window spans 2r+1 tokens); --window is its old name, still accepted.",
                          default_of(_M, "radius"), "--radius", "--window")] = None
    hidden_dim: Annotated[Optional[int], opt("Hidden units of the MLP head.", default_of(_M, "hidden_dim"))] = None
    dropout: Annotated[Optional[float], opt("Dropout in the MLP head.", default_of(_M, "dropout"))] = None
    label_reg: Annotated[Optional[float], opt("Weight lambda of the label-embedding regulariser.",
                                              default_of(_M, "label_reg_weight"))] = None
    compat: Annotated[Optional[str], opt("cosine (LEAM) or linear (the paper's ablation).",
                                         default_of(_M, "compat"))] = None
    paper: Annotated[bool, typer.Option("--paper",
                                        help="Train exactly the paper's model (Wang et al. 2018's LEAM): no code "
                                             "evidence. The default adds it, which codes better on "
                                             "ICD-coded data (docs/training.md).")] = False
    code_evidence: Annotated[Optional[bool],
                             opt("Each code's score also counts its best phrase match in the note (not in the paper; "
                                 "--no-code-evidence removes it; docs/training.md).", default_of(_M, "code_evidence"),
                                 "--code-evidence/--no-code-evidence")] = None
    window_nonneg: Annotated[Optional[bool],
                             opt("Keep the phrase window's taps W1 >= 0 after each step (not in the paper: a window "
                                 "that turns negative makes each code's best phrase its worst; docs/training.md).",
                                 default_of(_M, "window_nonneg"), "--window-nonneg/--no-window-nonneg")] = None

    def given(self) -> dict[str, Any]:
        """The options given, by LEAMConfig's names."""
        return given(embed_dim=self.embed_dim, radius=self.radius, hidden_dim=self.hidden_dim, dropout=self.dropout,
                     label_reg_weight=self.label_reg, compat=self.compat, code_evidence=self.code_evidence,
                     window_nonneg=self.window_nonneg)


@dataclass(frozen=True, kw_only=True)
class FitOptions:
    """How each step runs: batches, optimiser, loss weights, vocabulary and word vectors, memory, device and seed."""

    batch_size: Annotated[Optional[int], opt("Notes per batch.", default_of(_T, "batch_size"))] = None
    max_len: Annotated[Optional[int], opt("Tokens kept per note.", default_of(_T, "max_len"))] = None
    lr: Annotated[Optional[float], opt("AdamW learning rate.", default_of(_T, "lr"))] = None
    weight_decay: Annotated[Optional[float], opt("AdamW weight decay.", default_of(_T, "weight_decay"))] = None
    optimizer: Annotated[Optional[str], opt("adamw or adam.", default_of(_T, "optimizer"))] = None
    decay_scope: Annotated[Optional[str],
                           opt("Parameters that get weight decay: embeddings (word and code "
                               "vectors), matrices or all.", default_of(_T, "decay_scope"))] = None
    ema_decay: Annotated[Optional[float],
                         opt("Moving average of the weights for dev scoring and the checkpoint; 0 = off.",
                             default_of(_T, "ema_decay"))] = None
    pos_weight: Annotated[Optional[float], opt("Up-weight positives of rare codes: (n_neg/n_pos)**x, 0 = off.",
                                               default_of(_T, "pos_weight"))] = None
    embeddings: Annotated[Optional[str], opt("w2v (train on the train split), random, or a word2vec/GloVe text file.",
                                             default_of(_T, "embeddings"))] = None
    w2v_epochs: Annotated[Optional[int],
                          opt("word2vec passes over the training notes; 0 = automatic (5-30 by corpus size).",
                              default_of(_T, "w2v_epochs"))] = None
    min_doc_freq: Annotated[Optional[int], opt("Vocabulary: words found in at least this many training notes.",
                                               default_of(_T, "min_doc_freq"))] = None
    eval_batch_size: Annotated[Optional[int], opt("Notes per batch when scoring dev and test.",
                                                  default_of(_T, "eval_batch_size"))] = None
    memory_budget: Annotated[Optional[int],
                             opt("MB of scratch memory one batch may use (decides the score "
                                 "blocks; see docs/training.md).", default_of(_T, "memory_mb"))] = None
    descriptions: Annotated[Optional[Path],
                            typer.Option(help="code<TAB>description file for labels without descriptions.")] = None
    device: Annotated[Optional[str], opt("auto (CUDA when present), cpu or cuda.", default_of(_T, "device"))] = None
    seed: Annotated[Optional[int], opt("Random seed (runs repeat exactly on CPU).", default_of(_T, "seed"))] = None


def train_config(source: TrainData, schedule: TrainSchedule, fit: FitOptions, *, paper: bool) -> TrainConfig:
    """The run's TrainConfig from the options given (--paper alone means --model leam); an unknown --model first."""
    model = schedule.model
    if model is not None:
        train_kind(model)  # an unknown --model: one line naming the known kinds, before anything else is read
    if paper and model == "fused":  # the paper's model is a LEAM: the leam kind, not the default's fused one
        raise ConfigError("--paper trains the paper's LEAM (--model leam); leave out --model fused.")
    if paper and model is None:
        model = "leam"
    s, f = schedule, fit
    return TrainConfig(**given(model=model, epochs=s.epochs, batch_size=f.batch_size,
                               lr=f.lr, max_len=f.max_len, embeddings=f.embeddings, weight_decay=f.weight_decay,
                               optimizer=f.optimizer, pos_weight=f.pos_weight, decay_scope=f.decay_scope,
                               ema_decay=f.ema_decay, w2v_epochs=f.w2v_epochs, min_doc_freq=f.min_doc_freq,
                               eval_batch_size=f.eval_batch_size, patience=s.patience, seed=f.seed, device=f.device,
                               patience_steps=s.patience_steps, lr_patience_steps=s.lr_patience_steps,
                               lr_schedule=s.lr_schedule, lr_decay=s.lr_decay, lr_patience=s.lr_patience,
                               memory_mb=f.memory_budget, top_k=None if source.mimic_dir is not None else s.top_k))


# LEAM's options spelt as flags: option name -> flag (`ModelFlags`)
_LEAM_FLAGS = {"embed_dim": "--embed-dim", "radius": "--radius", "hidden_dim": "--hidden-dim", "dropout": "--dropout",
               "label_reg_weight": "--label-reg", "compat": "--compat", "code_evidence": "--code-evidence",
               "window_nonneg": "--window-nonneg"}
# the fused model's own options spelt as flags (`TrainSchedule`)
_FUSED_FLAGS = {"fused_epochs": "--fused-epochs", "mentions": "--mentions", "fit_on": "--fit-on",
                "terminology": "--terminology"}
_FLAGS = {**_LEAM_FLAGS, **_FUSED_FLAGS}


def _fused_given(schedule: TrainSchedule) -> dict[str, Any]:
    """The fused model's own options given as flags, by their names."""
    s = schedule
    return given(fused_epochs=s.fused_epochs, mentions=s.mentions, fit_on=s.fit_on, terminology=s.terminology)


def _whose(flag: str) -> str:
    return "the fused model's" if flag in _FUSED_FLAGS.values() else "LEAM's"


def model_options(kind: str, flags: ModelFlags, schedule: TrainSchedule | None = None) -> dict[str, Any]:
    """The model options `train` gets for `kind`: none for a kind without options (any given refused), else every
    option of its `options_type`, given (as a flag or --model-option) or default, so --resume compares them all with
    the run's; LEAM's paper's model under --paper. The flags are LEAM's (`ModelFlags`) and the fused model's own
    (SCHEDULE's --fused-epochs, --mentions, --fit-on, --terminology).

    Raises:
        ConfigError: one line naming an option the kind does not have, a bad --model-option, or one given twice.
    """
    plugin = train_kind(kind)
    as_flags = {**flags.given(), **(_fused_given(schedule) if schedule is not None else {})}
    flagged = [_FLAGS[k] for k in as_flags] + (["--paper"] if flags.paper else [])
    names = option_names(plugin)
    if plugin.options_type is None and flagged:  # another kind's flags for a kind without options: one line, not saved
        owners = sorted({_whose(f) for f in flagged})
        raise ConfigError(f"--model {kind} takes no model options, got {', '.join(flagged)}; they are "
                          f"{' and '.join(owners)}, leave them out.")
    paper = dict(MODEL_KINDS["leam"].paper_options) if flags.paper else {}
    foreign = [(k, _FLAGS.get(k, "--paper")) for k in (*as_flags, *paper) if k not in names]
    if foreign:
        key, flag = foreign[0]
        if flag in _FUSED_FLAGS.values():
            raise ConfigError(f"--model {kind} has no option {key!r} ({flag} is the fused model's); leave out {flag}, "
                              "or train --model fused.")
        raise ConfigError(f"--model {kind} has no option {key!r} ({flag} is LEAM's); its options: {', '.join(names)}; "
                          "set them with --model-option KEY=VALUE.")
    chosen = parse_model_options(plugin, flags.model_option or [])
    twice = [k for k in chosen if k in as_flags]
    if twice:
        raise ConfigError(f"{_FLAGS[twice[0]]} and --model-option {twice[0]} both set {twice[0]}; give it once.")
    against = [k for k, v in paper.items() if {**as_flags, **chosen}.get(k, v) != v]
    if against:
        flag = _LEAM_FLAGS[against[0]] if against[0] in as_flags else f"--model-option {against[0]}"
        raise ConfigError(f"--paper trains the paper's model, which has no code evidence, one attention a note and a "
                          f"free window; give one of --paper or {flag}.")
    if plugin.options_type is None:
        return {}
    return {**config_to_dict(plugin.options_type()), **paper, **as_flags, **chosen}


def _echo_epoch(row: dict[str, Any]) -> None:
    typer.echo(f"epoch {row['epoch']:>3}  loss {row['train_loss']:.4f}  dev micro-F1 "
               f"{row.get('dev_f1_micro', 0):.4f}  "
               f"macro-AUC {row.get('dev_auc_macro', float('nan')):.4f}  P@5 {row.get('dev_prec_at_5', 0):.4f}  "
               f"{row['seconds']:.1f}s{'  *best' if row['best'] else ''}", err=True)


@friendly
@releases_claims  # the run folder claimed for `train --mimic-dir` is released when the command ends
@option_groups
def train_cli(
    source: TrainData,
    schedule: TrainSchedule,
    model_flags: ModelFlags,
    fit: FitOptions,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted run in --out.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Train the fused model (LEAM, tfidf-lr, title match and mentions; or --model leam, --paper, --model tfidf-lr)
    into a checkpoint."""
    from clinicode.evaluate import format_table
    from clinicode.runtime import keep_freed_memory
    from clinicode.train import train

    source.check()
    keep_freed_memory()  # ~10% faster CPU steps: no page faults on the per-step buffers (see its docstring)
    cfg = train_config(source, schedule, fit, paper=model_flags.paper)
    options = model_options(cfg.model, model_flags, schedule)
    data = source.data
    if source.mimic_dir is not None:  # the label set is chosen when preparing (--label-set, --top-k)
        data = _prepare_into_run(source.out, mimic_dir=source.mimic_dir, splits_dir=source.splits_dir,
                                 resume=resume, device=cfg.device, **source.prepare_options(top_k=schedule.top_k))
    result = train(out_dir=source.out, config=cfg, data_dir=data, model_options=options,
                   descriptions_path=fit.descriptions, resume=resume, progress=progress and sys.stderr.isatty(),
                   on_epoch=_echo_epoch, report=lambda line: typer.echo(line, err=True))
    if result.get("test"):
        typer.echo("test metrics:")
        typer.echo(format_table(result["test"]))
    typer.echo(f"checkpoint: {Path(source.out) / 'checkpoint'}")


def _prepare_into_run(out: Path, *, mimic_dir: Path, splits_dir: Optional[Path], resume: bool, device: str,
                      **prepare: Any) -> Path:
    """`train --mimic-dir`: prepare the tables into RUN/data (rank 0 under torchrun), then train reads that folder."""
    from clinicode.constants import RUN_DATA_DIR
    from clinicode.data.prepare import prepare_mimic
    from clinicode.data.prepared import is_prepared_dataset
    from clinicode.runtime import barrier, init_distributed, pick_device
    from clinicode.train import check_run_folder

    out = check_run_folder(out, resume=resume, inputs={"--mimic-dir": mimic_dir, "--splits-dir": splits_dir,
                                                       "--note-dir": prepare.get("note_dir"),
                                                       "--splits-file": prepare.get("splits_file")})
    data = out / RUN_DATA_DIR
    rank, _ = init_distributed(pick_device(device))
    if rank == 0:
        claim_folder(out, option="--out")  # before preparing: a second run into the same folder stops here
    if rank == 0 and not (resume and is_prepared_dataset(data)):
        print_summary(prepare_mimic(mimic_dir, data, splits_dir=splits_dir, **prepare))
    barrier()  # under torchrun the other ranks wait for rank 0's prepared data
    return data
