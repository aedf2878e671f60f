"""`clinicode predict`: notes scored in batch, one output record per input record, in input order; its options in
four typed groups (files, scoring, suggestions, formats)."""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from clinicode.cli.options import formats_help, given, opt, option_groups
from clinicode.cli.root import friendly
from clinicode.config import PredictConfig, TrainConfig, default_of
from clinicode.errors import ConfigError, DataFormatError
from clinicode.formats import READERS, WRITERS, reader


@dataclass(frozen=True, kw_only=True)
class PredictFiles:
    """The checkpoint, and the notes in and the records out."""

    checkpoint: Annotated[Path, typer.Option(help="Run folder (or its checkpoint/) from `clinicode train`.")]
    input: Annotated[str,
                     typer.Option(help=".jsonl/.csv/.parquet with id and text, a .txt file, a folder of "
                                       ".txt, or - (JSONL on stdin).")]
    output: Annotated[str, typer.Option(help="JSONL (default) or .csv file, or - for stdout.")] = "-"


@dataclass(frozen=True, kw_only=True)
class ScoringOptions:
    """What each record lists, and how the batch runs: bad records, resume, shards, device, memory, progress."""

    top_k: Annotated[Optional[str], opt("Codes listed in `scores`: a number or 'all'.",
                                        default_of(PredictConfig, "top_k"))] = None
    threshold: Annotated[Optional[float], typer.Option(help="Override the checkpoint's tuned threshold.")] = None
    explain: Annotated[Optional[int], opt("Add the N highest-attention spans and per-code evidence.",
                                          default_of(PredictConfig, "explain"))] = None
    strict: Annotated[bool, typer.Option(help="Stop at the first bad record instead of reporting it.")] = False
    resume: Annotated[bool,
                      typer.Option(help="Continue an interrupted run from OUT.partial "
                                        "(same checkpoint and options).")] = False
    shard: Annotated[str, typer.Option(help="i/n: score only records at positions p with p % n == i.")] = "0/1"
    device: Annotated[Optional[str], opt("auto, cpu or cuda.", default_of(TrainConfig, "device"))] = None
    memory_budget: Annotated[Optional[int], opt("MB of scratch memory one batch and the word-code table may use.",
                                                default_of(PredictConfig, "memory_mb"))] = None
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True

    def config(self) -> PredictConfig:
        """--top-k, --explain, --threshold and --memory-budget checked by the one rule (serve's too)."""
        return PredictConfig.from_user(top_k=self.top_k, explain=self.explain, threshold=self.threshold,
                                       **given(memory_mb=self.memory_budget))


@dataclass(frozen=True, kw_only=True)
class SuggestOptions:
    """Codes the checkpoint lacks, suggested from their titles: the candidates and their hierarchy."""

    titles: Annotated[Optional[Path],
                      typer.Option(help="code<TAB>title file: the candidates for `suggested` (codes the checkpoint "
                                        "lacks whose title stands in a note; suggestions, not predictions). Default: "
                                        "the code system's own titles (ICD-10-CM's).")] = None
    tree: Annotated[Optional[Path],
                    typer.Option(help="code<TAB>tree numbers file (MeSH's mesh_tree.tsv): places the candidates in "
                                      "the hierarchy, so a trained code under one counts.")] = None
    suggest: Annotated[bool, typer.Option(help="List `suggested` codes from the titles (--no-suggest: none).")] = True

    def check(self) -> None:
        """--titles and --tree only with suggestions."""
        if (self.titles or self.tree) and not self.suggest:
            raise ConfigError("--titles and --tree are for suggestions; drop them or --no-suggest.")


