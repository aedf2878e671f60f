"""Reproduce a published MIMIC coding protocol with LEAM: prepare -> train -> evaluate, one recipe in, one run out.

`python -m pipelines.reproduce --recipe NAME ...` (docs/reproducing.md); every step is a `clinicode.api` function."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from clinicode.api import (
    HEADLINE,
    PUBLISHED,
    ClinicodeError,
    ConfigError,
    TrainConfig,
    config_from_dict,
    evaluate,
    prepare_mimic,
    protocol_named,
    train,
    write_json_atomic,
)

CONFIGS = Path(__file__).parent / "configs"
RECIPES = {
    "mimic3-top50": "mimic3_top50_leam.json",
    "mimic3-full": "mimic3_full_leam.json",
    "mimic4-icd9-top50": "mimic4_icd9_top50_leam.json",
    "mimic4-icd10-top50": "mimic4_icd10_top50_leam.json",
    "mimic4-icd9-full": "mimic4_icd9_full_leam.json",
    "mimic4-icd10-full": "mimic4_icd10_full_leam.json",
}
KEYS = (*HEADLINE, "prec_at_8", "prec_at_15")  # full code sets are compared on P@8 and P@15 as well
_TOP = {"name", "version", "description", "protocol", "prepare", "train", "model", "paper"}


def load_recipe(recipe: str | Path) -> dict[str, Any]:
    """A recipe's config: a name from RECIPES or the path of a JSON file."""
    path = CONFIGS / RECIPES[recipe] if str(recipe) in RECIPES else Path(recipe)
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"recipe {recipe}: cannot read {path} ({err}); choose one of {', '.join(RECIPES)}.") from err
    unknown = sorted(set(config) - _TOP)
    if unknown:
        raise ConfigError(f"unknown top-level key {unknown[0]!r} in the pipeline config; known: "
                          f"{', '.join(sorted(_TOP))}.")
    return config


def run_pipeline(config: dict[str, Any], *, mimic_dir: Path, out: Path, splits_root: Path | None = None,
                 splits_dir: Path | None = None, note_dir: Path | None = None, overrides: dict[str, Any] | None = None,
                 progress: bool = True) -> dict[str, Any]:
    """Run prepare, train and evaluate into `out`; returns the report (also written to out/pipeline_report.json).

    CONFIG is a recipe (`load_recipe`) naming its protocol (clinicode/data/protocols.py pins the published document
    counts that `prepare` must reproduce, or stop). The report holds the counts, the test metrics at the tuned
    threshold and at 0.5, and the published figures when the recipe has some (papers' F1 figures are at 0.5).

    Args:
        splits_root: the folder the recipe's split paths are relative to; default the lists packaged with clinicode.
        splits_dir: a split folder given directly (overrides the recipe's, as mimic3_top50 does).
    """
    prep = dict(config.get("prepare", {}))
    for key in ("splits_dir", "splits_file"):
        if prep.get(key) is not None:
            prep[key] = Path(splits_root or PUBLISHED) / prep[key]
    if splits_dir is not None:
        prep.pop("splits_file", None)
        prep["splits_dir"] = splits_dir
    train_cfg = config_from_dict(TrainConfig, {**config.get("train", {}), **(overrides or {})},
                                 source="pipeline config 'train'")
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    summary = prepare_mimic(mimic_dir, data, note_dir=note_dir, **prep)
    train(out_dir=out, config=train_cfg, data_dir=data, model_options=config.get("model", {}), progress=progress)
    metrics = evaluate(checkpoint=out, data_dir=data, split="test", output=out / "metrics_test.json")
    protocol = protocol_named(config["protocol"]) if config.get("protocol") else None
    keys = [k for k in KEYS if k in metrics]
    report = {
        "config": config, "overrides": overrides or {}, "prepare": summary,
        "protocol": ({"name": protocol.name, "source": protocol.source,
                      "counts": protocol.counts} if protocol else None),
        "test": {k: metrics[k] for k in keys}, "test_threshold_0.5": {k: metrics["threshold_0.5"][k] for k in keys},
        "paper": config.get("paper", {}), "comparable": bool(summary.get("comparable")),
    }
    write_json_atomic(out / "pipeline_report.json", report)
    return report


def print_report(report: dict[str, Any], out: Path) -> None:
    # The papers' F1 figures are at threshold 0.5 (CAML's definition), so they sit beside clinicode's at 0.5; the
    # dev-tuned threshold's F1 is a third column. AUC and P@k do not depend on the threshold.
    print(f"{'metric':<12}{'t=0.5':>9}{'paper':>8}{'t=tuned':>10}")
    for k in report["test"]:
        paper = report["paper"].get(k)
        print(f"{k:<12}{report['test_threshold_0.5'][k]:>9.3f}{paper if paper is not None else float('nan'):>8.3f}"
              f"{report['test'][k]:>10.3f}")
    if not report["comparable"]:
        print("note: not the protocol's own split files and options, so not comparable with published numbers.")
    print(f"wrote {out}/pipeline_report.json")


def run_and_print(config_of: Any, out: Path, **kwargs: Any) -> int:
    """The command lines' common end: run the recipe (config_of() gives its config), print the report; 1 on error."""
    try:
        report = run_pipeline(config_of(), out=out, **kwargs)
    except (ClinicodeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print_report(report, out)
    return 0


def parse_sets(items: list[str]) -> dict[str, Any]:
    overrides = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", required=True, help=f"one of {', '.join(RECIPES)}, or a config JSON")
    ap.add_argument("--mimic-dir", type=Path, required=True)
    ap.add_argument("--note-dir", type=Path, default=None, help="MIMIC-IV-Note (the folder holding note/)")
    ap.add_argument("--splits-root", type=Path, default=None,
                    help="folder the recipe's split files are relative to (default: the published lists packaged "
                         "with clinicode, clinicode/data/split_lists)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a train option, e.g. --set epochs=2")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    return run_and_print(lambda: load_recipe(args.recipe), args.out, mimic_dir=args.mimic_dir, note_dir=args.note_dir,
                         splits_root=args.splits_root, overrides=parse_sets(args.set), progress=not args.no_progress)


if __name__ == "__main__":
    sys.exit(main())
