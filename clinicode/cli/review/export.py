"""`review retrain` and `review export`: the finished notes' decisions back into training, as a new checkpoint or as
a coded-notes folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from clinicode.cli.options import db_option, opt
from clinicode.cli.root import friendly
from clinicode.config import TrainConfig, default_of
from clinicode.constants import RETRAIN_EPOCHS
from clinicode.errors import ConfigError


@friendly
def review_retrain_cli(
    checkpoint: Annotated[Path, typer.Option(help="The run (or its checkpoint/) to update; it is never changed.")],
    data: Annotated[Path, typer.Option(help="The dataset it was trained on (dev and test are kept as they are).")],
    out: Annotated[Path, typer.Option(help="The new run folder (new or empty): its checkpoint, and its data/.")],
    db: Annotated[Optional[str], db_option()] = None,
    epochs: Annotated[int, typer.Option(help="LEAM: a warm start's epoch cap (it stops when dev stops improving).")]
    = RETRAIN_EPOCHS,
    sample: Annotated[Optional[int], typer.Option(help="Warm start: only this many training notes of --data beside "
                                                       "the decided ones in its epochs (default: every note; "
                                                       "tfidf-lr parts refit on all of them).")] = None,
    start: Annotated[str, typer.Option(help="LEAM: warm (from the checkpoint's weights), fresh (as train), or auto: "
                                            "fresh once the notes number 1.5x those its vocabulary came from.")]
    = "auto",
    seed: Annotated[int, typer.Option(help="Seed of the sample and of the warm start.")] = 0,
    device: Annotated[Optional[str], opt("auto, cpu or cuda.", default_of(TrainConfig, "device"))] = None,
    descriptions: Annotated[Optional[Path], typer.Option(
        help="code<TAB>title file (as `train --descriptions`) for the codes coders added: its titles first, then "
             "the code system's (only ICD-10-CM ships any).")] = None,
) -> None:
    """A new checkpoint from the finished notes' decisions: tfidf-lr (and the default model's tfidf-lr part,
    titles, mentions and fusion) refits on train + decided notes; LEAM starts from the checkpoint's weights and
    trains until dev stops improving, or trains fresh, as `train` does, once the notes outgrew its vocabulary."""
    import os
    import shutil

    from clinicode.artifacts import holds_training
    from clinicode.checkpoint import load_checkpoint, resolve_checkpoint_dir
    from clinicode.codes.icd9 import load_descriptions_tsv
    from clinicode.review import db_path, open_db
    from clinicode.review.export import retrain_data
    from clinicode.train import RUN_DATA, check_run_folder, retrain

    if epochs < 1 or (sample is not None and sample < 0) or start not in ("auto", "warm", "fresh"):
        raise ConfigError(f"--epochs must be >= 1, --sample >= 0 and --start auto, warm or fresh; got {epochs}, "
                          f"{sample} and {start!r}.")
    if holds_training(out):  # `train --resume` continues a run; a retrain always starts a new one
        raise ConfigError(f"--out {out} already holds a run (an earlier or interrupted retrain, or a train); `review "
                          "retrain` always starts a new run: choose a new --out folder, or remove that one if you no "
                          "longer need it.")
    check_run_folder(out, resume=False, inputs={"--data": data, "--checkpoint": checkpoint})  # before RUN/data
    ck = load_checkpoint(resolve_checkpoint_dir(checkpoint), verify=True)
    titles = load_descriptions_tsv(descriptions) if descriptions is not None else None
    loops = ck.model_kind.loop_model is not None   # a loop kind's warm start may see a --sample of the notes
    new_out, made = not Path(out).exists(), None
    # every file and folder the retrain writes is owner-only: its data holds the reviewed notes' text, and the new
    # checkpoint's vocabulary and mentions are learned from their words
    mask = os.umask(0o077)
    try:
        with open_db(db, readonly=True) as rdb:
            made = retrain_data(rdb, Path(out) / RUN_DATA, base=data,
                                labels=list(zip(ck.labels.codes, ck.labels.descriptions)),
                                sample=sample if loops else None, seed=seed, system=ck.labels.code_system,
                                checkpoint=checkpoint, titles=titles)
        typer.echo(f"{made['reviewed']:,} finished notes and {made['sampled']:,} training notes of {data} -> "
                   f"{Path(out) / RUN_DATA}", err=True)
        _say_added(made)
        r = retrain(checkpoint=ck, out_dir=out, data_dir=Path(out) / RUN_DATA, epochs=epochs, seed=seed,
                    device=device, start=start, n_train=made["train"],
                    provenance={"checkpoint": str(ck.path), "checkpoint_sha256": ck.manifest_sha256,
                                "review_db": str(Path(db_path(db)).resolve()),
                                "decided_notes": made["reviewed"], "sampled_notes": made["sampled"]})
    except BaseException:
        # the data holds the reviewed notes' text: never left behind by a failed retrain; nor is a run folder this
        # command made (a retrain cannot be resumed, so a partial one is of no use)
        if new_out:
            shutil.rmtree(out, ignore_errors=True)
        elif made is not None:
            shutil.rmtree(Path(out) / RUN_DATA, ignore_errors=True)
        raise
    finally:
        os.umask(mask)
    unscored = r["dev"].get("codes_not_coded_in_split") or []
    typer.echo(f"retrained {ck.kind} from {ck.path} ({_how(r)}) -> {r['run']} in {r['seconds']:.1f} s; micro-F1 "
               f"{_then_now(ck.metrics_dev, r['dev'])} on dev, {_then_now(ck.metrics_test, r['test'])} on test"
               + (f" (without the {len(unscored):,} codes coders added: dev and test were never coded for them)"
                  if unscored else ""))


def _how(r: dict) -> str:
    """What the retrain did, in words."""
    epochs = len(r.get("history") or [])
    if r["start"] == "warm":
        until = "until dev stopped improving" if r.get("stopped") == "patience" else "(the --epochs cap)"
        return f"warm start from its weights and vocabulary, {epochs} epochs {until}, on {r['notes']:,} training notes"
    if r["start"] == "fresh":
        return (f"fresh start, as train: {r['notes']:,} training notes against the {r['vocabulary_notes']:,} its "
                f"vocabulary came from; {epochs} epochs")
    return f"refitted on {r['notes']:,} training notes"


def _then_now(old: dict, new: dict) -> str:
    """'0.8123 -> 0.8301' (the old checkpoint's figure, when it has one, then the new one's)."""
    now = f"{new.get('f1_micro', float('nan')):.4f}"
    return f"{old['f1_micro']:.4f} -> {now}" if "f1_micro" in old else now


def _say_added(made: dict) -> None:
    """`review retrain`'s lines on the codes coders added: those that joined (and which of them have no title), and
    those left out as too rare."""
    from clinicode.review.export import MIN_ADDED_NOTES

    if made["added_codes"]:
        typer.echo(f"{len(made['added_codes']):,} codes coders added join the label set (the model grows a "
                   "row for each, started from its title): " + _counted(made["added_codes"]), err=True)
        if made["untitled"]:
            typer.echo(f"{len(made['untitled']):,} of them have no title (no title match, a row started from "
                       "nothing): the code system ships none; pass --descriptions FILE (code<TAB>title): "
                       + ", ".join(made["untitled"][:10]), err=True)
    if made["too_few"]:
        typer.echo(f"{len(made['too_few']):,} codes coders added are left out: fewer than {MIN_ADDED_NOTES} "
                   "reviewed notes carry them, too little to learn from (decide more notes with them, then "
                   "retrain): " + _counted(made["too_few"]), err=True)


def _counted(codes: dict[str, int], shown: int = 10) -> str:
    """'C1 (4 notes), C2 (3 notes), ...': the first SHOWN codes and their reviewed notes."""
    head = ", ".join(f"{c} ({n} note{'s' if n != 1 else ''})" for c, n in list(codes.items())[:shown])
    return head + (f", and {len(codes) - shown:,} more" if len(codes) > shown else "")


@friendly
def review_export_cli(
    out: Annotated[Path, typer.Option(help="Coded-notes folder to write (new, empty, or an earlier export).")],
    db: Annotated[Optional[str], db_option()] = None,
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
