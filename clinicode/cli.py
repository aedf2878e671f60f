"""The `clinicode` command line: thin Typer wrappers over library functions (prepare, train, evaluate, compare,
predict).

Every command turns a ClinicodeError into one line on stderr and exit status 1; Typer uses 2 for malformed
command lines; anything unexpected keeps its traceback.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from clinicode import __version__
from clinicode.config import CompareConfig, DemoConfig, PredictConfig, PrepareConfig, TrainConfig, default_of
from clinicode.errors import ClinicodeError, ConfigError, DataFormatError
from clinicode.files import claim_folder, releases_claims
from clinicode.formats import READERS, WRITERS, reader
from clinicode.models import MODEL_KINDS, train_kind
from clinicode.models.leam.options import PAPER_MODEL, LEAMConfig

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Automated ICD coding of clinical notes with LEAM.")


def os_error_message(err: OSError) -> str:
    """One line for an operating-system error (a path that is missing, of the wrong kind, unwritable, a full disk)."""
    where = " -> ".join(str(f) for f in (err.filename, err.filename2) if f is not None)
    what = err.strerror or type(err).__name__
    return (f"{what}{f': {where}' if where else ''} ({type(err).__name__}); check that the path "
            "exists, is the right kind "
            "(file or folder) and can be written, and that the disk has room.")


EXIT_EPIPE = 141  # 128 + SIGPIPE: what a shell shows for a writer whose reader closed the pipe (`yes | head -1`)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush into a closed pipe raises nothing."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # stdout is not a file descriptor (a test runner's buffer): nothing will be flushed into a pipe


def _friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """ClinicodeError and expected OS errors -> one line on stderr and status 1; anything else is a bug and keeps
    its traceback."""
    import inspect

    # only a command that has --resume may advise it (review queue says its own; decide, stats and export need none)
    hint = " (use --resume to continue)" if "resume" in inspect.signature(fn).parameters else ""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ClinicodeError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(1) from None
        except BrokenPipeError:
            _quiet_stdout()  # the reader left (`| head`): no message, and none at exit when Python flushes stdout
            raise typer.Exit(EXIT_EPIPE) from None
        except OSError as err:
            typer.echo(f"error: {os_error_message(err)}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            to_stdout = str(kwargs.get("output", "")) == "-"  # predict to stdout: nothing to continue
            typer.echo(f"interrupted; outputs written so far are intact{'' if to_stdout else hint}", err=True)
            raise typer.Exit(130) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clinicode {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress details to stderr.")] = False,
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


def _print_summary(summary: dict[str, Any]) -> None:
    splits = summary.get("splits", {})
    release = {"mimic3": "MIMIC-III", "mimic4": "MIMIC-IV"}.get(summary.get("release", ""), "")
    if release:
        typer.echo(f"source: {release}, ICD-{summary.get('icd_version')}"
                   + (f"; protocol {summary['protocol']} reproduced" if summary.get("protocol") else ""))
    typer.echo("documents: " + ", ".join(f"{k} {v:,}" for k, v in splits.items()))
    if "n_labels" in summary:
        typer.echo(f"labels: {summary['n_labels']:,} ({summary.get('label_set', '')})")
    for reason, n in (summary.get("dropped") or {}).items():
        typer.echo(f"dropped: {n:,} {reason}")
    missing = {k: v for k, v in (summary.get("missing_from_data") or {}).items() if v}
    if missing:
        typer.echo("split-file ids not found in the data: " + ", ".join(f"{k} {v:,}" for k, v in missing.items()))
    if summary.get("note"):
        typer.echo(f"note: {summary['note']}.")
    undescribed = summary.get("labels_without_description") or []
    if undescribed:
        tables = ("hosp/d_icd_diagnoses and hosp/d_icd_procedures" if summary.get("release") == "mimic4"
                  else "D_ICD_DIAGNOSES/D_ICD_PROCEDURES or ICD9_descriptions.tsv (in --splits-dir)")
        typer.echo(f"warning: {len(undescribed)} of {summary['n_labels']} codes have no description "
                   f"(e.g. {', '.join(undescribed[:3])}); add {tables} to the inputs.", err=True)


def _opt(help: str, default: Any = None, *decls: str, **kw: Any) -> Any:
    """An option that stays None unless given, so the library's default (clinicode/config.py) applies;
    --help shows it."""
    return typer.Option(*decls, help=help, show_default=False if default is None else str(default), **kw)


def _given(**options: Any) -> dict[str, Any]:
    """The options the user gave (not None): the rest fall through to the defaults in clinicode/config.py."""
    return {k: v for k, v in options.items() if v is not None}


_T, _M, _P, _C, _D = TrainConfig, LEAMConfig, PrepareConfig, CompareConfig, DemoConfig  # where each default lives


_LABEL_SET_HELP = ("caml50 (CAML's pinned MIMIC-III list), top50 (the splits folder's "
                   "top50_codes.txt, else the 50 most "
                   "frequent), frequent (--top-k most frequent) or full (every code in >= "
                   "--min-code-count admissions). "
                   "Default: caml50 for MIMIC-III, top50 for MIMIC-IV.")


@app.command("prepare")
@_friendly
def prepare_cli(
    mimic_dir: Annotated[Path,
                         typer.Option(help="MIMIC-III v1.4 tables, or MIMIC-IV v2.2 (the folder "
                                           "holding hosp/); .csv or .csv.gz.")],
    out: Annotated[Path, typer.Option(help="Prepared dataset folder to write (appears atomically).")],
    note_dir: Annotated[Optional[Path],
                        typer.Option(help="MIMIC-IV-Note v2.2 (the folder holding "
                                          "note/); default --mimic-dir.")] = None,
    icd_version: Annotated[Optional[int],
                           typer.Option(help="MIMIC-IV: 9 or 10 (required: its tables hold both).")] = None,
    splits_dir: Annotated[Optional[Path],
                          typer.Option(help="Folder of "
                                            "{train,dev,test}_{50,full}_hadm_ids.csv (CAML, MIMIC-IV-ICD); "
                                            "default for MIMIC-III: CAML's, packaged.")] = None,
    splits_file: Annotated[Optional[Path],
                           typer.Option(help="Edin et al.'s split CSV (hadm_id,split with train/val/test).")] = None,
    label_set: Annotated[Optional[str], typer.Option(help=_LABEL_SET_HELP)] = None,
    top_k: Annotated[Optional[int], _opt("K for --label-set frequent.", default_of(_P, "top_k"))] = None,
    min_code_count: Annotated[Optional[int],
                              _opt("--label-set full: keep codes seen in at least this many admissions with a note.",
                                   default_of(_P, "min_code_count"))] = None,
) -> None:
    """Turn MIMIC-III or MIMIC-IV tables into a prepared dataset (one document per admission)."""
    from clinicode.data.prepare import prepare_mimic

    summary = prepare_mimic(mimic_dir, out, note_dir=note_dir, icd_version=icd_version, splits_dir=splits_dir,
                            splits_file=splits_file, **_given(label_set=label_set, top_k=top_k,
                                                              min_code_count=min_code_count))
    _print_summary(summary)
    typer.echo(f"wrote {out}")


@app.command("demo-data")
@_friendly
def demo_data_cli(
    out: Annotated[Path, typer.Option(help="Folder to write the synthetic MIMIC-shaped tables into.")],
    format: Annotated[str,
                      typer.Option(help="mimic3 (NOTEEVENTS, DIAGNOSES_ICD, ...) or "
                                        "mimic4 (hosp/ and note/).")] = "mimic3",
    n_admissions: Annotated[Optional[int], _opt("Admissions to invent (with --hadm-ids-from: beyond the listed ones).",
                                                default_of(_D, "n_admissions"))] = None,
    n_other_notes: Annotated[Optional[int],
                             typer.Option(help="mimic3: extra non-discharge notes (to "
                                               "reach a full-size NOTEEVENTS).")] = None,
    seed: Annotated[Optional[int], _opt("Random seed.", default_of(_D, "seed"))] = None,
    hadm_ids_from: Annotated[Optional[list[Path]],
                             typer.Option(help="Give every id of these split files (mimic3: a folder of CAML's "
                                               "*_50_hadm_ids.csv; mimic4: published split files or folders, "
                                               "repeatable) a note and a label-set code, so preparing with "
                                               "them reproduces their counts.")] = None,
    discharge_chars: Annotated[Optional[int],
                               typer.Option(help="Pad discharge notes to this mean length in characters (real size: "
                                                 "10,000 mimic3, 10,500 mimic4).")] = None,
    n_tail_codes: Annotated[Optional[int],
                            typer.Option(help="mimic4: rarer codes per ICD version beyond the "
                                              "top 50 (for full code sets).")] = None,
    gzip: Annotated[bool, typer.Option(help="Write .csv.gz instead of .csv.")] = False,
) -> None:
    """Write a SYNTHETIC MIMIC-III- or MIMIC-IV-shaped folder (no real patient data) for demos and tests."""
    opts = _given(n_admissions=n_admissions, seed=seed, discharge_chars=discharge_chars)
    if format == "mimic3":
        from clinicode.synthetic.mimic3 import write_demo_mimic

        if n_tail_codes is not None:
            raise ConfigError("--n-tail-codes is for --format mimic4.")
        if hadm_ids_from and len(hadm_ids_from) > 1:
            raise ConfigError("--format mimic3 takes one --hadm-ids-from folder (CAML's *_50_hadm_ids.csv).")
        info = write_demo_mimic(out, n_other_notes=n_other_notes,
                                hadm_ids_from=hadm_ids_from[0] if hadm_ids_from else None,
                                gzip=gzip, **opts)
    elif format == "mimic4":
        from clinicode.synthetic.mimic4 import write_demo_mimic4

        if n_other_notes is not None:
            raise ConfigError("--n-other-notes is for --format mimic3.")
        info = write_demo_mimic4(out, hadm_ids_from=hadm_ids_from or (), gzip=gzip,
                                 **_given(n_tail_codes=n_tail_codes), **opts)
    else:
        raise ConfigError(f"--format must be mimic3 or mimic4, got {format!r}.")
    typer.echo(f"wrote synthetic {'MIMIC-III' if format == 'mimic3' else 'MIMIC-IV'}-shaped tables to {out}: "
               + ", ".join(f"{k} {v:,}" for k, v in info.items() if isinstance(v, int) and not isinstance(v, bool)))


@app.command("train")
@_friendly
@releases_claims  # the run folder claimed for `train --mimic-dir` is released when the command ends
def train_cli(
    out: Annotated[Path, typer.Option(help="Run folder to write (checkpoint/, history.jsonl, ...).")],
    data: Annotated[Optional[Path],
                    typer.Option(help="Prepared dataset (or any folder of "
                                      "{train,dev,test}.{parquet,jsonl,csv}).")] = None,
    mimic_dir: Annotated[Optional[Path],
                         typer.Option(help="MIMIC tables: prepare into RUN/data first "
                                           "(as `prepare`), then train.")] = None,
    note_dir: Annotated[Optional[Path],
                        typer.Option(help="With a MIMIC-IV --mimic-dir: the folder holding note/.")] = None,
    icd_version: Annotated[Optional[int], typer.Option(help="With a MIMIC-IV --mimic-dir: 9 or 10.")] = None,
    splits_dir: Annotated[Optional[Path],
                          typer.Option(help="With --mimic-dir: a folder of published split id lists "
                                            "(MIMIC-III: CAML's packaged ones by default).")] = None,
    splits_file: Annotated[Optional[Path],
                           typer.Option(help="With --mimic-dir: Edin et al.'s hadm_id,split CSV.")] = None,
    label_set: Annotated[Optional[str], typer.Option(help="With --mimic-dir: " + _LABEL_SET_HELP)] = None,
    min_code_count: Annotated[Optional[int], _opt("With --mimic-dir and --label-set full: the code-count cut.",
                                                  default_of(_P, "min_code_count"))] = None,
    model: Annotated[Optional[str], _opt(" or ".join(f"{k.name} ({k.summary})" for k in MODEL_KINDS.values()) + ".",
                                         default_of(_T, "model"))] = None,
    top_k: Annotated[Optional[int], typer.Option(help="Keep the K most frequent training codes.")] = None,
    epochs: Annotated[Optional[int], _opt("Maximum epochs (a cap: the schedule and --patience end runs first).",
                                          default_of(_T, "epochs"))] = None,
    fused_epochs: Annotated[Optional[int], _opt("--model fused on more than 100 codes: its LEAM part trains at "
                                                "most this many epochs (and at most --epochs).",
                                                default_of(_T, "fused_epochs"))] = None,
    patience: Annotated[Optional[int], _opt("Stop when more than this many epochs in a row bring no dev micro-F1 gain.",
                                            default_of(_T, "patience"))] = None,
    patience_steps: Annotated[Optional[int],
                              _opt("--patience is never shorter than this many optimiser steps (small sets have "
                                   "short epochs); 0 = off.", default_of(_T, "patience_steps"))] = None,
    lr_patience_steps: Annotated[Optional[int],
                                 _opt("--lr-patience is never shorter than this many optimiser steps; 0 = off.",
                                      default_of(_T, "lr_patience_steps"))] = None,
    lr_schedule: Annotated[Optional[str],
                           _opt("plateau (multiply lr by --lr-decay after each --lr-patience epochs "
                                "without a dev gain) or constant.", default_of(_T, "lr_schedule"))] = None,
    lr_decay: Annotated[Optional[float], _opt("plateau schedule: factor applied to the learning rate at each decay.",
                                              default_of(_T, "lr_decay"))] = None,
    lr_patience: Annotated[Optional[int],
                           _opt("plateau schedule: epochs in a row without a dev gain before each decay.",
                                default_of(_T, "lr_patience"))] = None,
    embed_dim: Annotated[Optional[int], _opt("Word and code vector size P.", default_of(_M, "embed_dim"))] = None,
    radius: Annotated[Optional[int],
                      _opt("Phrase radius r (the window spans 2r+1 tokens); --window is its old name, still accepted.",
                           default_of(_M, "radius"), "--radius", "--window")] = None,
    hidden_dim: Annotated[Optional[int], _opt("Hidden units of the MLP head.", default_of(_M, "hidden_dim"))] = None,
    dropout: Annotated[Optional[float], _opt("Dropout in the MLP head.", default_of(_M, "dropout"))] = None,
    label_reg: Annotated[Optional[float], _opt("Weight lambda of the label-embedding regulariser.",
                                               default_of(_M, "label_reg_weight"))] = None,
    compat: Annotated[Optional[str], _opt("cosine (LEAM) or linear (the paper's ablation).",
                                          default_of(_M, "compat"))] = None,
    paper: Annotated[bool, typer.Option("--paper",
                                        help="Train exactly the paper's model (Wang et al. 2018's LEAM): no code "
                                             "evidence. The default adds it, which codes better on "
                                             "ICD-coded data (docs/training.md).")] = False,
    code_evidence: Annotated[Optional[bool],
                             _opt("Each code's score also counts its best phrase match in the note (not in the paper; "
                                  "--no-code-evidence removes it; docs/training.md).", default_of(_M, "code_evidence"),
                                  "--code-evidence/--no-code-evidence")] = None,
    window_nonneg: Annotated[Optional[bool],
                             _opt("Keep the phrase window's taps W1 >= 0 after each step (not in the paper: a window "
                                  "that turns negative makes each code's best phrase its worst; docs/training.md).",
                                  default_of(_M, "window_nonneg"), "--window-nonneg/--no-window-nonneg")] = None,
    batch_size: Annotated[Optional[int], _opt("Notes per batch.", default_of(_T, "batch_size"))] = None,
    max_len: Annotated[Optional[int], _opt("Tokens kept per note.", default_of(_T, "max_len"))] = None,
    lr: Annotated[Optional[float], _opt("AdamW learning rate.", default_of(_T, "lr"))] = None,
    weight_decay: Annotated[Optional[float], _opt("AdamW weight decay.", default_of(_T, "weight_decay"))] = None,
    optimizer: Annotated[Optional[str], _opt("adamw or adam.", default_of(_T, "optimizer"))] = None,
    decay_scope: Annotated[Optional[str],
                           _opt("Parameters that get weight decay: embeddings (word and code "
                                "vectors), matrices or all.", default_of(_T, "decay_scope"))] = None,
    ema_decay: Annotated[Optional[float],
                         _opt("Moving average of the weights for dev scoring and the checkpoint; 0 = off.",
                              default_of(_T, "ema_decay"))] = None,
    pos_weight: Annotated[Optional[float], _opt("Up-weight positives of rare codes: (n_neg/n_pos)**x, 0 = off.",
                                                default_of(_T, "pos_weight"))] = None,
    embeddings: Annotated[Optional[str], _opt("w2v (train on the train split), random, or a word2vec/GloVe text file.",
                                              default_of(_T, "embeddings"))] = None,
    w2v_epochs: Annotated[Optional[int],
                          _opt("word2vec passes over the training notes; 0 = automatic (5-30 by corpus size).",
                               default_of(_T, "w2v_epochs"))] = None,
    min_doc_freq: Annotated[Optional[int], _opt("Vocabulary: words found in at least this many training notes.",
                                                default_of(_T, "min_doc_freq"))] = None,
    eval_batch_size: Annotated[Optional[int], _opt("Notes per batch when scoring dev and test.",
                                                   default_of(_T, "eval_batch_size"))] = None,
    memory_budget: Annotated[Optional[int],
                             _opt("MB of scratch memory one batch may use (decides the score "
                                  "blocks; see docs/training.md).", default_of(_T, "memory_mb"))] = None,
    descriptions: Annotated[Optional[Path],
                            typer.Option(help="code<TAB>description file for labels without descriptions.")] = None,
    device: Annotated[Optional[str], _opt("auto (CUDA when present), cpu or cuda.", default_of(_T, "device"))] = None,
    seed: Annotated[Optional[int], _opt("Random seed (runs repeat exactly on CPU).", default_of(_T, "seed"))] = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted run in --out.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Train the fused model (LEAM and tfidf-lr; or --model leam, --paper, --model tfidf-lr) into a checkpoint."""
    from clinicode.evaluate import format_table
    from clinicode.runtime import keep_freed_memory
    from clinicode.train import train

    if (data is None) == (mimic_dir is None):
        raise ConfigError("give exactly one of --data DIR (a prepared dataset) or --mimic-dir DIR (MIMIC-III tables).")
    keep_freed_memory()  # ~10% faster CPU steps: no page faults on the per-step buffers (see its docstring)
    if model is not None:
        train_kind(model)  # an unknown --model: one line naming the known kinds, before anything else is read
    if paper and model == "fused":  # the paper's model is a LEAM: the leam kind, not the default's fused one
        raise ConfigError("--paper trains the paper's LEAM (--model leam); leave out --model fused.")
    if paper and model is None:
        model = "leam"
    cfg = TrainConfig(**_given(model=model, epochs=epochs, fused_epochs=fused_epochs, batch_size=batch_size, lr=lr,
                               max_len=max_len, embeddings=embeddings,
                               weight_decay=weight_decay, optimizer=optimizer, pos_weight=pos_weight,
                               decay_scope=decay_scope,
                               ema_decay=ema_decay, w2v_epochs=w2v_epochs, min_doc_freq=min_doc_freq,
                               eval_batch_size=eval_batch_size, patience=patience, seed=seed, device=device,
                               patience_steps=patience_steps, lr_patience_steps=lr_patience_steps,
                               lr_schedule=lr_schedule, lr_decay=lr_decay, lr_patience=lr_patience,
                               memory_mb=memory_budget, top_k=None if mimic_dir is not None else top_k))
    given_leam = _given(embed_dim=embed_dim, radius=radius, hidden_dim=hidden_dim, dropout=dropout,
                        label_reg_weight=label_reg, compat=compat, code_evidence=code_evidence,
                        window_nonneg=window_nonneg)
    if train_kind(cfg.model).options_type is None:  # LEAM's flags for a kind without options: one line, not saved
        flags = [f"--{'label-reg' if k == 'label_reg_weight' else k.replace('_', '-')}" for k in given_leam]
        flags += ["--paper"] if paper else []
        if flags:
            raise ConfigError(f"--model {cfg.model} takes no model options, got {', '.join(flags)}; they are LEAM's, "
                              "leave them out.")
        options: dict[str, Any] = {}
    else:
        # Every model option is passed, given or default, so --resume compares them all with the run's.
        options = {k: default_of(_M, k) for k in ("embed_dim", "radius", "hidden_dim", "dropout", "label_reg_weight",
                                                  "compat", "code_evidence", "window_nonneg")}
    if paper and options:
        if code_evidence or window_nonneg:
            flag = "--code-evidence" if code_evidence else "--window-nonneg"
            raise ConfigError(f"--paper trains the paper's model, which has no code evidence and a free window; give "
                              f"one of --paper or {flag}.")
        options.update(PAPER_MODEL)
    if options:
        options.update(given_leam)

    def on_epoch(row: dict[str, Any]) -> None:
        typer.echo(f"epoch {row['epoch']:>3}  loss {row['train_loss']:.4f}  dev micro-F1 "
                   f"{row.get('dev_f1_micro', 0):.4f}  "
                   f"macro-AUC {row.get('dev_auc_macro', float('nan')):.4f}  P@5 {row.get('dev_prec_at_5', 0):.4f}  "
                   f"{row['seconds']:.1f}s{'  *best' if row['best'] else ''}", err=True)

    if mimic_dir is not None:  # the label set is chosen when preparing (--label-set, --top-k)
        data = _prepare_into_run(out, mimic_dir=mimic_dir, splits_dir=splits_dir, resume=resume, device=cfg.device,
                                 **_given(note_dir=note_dir, icd_version=icd_version, splits_file=splits_file,
                                          label_set=label_set, top_k=top_k, min_code_count=min_code_count))
    result = train(out_dir=out, config=cfg, data_dir=data, model_options=options, descriptions_path=descriptions,
                   resume=resume, progress=progress and sys.stderr.isatty(), on_epoch=on_epoch,
                   report=lambda line: typer.echo(line, err=True))
    if result.get("test"):
        typer.echo("test metrics:")
        typer.echo(format_table(result["test"]))
    typer.echo(f"checkpoint: {Path(out) / 'checkpoint'}")


