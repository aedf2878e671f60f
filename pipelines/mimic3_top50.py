"""Reproduce the LEAM paper's MIMIC-III top-50 row: the `mimic3-top50` recipe of pipelines/reproduce.py.

Its own command (`python -m pipelines.mimic3_top50`), the paper's row being the anchor; docs/reproducing.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clinicode.api import CAML_IDS
from pipelines.reproduce import CONFIGS, RECIPES, load_recipe, parse_sets, run_and_print

DEFAULT_CONFIG = CONFIGS / RECIPES["mimic3-top50"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mimic-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--splits-dir", type=Path, default=None,
                    help="CAML's split-id folder (default: the copy packaged with clinicode, when the data holds "
                         f"MIMIC-III's own admissions: {CAML_IDS.name}; other data is split by patient, "
                         "not comparable)")
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a train option, e.g. --set epochs=2")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    def config() -> dict:
        cfg = load_recipe(args.config)
        cfg.setdefault("prepare", {}).pop("splits_dir", None)  # only --splits-dir decides, as before
        return cfg

    return run_and_print(config, args.out, mimic_dir=args.mimic_dir, splits_dir=args.splits_dir,
                         overrides=parse_sets(args.set), progress=not args.no_progress)


if __name__ == "__main__":
    sys.exit(main())
