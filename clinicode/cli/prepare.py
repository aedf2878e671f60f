"""`clinicode prepare`: MIMIC-III or MIMIC-IV tables -> a prepared dataset; its summary, also printed by
`train --mimic-dir`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from clinicode.cli.options import given, opt
from clinicode.cli.root import friendly
from clinicode.config import PrepareConfig, default_of

LABEL_SET_HELP = ("caml50 (CAML's pinned MIMIC-III list), top50 (the splits folder's "
                  "top50_codes.txt, else the 50 most "
                  "frequent), frequent (--top-k most frequent) or full (every code in >= "
                  "--min-code-count admissions). "
                  "Default: caml50 for MIMIC-III, top50 for MIMIC-IV.")


def print_summary(summary: dict[str, Any]) -> None:
    """What `prepare_mimic` made: source, documents per split, labels, what was dropped or not found."""
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


@friendly
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
    label_set: Annotated[Optional[str], typer.Option(help=LABEL_SET_HELP)] = None,
    top_k: Annotated[Optional[int], opt("K for --label-set frequent.", default_of(PrepareConfig, "top_k"))] = None,
    min_code_count: Annotated[Optional[int],
                              opt("--label-set full: keep codes seen in at least this many admissions with a note.",
                                  default_of(PrepareConfig, "min_code_count"))] = None,
) -> None:
    """Turn MIMIC-III or MIMIC-IV tables into a prepared dataset (one document per admission)."""
    from clinicode.data.prepare import prepare_mimic

    summary = prepare_mimic(mimic_dir, out, note_dir=note_dir, icd_version=icd_version, splits_dir=splits_dir,
                            splits_file=splits_file, **given(label_set=label_set, top_k=top_k,
                                                             min_code_count=min_code_count))
    print_summary(summary)
    typer.echo(f"wrote {out}")