def _prepare_into_run(out: Path, *, mimic_dir: Path, splits_dir: Path | None, resume: bool, device: str,
                      **prepare: Any) -> Path:
    """`train --mimic-dir`: prepare the tables into RUN/data (rank 0 under torchrun), then train reads that folder."""
    from clinicode.constants import RUN_DATA_DIR
    from clinicode.data.prepare import prepare_mimic
    from clinicode.data.prepared import is_prepared_dataset
    from clinicode.runtime import barrier, init_distributed, pick_device
    from clinicode.train_setup import check_run_folder

    out = check_run_folder(out, resume=resume, inputs={"--mimic-dir": mimic_dir, "--splits-dir": splits_dir,
                                                       "--note-dir": prepare.get("note_dir"),
                                                       "--splits-file": prepare.get("splits_file")})
    data = out / RUN_DATA_DIR
    rank, _ = init_distributed(pick_device(device))
    if rank == 0:
        claim_folder(out, option="--out")  # before preparing: a second run into the same folder stops here
    if rank == 0 and not (resume and is_prepared_dataset(data)):
        _print_summary(prepare_mimic(mimic_dir, data, splits_dir=splits_dir, **prepare))
    barrier()  # under torchrun the other ranks wait for rank 0's prepared data
    return data


@app.command("evaluate")
@_friendly
def evaluate_cli(
    checkpoint: Annotated[Path, typer.Option(help="Run folder (or its checkpoint/) from `clinicode train`.")],
    data: Annotated[Path, typer.Option(help="Prepared dataset folder.")],
    split: Annotated[str, typer.Option(help="train, dev or test.")] = "test",
    output: Annotated[Optional[Path], typer.Option(help="Write the metrics JSON here.")] = None,
    device: Annotated[Optional[str], _opt("auto, cpu or cuda.", default_of(_T, "device"))] = None,
) -> None:
    """Score a split and print CAML-style metrics (tuned threshold and 0.5)."""
    from clinicode.evaluate import evaluate, format_table, outside_warning

    m = evaluate(checkpoint=checkpoint, data_dir=data, split=split, output=output, **_given(device=device))
    typer.echo(format_table(m))
    warning = outside_warning(m, m["n_labels"])
    if warning:
        typer.echo(warning, err=True)
    if output:
        typer.echo(f"wrote {output}")


