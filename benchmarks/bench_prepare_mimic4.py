"""Benchmark `prepare` on full-size synthetic MIMIC-IV v2.2 + MIMIC-IV-Note v2.2: wall time and peak RSS (< 4 GB).

The synthetic folder (generated once, cached under --work-dir) holds every admission id of the published split files
in ../shared/data/mimic-splits plus --extra admissions in no list, with discharge notes padded to MIMIC-IV's mean of
~10,500 characters: about 378,000 discharge rows (the real table has 331,794) and 4.7 M diagnosis rows. Each protocol
below is prepared in a child process with its own files and options, so the published document counts are enforced;
peak RSS is that child's ru_maxrss. Writes its own section of BENCHMARKS.md.

    python benchmarks/bench_prepare_mimic4.py [--work-dir /tmp] [--extra 100000] [--regenerate] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import mark_own, publish, remove_own  # noqa: E402
from benchmarks.bench_prepare import MAX_RSS_MB, format_phases, run_prepare  # noqa: E402
from clinicode import __version__  # noqa: E402

SPLITS = ROOT.parent / "shared" / "data" / "mimic-splits"
REAL_CHARS = 10_500
PROTOCOLS = (  # (label, options) run against the same folder
    ("ICD-10 top 50 (MIMIC-IV-ICD)", {"icd_version": 10, "label_set": "top50",
                                      "splits_dir": SPLITS / "nguyen2023" / "icd10"}),
    ("ICD-9 full, codes in >= 10 admissions (Edin et al.)",
     {"icd_version": 9, "label_set": "full", "min_code_count": 10,
      "splits_file": SPLITS / "edin2023" / "mimiciv_icd9_split.csv"}),
)


def ensure_data(work: Path, extra: int, regenerate: bool) -> tuple[Path, dict]:
    from clinicode.synthetic.mimic4 import write_demo_mimic4

    folder = work / f"clinicode-bench-mimic4-extra{extra}"
    marker = folder / "GENERATED.json"
    if marker.is_file() and not regenerate:
        return folder, json.loads(marker.read_text())
    remove_own(folder, marks=("GENERATED.json",))
    lists = [SPLITS / "edin2023" / "mimiciv_icd9_split.csv", SPLITS / "edin2023" / "mimiciv_icd10_split.csv",
             SPLITS / "nguyen2023" / "icd9", SPLITS / "nguyen2023" / "icd10"]
    t0 = time.perf_counter()
    info = write_demo_mimic4(folder, n_admissions=extra, discharge_chars=REAL_CHARS, hadm_ids_from=lists, seed=0)
    info["generation_seconds"] = round(time.perf_counter() - t0, 1)
    marker.write_text(json.dumps(info, indent=2, default=str))  # after the atomic swap: marks a whole folder
    return folder, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--extra", type=int, default=100_000,
                    help="admissions in no split list (MIMIC-IV has ~100k without a note)")
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--keep-data", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    if not SPLITS.is_dir():
        raise SystemExit(f"{SPLITS} not found: the benchmark needs the published split files.")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    folder, info = ensure_data(args.work_dir, args.extra, args.regenerate)
    size_gb = sum(p.stat().st_size for p in folder.rglob("*.csv")) / 1e9
    rows, failed = [], []
    for label, options in PROTOCOLS:
        out = args.work_dir / f"{folder.name}-prepared"
        remove_own(out)
        summary, wall, peak_mb, phases = run_prepare(folder, out, {**options, "expect_published_counts": True})
        mark_own(out)
        print(f"{label}: {wall:.1f} s, peak RSS {peak_mb:,.0f} MB\n{format_phases(phases)}", flush=True)
        s = summary["splits"]
        rows.append(f"| {label} | {summary['protocol']} | {s['train']:,} / {s['dev']:,} / {s['test']:,} | "
                    f"{summary['n_labels']:,} | {wall:,.1f} s | {peak_mb:,.0f} MB | "
                    f"{'yes' if peak_mb < MAX_RSS_MB else '**NO**'} |")
        if peak_mb >= MAX_RSS_MB:
            failed.append(f"{label}: peak RSS {peak_mb:,.0f} MB")
        remove_own(out)
    if not args.keep_data:
        remove_own(folder, marks=("GENERATED.json",))
    rows_info = info["rows"]
    lines = [
        "## prepare (synthetic MIMIC-IV, `benchmarks/bench_prepare_mimic4.py`)", "",
        f"Synthetic MIMIC-IV (not MIMIC): every admission of the published split files plus {args.extra:,} in none; "
        f"{rows_info['discharge']:,} discharge rows (MIMIC-IV-Note has 331,794) of {info['mean_discharge_chars']:,.0f} "
        f"characters on average, {rows_info['diagnoses_icd']:,} diagnosis rows; {size_gb:.2f} GB of CSV, generated in "
        f"{info['generation_seconds']:,.0f} s. Each protocol's own files and options, so its published counts are "
        "enforced (the synthetic code vocabulary is small, so the code counts are not the "
        "published ones); prepare in a "
        f"child process, peak RSS its `ru_maxrss`. Limit: < {MAX_RSS_MB:,} MB.", "",
        "| protocol | reproduced | docs train / dev / test | codes | wall time | peak RSS | < 4 GB |",
        "|---|---|---|---|---|---|---|", *rows, "",
        f"{datetime.now(timezone.utc):%Y-%m-%d}; clinicode {__version__}, Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cores.",
    ]
    publish("prepare-mimic4", lines, write=not args.no_write)
    if failed:
        raise SystemExit("; ".join(failed))


if __name__ == "__main__":
    main()
