"""`review queue`, `review decide`, `review next`: notes scored into the queue, a coder's decisions, the next note."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from clinicode.cli.options import db_option, evidence_spans, formats_help, given, opt
from clinicode.cli.root import friendly
from clinicode.config import PredictConfig, TrainConfig, default_of
from clinicode.errors import ConfigError
from clinicode.formats import READERS, reader


@friendly
def review_queue_cli(
    checkpoint: Annotated[Path, typer.Option(help="Run folder (or its checkpoint/) from `clinicode train`.")],
    input: Annotated[str,
                     typer.Option(help="Notes, as `predict` reads them: .jsonl/.csv/.parquet with id and text, a .txt "
                                       "file, a folder of .txt, or -.")],
    db: Annotated[Optional[str], db_option()] = None,
    explain: Annotated[int, typer.Option(help="Evidence phrases stored per suggested code (>= 1).")] = 5,
    device: Annotated[Optional[str], opt("auto, cpu or cuda.", default_of(TrainConfig, "device"))] = None,
    memory_budget: Annotated[Optional[int], opt("MB of scratch memory one batch and the word-code table may use.",
                                                default_of(PredictConfig, "memory_mb"))] = None,
    input_format: Annotated[Optional[str],
                            typer.Option(help=f"Input format, as `predict` reads it (default: by --input's name): "
                                              f"{formats_help(READERS)}.")] = None,
) -> None:
    """Score notes and queue them for review with the model's suggested codes and evidence."""
    from clinicode.predict import Predictor
    from clinicode.review import db_path, open_db, queue
    from clinicode.review.queue import check_explain

    explain = check_explain(explain)  # the queue's bound (>= 1), before predict's rules check the rest
    PredictConfig.from_user(explain=explain, **given(memory_mb=memory_budget))
    if input_format is not None:
        reader(input_format)  # an unknown name stops here, before the checkpoint loads or a database is created

    def load() -> Predictor:
        return Predictor.from_checkpoint(checkpoint, **given(device=device, memory_mb=memory_budget))

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


@friendly
def review_rescore_cli(
    checkpoint: Annotated[Path, typer.Option(help="Run folder (or its checkpoint/), e.g. the one `review retrain` "
                                                  "made.")],
    db: Annotated[Optional[str], db_option()] = None,
    explain: Annotated[int, typer.Option(help="Evidence phrases stored per suggested code (>= 1).")] = 5,
    device: Annotated[Optional[str], opt("auto, cpu or cuda.", default_of(TrainConfig, "device"))] = None,
    memory_budget: Annotated[Optional[int], opt("MB of scratch memory one batch and the word-code table may use.",
                                                default_of(PredictConfig, "memory_mb"))] = None,
) -> None:
    """Score the queued notes no one has opened, decided or been assigned again with CHECKPOINT (after `review
    retrain`): their suggestions and next-note signals become the new model's; every other note keeps its own."""
    from clinicode.predict import Predictor
    from clinicode.review import open_db
    from clinicode.review.queue import check_explain, rescore

    explain = check_explain(explain)
    PredictConfig.from_user(explain=explain, **given(memory_mb=memory_budget))
    with open_db(db, create=False) as rdb:     # the database is checked before the model is loaded
        pred = Predictor.from_checkpoint(checkpoint, **given(device=device, memory_mb=memory_budget))
        counts = rescore(rdb, pred, explain=explain, on_bad=lambda msg: typer.echo(f"bad record: {msg}", err=True))
    typer.echo(f"rescored {counts['rescored']:,} notes with {pred.checkpoint.path}; {counts['kept']:,} opened, "
               f"decided or assigned notes kept as they were, {counts['errors']:,} bad (listed above) -> {rdb.path}")


@friendly
def review_decide_cli(
    id: Annotated[str, typer.Option("--id", help="The note's id.")],
    reviewer: Annotated[str, typer.Option(help="Who decides (stored with every decision).")],
    db: Annotated[Optional[str], db_option()] = None,
    accept: Annotated[Optional[list[str]], typer.Option(help="A suggested code to keep; repeatable.")] = None,
    reject: Annotated[Optional[list[str]],
                      typer.Option(help="A suggested (or added) code to remove; repeatable.")] = None,
    add: Annotated[Optional[list[str]], typer.Option(help="A code the model missed; repeatable.")] = None,
    done: Annotated[bool, typer.Option("--done",
                                       help="Finish the note (every suggestion must have a decision).")] = False,
    evidence: Annotated[Optional[list[str]],
                        typer.Option(help="CODE=START:END, the note's characters START to END that justify a code "
                                          "accepted or added here; repeatable, also for one code.")] = None,
) -> None:
    """Record a coder's decisions on one note (the same code path as the app's Review page)."""
    from clinicode.review import open_db

    spans = evidence_spans(evidence or [])
    with open_db(db, create=False) as rdb:
        r = rdb.decide(id, reviewer, accept=accept or [], reject=reject or [], add=add or [], done=done,
                       evidence=spans)
    marked = sum(len(v) for v in r["evidence"].values())
    typer.echo(f"note {r['note']}: accepted {len(r['accepted'])}, rejected "
               f"{len(r['rejected'])}, added {len(r['added'])}"
               f"{f' ({marked} evidence spans)' if marked else ''}"
               f"{'; finished' if r['done'] else ''}; codes now: {', '.join(r['codes']) or 'none'}")


@friendly
def review_next_cli(
    db: Annotated[Optional[str], db_option()] = None,
    reviewer: Annotated[Optional[str], typer.Option(help="Who reviews: notes others hold, and double-coded notes "
                                                         "not assigned to them, are left out.")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="How many notes to propose, best first.")] = 1,
    order: Annotated[str, typer.Option(help="teach (rare codes first, unlike the notes already finished and each "
                                            "other) or arrival (queue order).")] = "teach",
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