@app.command("compare")
@_friendly
def compare_cli(
    a: Annotated[list[Path], typer.Option("--a", metavar="RUN",
                                          help="Run folder of model A; repeat for several "
                                               "seeds (their mean is used).")],
    b: Annotated[list[Path], typer.Option("--b", metavar="RUN",
                                          help="Run folder of model B; repeat for several seeds.")],
    data: Annotated[Path, typer.Option(help="Prepared dataset folder.")],
    split: Annotated[str, typer.Option(help="train, dev or test.")] = "test",
    n_boot: Annotated[Optional[int], _opt("Paired bootstrap resamples of the notes.", default_of(_C, "n_boot"))] = None,
    seed: Annotated[Optional[int], _opt("Seed of the resampling.", default_of(_C, "seed"))] = None,
    output: Annotated[Optional[Path], typer.Option(help="Write the comparison JSON here.")] = None,
    device: Annotated[Optional[str], _opt("auto, cpu or cuda.", default_of(_T, "device"))] = None,
) -> None:
    """Compare two models on the same notes: micro-F1 and macro-AUC differences with a paired-bootstrap interval."""
    from clinicode.evaluate import compare, format_comparison, outside_warning

    c = compare(runs_a=a, runs_b=b, data_dir=data, split=split, output=output, **_given(n_boot=n_boot, seed=seed,
                                                                                        device=device))
    typer.echo(format_comparison(c))
    warning = outside_warning(c, len(c["codes"]))
    if warning:
        typer.echo(warning, err=True)
    if output:
        typer.echo(f"wrote {output}")