@dataclass(frozen=True, kw_only=True)
class FormatOptions:
    """The output format (records, or a registered writer) and the input's reader."""

    format: Annotated[str, typer.Option("--format",
                                        help="records (JSONL, or CSV when --output ends in .csv), or an output format: "
                                             f"{formats_help(WRITERS)}.")] = "records"
    input_format: Annotated[Optional[str],
                            typer.Option(help=f"Input format (default: by --input's name): {formats_help(READERS)}."
                                         )] = None

    def check(self) -> None:
        """An unknown --format or --input-format stops here, before the checkpoint loads."""
        if self.format != "records" and self.format not in WRITERS:
            whole = " or ".join(["records", *(n for n, w in WRITERS.items() if not w.suffixes)])
            raise ConfigError(f"--format {self.format[:40]!r}: expected {whole}, or a file format: "
                              f"{', '.join(n for n, w in WRITERS.items() if w.suffixes)}.")
        if self.input_format is not None:
            reader(self.input_format)

    @property
    def output_format(self) -> Optional[str]:
        """The writer's name, or None for records."""
        return None if self.format == "records" else self.format


def parse_shard(shard: str) -> tuple[int, int]:
    """--shard i/n -> (i, n), with 0 <= i < n."""
    try:
        i, n = (int(x) for x in shard.split("/"))
    except ValueError:
        raise ConfigError(f"--shard {shard!r}: expected i/n with 0 <= i < n, e.g. 0/4.") from None
    if not 0 <= i < n:
        raise ConfigError(f"--shard {shard!r}: expected i/n with 0 <= i < n, e.g. 0/4.")
    return i, n


def _load_predictor(checkpoint: Path, scoring: ScoringOptions, suggest: SuggestOptions) -> Any:
    """The Predictor, with the titles and tree given; a titles file naming only the checkpoint's codes is refused."""
    from clinicode.codes.icd9 import load_descriptions_tsv
    from clinicode.codes.suggest import read_tree
    from clinicode.predict import Predictor

    titles, tree = suggest.titles, suggest.tree
    pred = Predictor.from_checkpoint(checkpoint, **given(device=scoring.device, memory_mb=scoring.memory_budget),
                                     titles=load_descriptions_tsv(titles, unique=True) if titles else None,
                                     tree=read_tree(tree) if tree else None, suggest=suggest.suggest)
    if titles and not pred.suggester:
        raise DataFormatError(f"--titles {titles}: no code with a title outside the checkpoint's {len(pred.codes):,} "
                              "codes; give code<TAB>title lines for codes the model was not trained on.")
    return pred


def _writer_context(pred: Any, formats: FormatOptions) -> Optional[dict[str, Any]]:
    """What a writer may name beyond the record (`Writer`'s context): FHIR's systems, the source; None for records."""
    if formats.output_format is None:
        return None
    from clinicode.fhir import code_systems, predictor_source

    # the same builder as `clinicode serve`; each Bundle names the checkpoint that suggested its codes
    return {"systems": code_systems(pred.codes, pred.code_system), "source": predictor_source(pred),
            "family": pred.code_system}


def _report(counts: dict[str, int], pred: Any) -> None:
    dup = counts.get("duplicate_ids", 0)
    typer.echo(f"scored {counts['scored']:,} notes, {counts['errors']:,} bad records (see their 'error' field), "
               f"{counts['skipped']:,} skipped as already done"
               + (f"; {dup:,} records repeat an earlier id (each has its own "
                  "output record, in input order)" if dup else ""),
               err=True)
    if pred.plan is not None:
        typer.echo(pred.plan.summary(), err=True)


@friendly
@option_groups
def predict_cli(files: PredictFiles, scoring: ScoringOptions, suggest: SuggestOptions,
                formats: FormatOptions) -> None:
    """Score notes in batch: one output record per input record, in input order."""
    from clinicode.predict_io import predict_file

    formats.check()
    opts = scoring.config()
    suggest.check()
    pred = _load_predictor(files.checkpoint, scoring, suggest)
    context = _writer_context(pred, formats)
    counts = predict_file(pred, input=files.input, output=files.output, top_k=opts.top_k, threshold=opts.threshold,
                          explain=opts.explain, strict=scoring.strict, resume=scoring.resume,
                          shard=parse_shard(scoring.shard), progress=scoring.progress and sys.stderr.isatty(),
                          input_format=formats.input_format, output_format=formats.output_format, context=context)
    _report(counts, pred)
