"""`clinicode evaluate`: a checkpoint scored on a split of a prepared dataset, CAML-style metrics printed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from clinicode.cli.options import given, opt
from clinicode.cli.root import friendly
from clinicode.config import TrainConfig, default_of


@friendly
def evaluate_cli(
    checkpoint: Annotated[Path, typer.Option(help="Run folder (or its checkpoint/) from `clinicode train`.")],
    data: Annotated[Path, typer.Option(help="Prepared dataset folder.")],
    split: Annotated[str, typer.Option(help="train, dev or test.")] = "test",
    output: Annotated[Optional[Path], typer.Option(help="Write the metrics JSON here.")] = None,
    device: Annotated[Optional[str], opt("auto, cpu or cuda.", default_of(TrainConfig, "device"))] = None,
    map_without: Annotated[Optional[list[str]], typer.Option(
        help="Also report MAP without this code (repeatable), as CANTEMIST reported MAP without 8000/6.")] = None,
) -> None:
    """Score a split and print CAML-style metrics (tuned threshold and 0.5), then the shared tasks' MAP and
    span-and-code F1 (docs/metrics.md)."""
    from clinicode.evaluate import evaluate, format_table, outside_warning

    m = evaluate(checkpoint=checkpoint, data_dir=data, split=split, output=output, map_without=map_without or (),
                 **given(device=device))
    typer.echo(format_table(m))
    warning = outside_warning(m, m["n_labels"])
    if warning:
        typer.echo(warning, err=True)
    if m.get("in_sample_note"):
        typer.echo(m["in_sample_note"], err=True)
    if output:
        typer.echo(f"wrote {output}")