def _parse_shard(shard: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in shard.split("/"))
    except ValueError:
        raise ConfigError(f"--shard {shard!r}: expected i/n with 0 <= i < n, e.g. 0/4.") from None
    if not 0 <= i < n:
        raise ConfigError(f"--shard {shard!r}: expected i/n with 0 <= i < n, e.g. 0/4.")
    return i, n


def _formats_help(table: dict) -> str:
    return ", ".join(f"{name} ({fmt.what})" for name, fmt in table.items())


@app.command("predict")
@_friendly
def predict_cli(
    checkpoint: Annotated[Path, typer.Option(help="Run folder (or its checkpoint/) from `clinicode train`.")],
    input: Annotated[str,
                     typer.Option(help=".jsonl/.csv/.parquet with id and text, a .txt file, a folder of "
                                       ".txt, or - (JSONL on stdin).")],
    output: Annotated[str, typer.Option(help="JSONL (default) or .csv file, or - for stdout.")] = "-",
    top_k: Annotated[Optional[str], _opt("Codes listed in `scores`: a number or 'all'.",
                                         default_of(PredictConfig, "top_k"))] = None,
    threshold: Annotated[Optional[float], typer.Option(help="Override the checkpoint's tuned threshold.")] = None,
    explain: Annotated[Optional[int], _opt("Add the N highest-attention spans and per-code evidence.",
                                           default_of(PredictConfig, "explain"))] = None,
    strict: Annotated[bool, typer.Option(help="Stop at the first bad record instead of reporting it.")] = False,
    resume: Annotated[bool,
                      typer.Option(help="Continue an interrupted run from OUT.partial "
                                        "(same checkpoint and options).")] = False,
    shard: Annotated[str, typer.Option(help="i/n: score only records at positions p with p % n == i.")] = "0/1",
    device: Annotated[Optional[str], _opt("auto, cpu or cuda.", default_of(_T, "device"))] = None,
    memory_budget: Annotated[Optional[int], _opt("MB of scratch memory one batch and the word-code table may use.",
                                                 default_of(PredictConfig, "memory_mb"))] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
    titles: Annotated[Optional[Path],
                      typer.Option(help="code<TAB>title file: the candidates for `suggested` (codes the checkpoint "
                                        "lacks whose title stands in a note; suggestions, not predictions). Default: "
                                        "the code system's own titles (ICD-10-CM's).")] = None,
    tree: Annotated[Optional[Path],
                    typer.Option(help="code<TAB>tree numbers file (MeSH's mesh_tree.tsv): places the candidates in "
                                      "the hierarchy, so a trained code under one counts.")] = None,
    suggest: Annotated[bool, typer.Option(help="List `suggested` codes from the titles (--no-suggest: none).")] = True,
    format: Annotated[str, typer.Option("--format",
                                        help="records (JSONL, or CSV when --output ends in .csv), or an output format: "
                                             f"{_formats_help(WRITERS)}.")] = "records",
    input_format: Annotated[Optional[str],
                            typer.Option(help=f"Input format (default: by --input's name): {_formats_help(READERS)}."
                                         )] = None,
) -> None:
    """Score notes in batch: one output record per input record, in input order."""
    from clinicode.codes.icd9 import load_descriptions_tsv
    from clinicode.codes.suggest import read_tree
    from clinicode.predict import Predictor
    from clinicode.predict_io import predict_file

    if format != "records" and format not in WRITERS:
        whole = " or ".join(["records", *(n for n, w in WRITERS.items() if not w.suffixes)])
        raise ConfigError(f"--format {format[:40]!r}: expected {whole}, or a file format: "
                          f"{', '.join(n for n, w in WRITERS.items() if w.suffixes)}.")
    if input_format is not None:
        reader(input_format)  # an unknown name stops here, before the checkpoint loads

    opts = PredictConfig.from_user(top_k=top_k, explain=explain, threshold=threshold,  # the one rule (serve's too)
                                   **_given(memory_mb=memory_budget))
    if (titles or tree) and not suggest:
        raise ConfigError("--titles and --tree are for suggestions; drop them or --no-suggest.")
    pred = Predictor.from_checkpoint(checkpoint, **_given(device=device, memory_mb=memory_budget),
                                     titles=load_descriptions_tsv(titles, unique=True) if titles else None,
                                     tree=read_tree(tree) if tree else None, suggest=suggest)
    if titles and not pred.suggester:
        raise DataFormatError(f"--titles {titles}: no code with a title outside the checkpoint's {len(pred.codes):,} "
                              "codes; give code<TAB>title lines for codes the model was not trained on.")
    context = None
    if format != "records":  # what a writer may name beyond the record (`Writer`'s context): FHIR's systems, source
        from clinicode.fhir import code_systems, predictor_source

        # the same builder as `clinicode serve`; each Bundle names the checkpoint that suggested its codes
        context = {"systems": code_systems(pred.codes, pred.code_system), "source": predictor_source(pred),
                   "family": pred.code_system}
    counts = predict_file(pred, input=input, output=output, top_k=opts.top_k, threshold=opts.threshold,
                          explain=opts.explain, strict=strict, resume=resume, shard=_parse_shard(shard),
                          progress=progress and sys.stderr.isatty(), input_format=input_format,
                          output_format=None if format == "records" else format, context=context)
    dup = counts.get("duplicate_ids", 0)
    typer.echo(f"scored {counts['scored']:,} notes, {counts['errors']:,} bad records (see their 'error' field), "
               f"{counts['skipped']:,} skipped as already done"
               + (f"; {dup:,} records repeat an earlier id (each has its own "
                  "output record, in input order)" if dup else ""),
               err=True)
    if pred.plan is not None:
        typer.echo(pred.plan.summary(), err=True)


