"""`clinicode compare`: two models (or two groups of seeds) on the same notes, with paired-bootstrap intervals."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from clinicode.cli.options import given, opt
from clinicode.cli.root import friendly
from clinicode.config import CompareConfig, TrainConfig, default_of


@friendly
def compare_cli(
    a: Annotated[list[Path], typer.Option("--a", metavar="RUN",
                                          help="Run folder of model A; repeat for several "
                                               "seeds (their mean is used).")],
    b: Annotated[list[Path], typer.Option("--b", metavar="RUN",
                                          help="Run folder of model B; repeat for several seeds.")],
    data: Annotated[Path, typer.Option(help="Prepared dataset folder.")],
    split: Annotated[str, typer.Option(help="train, dev or test.")] = "test",
    n_boot: Annotated[Optional[int], opt("Paired bootstrap resamples of the notes.",
                                         default_of(CompareConfig, "n_boot"))] = None,
    seed: Annotated[Optional[int], opt("Seed of the resampling.", default_of(CompareConfig, "seed"))] = None,
    output: Annotated[Optional[Path], typer.Option(help="Write the comparison JSON here.")] = None,
    device: Annotated[Optional[str], opt("auto, cpu or cuda.", default_of(TrainConfig, "device"))] = None,
) -> None:
    """Compare two models on the same notes: micro-F1 and macro-AUC differences with a paired-bootstrap interval."""
    from clinicode.evaluate import compare, format_comparison, outside_warning

    c = compare(runs_a=a, runs_b=b, data_dir=data, split=split, output=output, **given(n_boot=n_boot, seed=seed,
                                                                                       device=device))
    typer.echo(format_comparison(c))
    warning = outside_warning(c, len(c["codes"]))
    if warning:
        typer.echo(warning, err=True)
    if output:
        typer.echo(f"wrote {output}")
