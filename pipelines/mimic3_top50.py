"""Reproduce the LEAM paper's MIMIC-III top-50 row: prepare -> train -> evaluate, one config in, one run out.

    python -m pipelines.mimic3_top50 --mimic-dir MIMIC --splits-dir ../shared/data/caml-mimic-ids --out runs/mimic3_leam

Orchestration only: every step is a public clinicode function. The config (pipelines/configs/*.json) is copied
into the run folder with the results and the paper's numbers side by side (RUN/pipeline_report.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from clinicode.artifacts import write_json_atomic
from clinicode.config import TrainConfig, config_from_dict
from clinicode.data.prepare import prepare_mimic
from clinicode.errors import ClinicodeError, ConfigError
from clinicode.evaluate import evaluate, format_table
from clinicode.metrics import HEADLINE
from clinicode.train import train

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "mimic3_top50_leam.json"
_KEYS = HEADLINE  # the paper's columns


def run_pipeline(config: dict[str, Any], *, mimic_dir: Path, out: Path, splits_dir: Path | None,
                 overrides: dict[str, Any] | None = None, progress: bool = True) -> dict[str, Any]:
    """Run prepare, train and evaluate into `out`; returns the report (also written to out/pipeline_report.json)."""
    unknown = sorted(set(config) - {"name", "version", "description", "prepare", "train", "model", "paper"})
    if unknown:
        raise ConfigError(f"unknown top-level key {unknown[0]!r} in the pipeline config; known: prepare, train, model, paper.")
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    summary = prepare_mimic(mimic_dir, data, splits_dir=splits_dir, **config.get("prepare", {}))
    train_cfg = config_from_dict(TrainConfig, {**config.get("train", {}), **(overrides or {})}, source="pipeline config 'train'")
    train(out_dir=out, config=train_cfg, data_dir=data, model_options=config.get("model", {}), progress=progress)
    metrics = evaluate(checkpoint=out, data_dir=data, split="test", output=out / "metrics_test.json")
    paper = config.get("paper", {})
    report = {
        "config": config, "overrides": overrides or {}, "prepare": summary,
        "test": {k: metrics[k] for k in _KEYS}, "test_threshold_0.5": {k: metrics["threshold_0.5"][k] for k in _KEYS},
        "paper": paper, "comparable": bool(summary.get("comparable")),
    }
    write_json_atomic(out / "pipeline_report.json", report)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mimic-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--splits-dir", type=Path, default=None, help="CAML's split-id folder (needed for comparable numbers)")
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a train option, e.g. --set epochs=2")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        config = json.loads(args.config.read_text(encoding="utf-8"))
        overrides = {}
        for item in args.set:
            key, _, value = item.partition("=")
            try:
                overrides[key] = json.loads(value)
            except json.JSONDecodeError:
                overrides[key] = value
        report = run_pipeline(config, mimic_dir=args.mimic_dir, out=args.out, splits_dir=args.splits_dir,
                              overrides=overrides, progress=not args.no_progress)
    except (ClinicodeError, OSError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    # The paper's F1 figures are at threshold 0.5 (CAML's definition), so they sit beside clinicode's at 0.5; the
    # dev-tuned threshold's F1 is printed as a third column. AUC and P@5 do not depend on the threshold.
    print(f"{'metric':<12}{'t=0.5':>9}{'paper':>8}{'t=tuned':>10}")
    for k in _KEYS:
        paper = report["paper"].get(k)
        print(f"{k:<12}{report['test_threshold_0.5'][k]:>9.3f}{paper if paper is not None else float('nan'):>8.3f}"
              f"{report['test'][k]:>10.3f}")
    if not report["comparable"]:
        print("note: not CAML's top-50 split files, so not comparable with the paper's numbers.")
    print(f"wrote {args.out}/pipeline_report.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