from clinicode.config import ServeConfig as _S  # noqa: E402  (serve's defaults, for its --help)


@app.command("serve")
@_friendly
def serve_cli(
    checkpoint: Annotated[Path, typer.Option(help="Run folder (or its checkpoint/) from `clinicode train`.")],
    host: Annotated[str, typer.Option(help="Address to bind; anything but loopback needs --token-file.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    token_file: Annotated[Optional[Path],
                          typer.Option(help="File (mode 600) holding the bearer token every "
                                            "route but /health requires.")] = None,
    max_notes: Annotated[Optional[int], _opt("Notes per request (more: 413).", default_of(_S, "max_notes"))] = None,
    max_text_chars: Annotated[Optional[int], _opt("Characters per note (more: 413).",
                                                  default_of(_S, "max_text_chars"))] = None,
    max_body_mb: Annotated[Optional[float], _opt("Request body size in MB (more: 413).",
                                                 default_of(_S, "max_body_mb"))] = None,
    batch_notes: Annotated[Optional[int], _opt("Notes of concurrent requests scored together at most.",
                                               default_of(_S, "batch_notes"))] = None,
    batch_wait_ms: Annotated[Optional[float], _opt("How long the scorer waits for more notes to batch (ms).",
                                                   default_of(_S, "batch_wait_ms"))] = None,
    max_pending: Annotated[Optional[int], _opt("Requests being read or scored at once (more: 503, Retry-After).",
                                               default_of(_S, "max_pending"))] = None,
    read_timeout: Annotated[Optional[float], _opt("Seconds for a request's head and body to arrive (slow: 408).",
                                                  default_of(_S, "read_timeout"))] = None,
    idle_timeout: Annotated[Optional[float], _opt("Seconds an idle keep-alive connection stays open.",
                                                  default_of(_S, "idle_timeout"))] = None,
    write_timeout: Annotated[Optional[float], _opt("Seconds an answer may wait for its client to read it (then the "
                                                   "connection is closed).", default_of(_S, "write_timeout"))] = None,
    grace: Annotated[Optional[float], _opt("Seconds SIGTERM/SIGINT give admitted requests before 503.",
                                           default_of(_S, "grace"))] = None,
    allow_host: Annotated[Optional[list[str]],
                          typer.Option(help="Host name to answer besides loopback and --host (repeat; '*': any).")
                          ] = None,
    allow_origin: Annotated[Optional[list[str]],
                            typer.Option(help="Browser origin allowed to call the service, e.g. "
                                              "https://coding.example.org (repeat; '*': any).")] = None,
    device: Annotated[Optional[str], _opt("auto, cpu or cuda.", default_of(_T, "device"))] = None,
    http: Annotated[str, typer.Option(help="HTTP/1.1 parser: auto (httptools, compiled, when installed; else h11), "
                                           "httptools or h11.")] = "auto",
) -> None:
    """Serve a checkpoint over HTTP: JSON records and FHIR R4 Bundles (docs/serve.md). Exit status: 0 after SIGTERM or
    Ctrl-C, 1 for a bad option, token file, checkpoint, address or busy port, 2 for a malformed command line."""
    from clinicode.serve import run

    limits = _S(**_given(max_notes=max_notes, max_text_chars=max_text_chars, max_body_mb=max_body_mb,
                         batch_notes=batch_notes, batch_wait_ms=batch_wait_ms, max_pending=max_pending,
                         read_timeout=read_timeout, idle_timeout=idle_timeout, write_timeout=write_timeout,
                         grace=grace,
                         allow_hosts=tuple(allow_host) if allow_host else None,
                         allow_origins=tuple(allow_origin) if allow_origin else None))

    def ready(pred: Any, secured: bool, url: str) -> None:
        typer.echo(f"serving {len(pred.codes):,} codes from {pred.checkpoint.path} on {url} "
                   f"({'bearer token required' if secured else 'no token: loopback only'}); docs at /docs", err=True)

    run(checkpoint, host=host, port=port, token_file=token_file, limits=limits, on_ready=ready, http=http,
        **_given(device=device))


# ------------------------------------------------------------------------------------------------ review queue
review_app = typer.Typer(no_args_is_help=True, help="A coder's review queue: queue scored notes, record decisions, "
                         "export corrections for training, report agreement (docs/review.md).")
app.add_typer(review_app, name="review")
_DB_HELP = "Review database file (SQLite; holds note text; created owner-only). Default: $CLINICODE_REVIEW_DB."


def _db_opt() -> Any:
    return typer.Option("--db", help=_DB_HELP, envvar="CLINICODE_REVIEW_DB", show_envvar=False)


@review_app.command("queue")
@_friendly
def review_queue_cli(
    checkpoint: Annotated[Path, typer.Option(help="Run folder (or its checkpoint/) from `clinicode train`.")],
    input: Annotated[str,
                     typer.Option(help="Notes, as `predict` reads them: .jsonl/.csv/.parquet with id and text, a .txt "
                                       "file, a folder of .txt, or -.")],
    db: Annotated[Optional[str], _db_opt()] = None,
    explain: Annotated[int, typer.Option(help="Evidence phrases stored per suggested code (>= 1).")] = 5,
    device: Annotated[Optional[str], _opt("auto, cpu or cuda.", default_of(_T, "device"))] = None,
    memory_budget: Annotated[Optional[int], _opt("MB of scratch memory one batch and the word-code table may use.",
                                                 default_of(PredictConfig, "memory_mb"))] = None,
    input_format: Annotated[Optional[str],
                            typer.Option(help=f"Input format, as `predict` reads it (default: by --input's name): "
                                              f"{_formats_help(READERS)}.")] = None,
) -> None:
    """Score notes and queue them for review with the model's suggested codes and evidence."""
    from clinicode.predict import Predictor
    from clinicode.review import db_path, open_db, queue
    from clinicode.review.queue import check_explain

    explain = check_explain(explain)  # the queue's bound (>= 1), before predict's rules check the rest
    PredictConfig.from_user(explain=explain, **_given(memory_mb=memory_budget))
    if input_format is not None:
        reader(input_format)  # an unknown name stops here, before the checkpoint loads or a database is created

    def load() -> Predictor:
        return Predictor.from_checkpoint(checkpoint, **_given(device=device, memory_mb=memory_budget))

    path = db_path(db)
    pred = None if path.exists() else load()  # a new database is created only once the checkpoint loaded
    with open_db(path) as rdb:                # an existing one is checked before the model is loaded
        try:
            pred = pred or load()
            counts = queue(rdb, pred, input, explain=explain, input_format=input_format,
                           on_bad=lambda msg: typer.echo(f"bad record: {msg}", err=True))
        except KeyboardInterrupt:
            rdb.discard_if_unused()
            typer.echo("interrupted; every chunk of notes stored before is kept. Run the same `clinicode review "
                       "queue` command again to queue the rest (notes already queued are skipped).", err=True)
            raise typer.Exit(130) from None
        except BaseException:
            rdb.discard_if_unused()  # a database this command created and never filled is not left behind
            raise
    typer.echo(f"queued {counts['queued']:,} notes, {counts['already']:,} already in the queue (left unchanged), "
               f"{counts['errors']:,} bad records (listed above) -> {rdb.path}")


@review_app.command("decide")
@_friendly
def review_decide_cli(
    id: Annotated[str, typer.Option("--id", help="The note's id.")],
    reviewer: Annotated[str, typer.Option(help="Who decides (stored with every decision).")],
    db: Annotated[Optional[str], _db_opt()] = None,
    accept: Annotated[Optional[list[str]], typer.Option(help="A suggested code to keep; repeatable.")] = None,
    reject: Annotated[Optional[list[str]],
                      typer.Option(help="A suggested (or added) code to remove; repeatable.")] = None,
    add: Annotated[Optional[list[str]], typer.Option(help="A code the model missed; repeatable.")] = None,
    done: Annotated[bool, typer.Option("--done",
                                       help="Finish the note (every suggestion must have a decision).")] = False,
) -> None:
    """Record a coder's decisions on one note (the same code path as the app's Review page)."""
    from clinicode.review import open_db

    with open_db(db, create=False) as rdb:
        r = rdb.decide(id, reviewer, accept=accept or [], reject=reject or [], add=add or [], done=done)
    typer.echo(f"note {r['note']}: accepted {len(r['accepted'])}, rejected "
               f"{len(r['rejected'])}, added {len(r['added'])}"
               f"{'; finished' if r['done'] else ''}; codes now: {', '.join(r['codes']) or 'none'}")


@review_app.command("next")
@_friendly
def review_next_cli(
    db: Annotated[Optional[str], _db_opt()] = None,
    reviewer: Annotated[Optional[str], typer.Option(help="Who reviews: notes others hold, and double-coded notes "
                                                         "not assigned to them, are left out.")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="How many notes to propose, best first.")] = 1,
    order: Annotated[str, typer.Option(help="teach (uncertain notes and rare codes first, alike notes spread out) "
                                            "or arrival (queue order).")] = "teach",
) -> None:
    """Print the ids of the notes to review next, one a line, by the next-note rule (the app's *Next note*)."""
    from clinicode.review import open_db

    if count < 1:
        raise ConfigError(f"--count must be >= 1, got {count}.")
    with open_db(db, readonly=True) as rdb:
        ids = rdb.next_notes(count, order=order, reviewer=reviewer)
    if not ids:
        typer.echo("no open note to review", err=True)
    for i in ids:
        typer.echo(i)


