"""Regenerate every section of BENCHMARKS.md: `python benchmarks/run_all.py [--quick]`.

Runs each benchmark script in turn (each rewrites only its own section). Expect about an hour on a 2-core
machine for the full set (the accuracy runs dominate); --quick runs the short variants only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCRIPTS = [
    ("bench_prepare.py", [], ["--n-notes", "200000"]),
    ("bench_prepare_mimic4.py", [], ["--extra", "1000"]),
    ("bench_predict.py", [], ["--notes", "600", "--repeat", "2"]),
    ("bench_train.py", [], ["--quick", "--steps", "3"]),
    ("bench_scale.py", [], ["--codes", "50", "--no-w2v"]),
    ("bench_accuracy.py", [], None),
    ("bench_app.py", [], ["--repeat", "1", "--notes", "5"]),
    ("bench_app_load.py", [], None),
    ("bench_serve.py", [], ["--requests", "64", "--repeat", "1"]),
    ("bench_review.py", [], ["--notes", "200", "--repeat", "1"]),
    ("bench_compare.py", [], ["--notes", "500", "--codes", "500", "--repeat", "1"]),
    ("bench_suggestions.py", [], []),
    ("bench_matching.py", ["accuracy"], None),
    ("bench_matching.py", ["speed"], ["speed"]),
    ("bench_review_learning.py", ["--codes", "top50", "all"], ["--data", "ncbi", "--seeds", "0"]),
    ("bench_review_learning.py", ["--data", "cmc2007", "--codes", "all"], None),
    ("bench_review_confirm.py", [], None),
    ("bench_review_retrain.py", ["--model", "leam"], ["--model", "tfidf-lr"]),
    ("bench_review_retrain.py", ["--model", "fused"], None),
    ("bench_review_retrain.py", ["--model", "fused", "--codes", "all"], None),
    ("bench_review_new_codes.py", ["--set", "ncbi"], None),
    ("bench_review_new_codes.py", ["--set", "cantemist"], None),
    ("bench_review_new_codes.py", ["--set", "bc5cdr"], None),
    ("bench_review_loop.py", ["--sets", "cmc2007", "--seeds", "0", "--budgets", "10", "30", "60", "100"], None),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    failed = []
    for script, full, quick in SCRIPTS:
        if not (HERE / script).is_file():  # a checkout without one benchmark still regenerates the others
            print(f"skipped {script}: not found in {HERE}; its section of BENCHMARKS.md is left as it is",
                  file=sys.stderr)
            continue
        if args.quick and quick is None:
            continue
        cmd = [sys.executable, str(HERE / script), *(quick if args.quick else full)]
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            failed.append(script)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
