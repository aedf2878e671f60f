"""`clinicode demo-data`: a synthetic MIMIC-III- or MIMIC-IV-shaped folder (no real patient data)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from clinicode.cli.options import given, opt
from clinicode.cli.root import friendly
from clinicode.config import DemoConfig, default_of
from clinicode.errors import ConfigError


@friendly
def demo_data_cli(
    out: Annotated[Path, typer.Option(help="Folder to write the synthetic MIMIC-shaped tables into.")],
    format: Annotated[str,
                      typer.Option(help="mimic3 (NOTEEVENTS, DIAGNOSES_ICD, ...) or "
                                        "mimic4 (hosp/ and note/).")] = "mimic3",
    n_admissions: Annotated[Optional[int], opt("Admissions to invent (with --hadm-ids-from: beyond the listed ones).",
                                               default_of(DemoConfig, "n_admissions"))] = None,
    n_other_notes: Annotated[Optional[int],
                             typer.Option(help="mimic3: extra non-discharge notes (to "
                                               "reach a full-size NOTEEVENTS).")] = None,
    seed: Annotated[Optional[int], opt("Random seed.", default_of(DemoConfig, "seed"))] = None,
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
    opts = given(n_admissions=n_admissions, seed=seed, discharge_chars=discharge_chars)
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
                                 **given(n_tail_codes=n_tail_codes), **opts)
    else:
        raise ConfigError(f"--format must be mimic3 or mimic4, got {format!r}.")
    typer.echo(f"wrote synthetic {'MIMIC-III' if format == 'mimic3' else 'MIMIC-IV'}-shaped tables to {out}: "
               + ", ".join(f"{k} {v:,}" for k, v in info.items() if isinstance(v, int) and not isinstance(v, bool)))