@review_app.command("assign")
@_friendly
def review_assign_cli(
    coder: Annotated[list[str], typer.Option(help="A coder of the notes; give it twice (double coding).")],
    db: Annotated[Optional[str], _db_opt()] = None,
    id: Annotated[Optional[list[str]], typer.Option("--id", help="A note to double code; repeatable.")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="Without --id: this many open notes, chosen by "
                                                              "--order.")] = 0,
    order: Annotated[str, typer.Option(help="teach or arrival (as `review next`).")] = "teach",
) -> None:
    """Assign notes to two coders, each blind to the other's decisions, for agreement and adjudication."""
    from clinicode.review import open_db
    from clinicode.review.audit import assign

    if not id and count < 1:
        raise ConfigError("give the notes to double code: --id NOTE (repeatable) or --count N.")
    with open_db(db, create=False) as rdb:
        ids = list(id or [])
        if not ids:
            free = {n["id"] for n in rdb.notes(status=["pending"])} - {r[0] for r in rdb.read(
                "SELECT note FROM assignments")}
            ids = [i for i in rdb.next_notes(len(free) or 1, order=order) if i in free][:count]
        n = assign(rdb, ids, coder)
    typer.echo(f"assigned {n:,} notes to {' and '.join(coder)} (blind double coding)")


@review_app.command("adjudicate")
@_friendly
def review_adjudicate_cli(
    id: Annotated[str, typer.Option("--id", help="The double-coded note.")],
    reviewer: Annotated[str, typer.Option(help="Who adjudicates (not one of its coders).")],
    db: Annotated[Optional[str], _db_opt()] = None,
    code: Annotated[Optional[list[str]], typer.Option(help="A final code (named by a coder or the model); "
                                                           "repeatable; none: the note has no code.")] = None,
) -> None:
    """Record the final codes of a note both coders finished, and finish it."""
    from clinicode.review import open_db
    from clinicode.review.audit import adjudicate

    with open_db(db, create=False) as rdb:
        r = adjudicate(rdb, id, reviewer, code or [])
    coders = "; ".join(f"{c}: {', '.join(sorted(a for a, v in s.items() if v in ('accept', 'add'))) or 'none'}"
                       for c, s in sorted(r["coders"].items()))
    typer.echo(f"note {r['note']}: final codes {', '.join(r['codes']) or 'none'} ({coders}); finished")


@review_app.command("agreement")
@_friendly
def review_agreement_cli(
    db: Annotated[Optional[str], _db_opt()] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """Double coders' agreement: Cohen's kappa per code and per coder, and time per note."""
    from clinicode.review import open_db
    from clinicode.review.audit import agreement, work_times

    with open_db(db, readonly=True) as rdb:
        rdb.check_integrity()
        a, times = agreement(rdb), work_times(rdb)
    if as_json:
        typer.echo(json.dumps({**a, "time": times}, indent=2))
        return

    def k(x: float | None) -> str:
        return "   -" if x is None else f"{x:5.2f}"

    typer.echo(f"{a['notes']:,} double-coded notes both coders finished ({a['adjudicated']:,} adjudicated, "
               f"{a['waiting']:,} waiting); overall kappa {k(a['overall_kappa'])}")
    typer.echo(f"{'coder':<20} {'notes':>6} {'kappa with other':>16} {'kappa with final':>16}")
    for c, v in a["per_coder"].items():
        typer.echo(f"{c[:20]:<20} {v['notes']:>6} {k(v['kappa_with_other']):>16} {k(v['kappa_with_final']):>16}")
    typer.echo(f"\n{'code':<12} {'first':>6} {'second':>6} {'agree':>6} {'kappa':>6}")
    for c, v in a["per_code"].items():
        typer.echo(f"{c:<12} {v['first']:>6} {v['second']:>6} {v['agree']:>6} {k(v['kappa']):>6}")
    done = [t["seconds"] for t in times if t["seconds"] is not None]
    if done:
        done.sort()
        typer.echo(f"\ntime per note and coder: median {done[len(done) // 2]:.0f} s over {len(done):,} finished")


@review_app.command("retrain")
@_friendly
def review_retrain_cli(
    checkpoint: Annotated[Path, typer.Option(help="The run (or its checkpoint/) to update; it is never changed.")],
    data: Annotated[Path, typer.Option(help="The dataset it was trained on (dev and test are kept as they are).")],
    out: Annotated[Path, typer.Option(help="The new run folder (new or empty): its checkpoint, and its data/.")],
    db: Annotated[Optional[str], _db_opt()] = None,
    epochs: Annotated[int, typer.Option(help="LEAM: epochs of the warm start.")] = 3,
    sample: Annotated[int, typer.Option(help="LEAM: training notes of --data trained on beside the decided ones "
                                             "(tfidf-lr refits on all of them).")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the sample and of the warm start.")] = 0,
    device: Annotated[Optional[str], _opt("auto, cpu or cuda.", default_of(_T, "device"))] = None,
) -> None:
    """A new checkpoint from the finished notes' decisions: tfidf-lr refits on train + decided notes; LEAM starts
    from the checkpoint's weights and trains a few epochs on the decided notes and a sample of train."""
    from clinicode.checkpoint import load_checkpoint, resolve_checkpoint_dir
    from clinicode.review import db_path, open_db
    from clinicode.review.export import retrain_data
    from clinicode.train import RUN_DATA, check_run_folder, retrain

    if epochs < 1 or sample < 0:
        raise ConfigError(f"--epochs must be >= 1 and --sample >= 0, got {epochs} and {sample}.")
    check_run_folder(out, resume=False, inputs={"--data": data, "--checkpoint": checkpoint})  # before RUN/data
    ck = load_checkpoint(resolve_checkpoint_dir(checkpoint), verify=True)
    warm = ck.model_kind.trained_by_loop
    with open_db(db, readonly=True) as rdb:
        made = retrain_data(rdb, Path(out) / RUN_DATA, base=data, labels=list(zip(ck.labels.codes,
                                                                                     ck.labels.descriptions)),
                            sample=sample if warm else None, seed=seed)
    typer.echo(f"{made['reviewed']:,} finished notes and {made['sampled']:,} training notes of {data} -> "
               f"{Path(out) / RUN_DATA}", err=True)
    r = retrain(checkpoint=ck, out_dir=out, data_dir=Path(out) / RUN_DATA, epochs=epochs, seed=seed,
                device=device, provenance={"checkpoint": str(ck.path), "checkpoint_sha256": ck.manifest_sha256,
                                           "review_db": str(Path(db_path(db)).resolve()),
                                           "decided_notes": made["reviewed"], "sampled_notes": made["sampled"]})
    typer.echo(f"retrained {ck.kind} from {ck.path} ({'warm start, ' + str(epochs) + ' epochs' if warm else 'refit'}) "
               f"-> {r['run']}: test micro-F1 {r['test'].get('f1_micro', float('nan')):.4f} in {r['seconds']:.1f} s")


@review_app.command("export")
@_friendly
def review_export_cli(
    out: Annotated[Path, typer.Option(help="Coded-notes folder to write (new, empty, or an earlier export).")],
    db: Annotated[Optional[str], _db_opt()] = None,
    base: Annotated[Optional[Path],
                    typer.Option(help="A prepared dataset (or coded-notes folder) to merge with: its splits are kept, "
                                      "reviewed notes join train (or correct their own note).")] = None,
) -> None:
    """Write the finished notes as a coded-notes folder for `clinicode train --data` (labels: accepted + added)."""
    from clinicode.review import export, open_db

    with open_db(db, readonly=True) as rdb:
        c = export(rdb, out, base=base)
    typer.echo(f"wrote {c['reviewed']:,} finished notes{' with --base' if base else ''} to {out} (train "
               f"{c['train']:,}, dev {c['dev']:,}, test {c['test']:,} notes; {c['codes']:,} reviewed codes)")
    if c.get("kept_out"):
        typer.echo(f"{c['kept_out']:,} reviewed notes are in the base's dev or test split: left out, so those splits "
                   "keep the base's labels and the new model is measured as the old one was")
    if c.get("untrained"):
        shown = ", ".join(c["untrained"][:5]) + (", ..." if len(c["untrained"]) > 5 else "")
        where = ("left out of labels.json" if base else
                 "training reads only codes of train notes, so it drops them from dev/test")
        typer.echo(f"{len(c['untrained']):,} reviewed codes have no training note in this export (their notes are all "
                   f"in dev or test{', or kept out' if base else ''}): {where}; no model learns them until a train "
                   f"note carries them ({shown}; all in manifest.json, codes_without_training_notes)")


@review_app.command("stats")
@_friendly
def review_stats_cli(
    db: Annotated[Optional[str], _db_opt()] = None,
    by: Annotated[str, typer.Option(help="Period of the over-time table: day or week.")] = "day",
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """Agreement of the model with coders on finished notes: accepted, rejected, added; precision and recall."""
    from clinicode.review import open_db

    with open_db(db, readonly=True) as rdb:
        s = rdb.stats(by=by)
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return

    def pct(x: float | None) -> str:
        return "   -  " if x is None else f"{x:6.1%}"

    def row(name: str, v: dict[str, Any]) -> str:
        return (f"{name:<12} {v['accepted']:>8,} {v['rejected']:>8,} {v['added']:>8,} {pct(v['precision']):>9} "
                f"{pct(v['recall']):>7}")

    head = f"{'':<12} {'accepted':>8} {'rejected':>8} {'added':>8} {'precision':>9} {'recall':>7}"
    o = s["overall"]
    typer.echo(f"{o['notes']:,} finished notes, {s['open_notes']:,} still open")
    typer.echo(head)
    typer.echo(row("overall", o))
    typer.echo("\nper code")
    for code, v in s["per_code"].items():
        typer.echo(row(code, v))
    typer.echo(f"\nper {by}")
    for period, v in s["over_time"].items():
        typer.echo(row(period, v))
    typer.echo("\nwhat the queue teaches, per code (accept rate: suggestions coders kept; missed rate: codings "
               "the model did not suggest)")
    typer.echo(f"{'':<12} {'suggested':>9} {'accept rate':>11} {'coded':>8} {'missed rate':>11}")
    for code, v in s["per_code"].items():
        typer.echo(f"{code:<12} {v['suggested']:>9,} {pct(v['accept_rate']):>11} {v['coded']:>8,} "
                   f"{pct(v['missed_rate']):>11}")
    typer.echo("\ndecisions per checkpoint (the one whose suggestions the note showed)")
    for sha, c in s["checkpoints"].items():
        typer.echo(f"{sha[:12]:<12} {c['decisions']:>8,}  {c['checkpoint']}")
    r = s["routing"]
    typer.echo(f"\nscores at and above which suggestions were accepted >= {r['target']:.0%} (codes with >= "
               f"{r['min_decisions']} decided suggestions from one checkpoint; a report: nothing is accepted "
               "without a coder)")
    if not r["by_checkpoint"]:
        typer.echo(f"no code has {r['min_decisions']} decided suggestions from one checkpoint yet")
    for entry in r["by_checkpoint"].values():
        typer.echo(f"checkpoint {entry['checkpoint']}")
        typer.echo(f"{'':<12} {'score >=':>8} {'decisions':>9} {'accepted':>8} {'95% low':>7} {'share':>6} {'of':>5}")
        for code, t in entry["codes"].items():
            if t["threshold"] is None:
                typer.echo(f"{code:<12} {'never':>8} {'':>9} {'':>8} {'':>7} {'':>6} {t['all_decisions']:>5,}")
            else:
                typer.echo(f"{code:<12} {t['threshold']:>8.3f} {t['decisions']:>9,} {pct(t['rate']):>8} "
                           f"{pct(t['lower_bound']):>7} {t['share']:>6.0%} {t['all_decisions']:>5,}")
    ft = s["from_title"]
    typer.echo(f"\nsuggested from the title (codes the model lacks; not in the counts above): {ft['accepted']:,} "
               f"accepted, {ft['rejected']:,} rejected, accept rate {pct(ft['accept_rate'])}")
    for code, v in ft["per_code"].items():
        typer.echo(f"{code:<12} {v['accepted']:>8,} {v['rejected']:>8,}")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
