"""Benchmark `prepare_mimic` on a full-scale synthetic MIMIC folder (2,000,000 NOTEEVENTS rows by default).

Generates (or reuses) the folder under --work-dir, runs prepare in a child process, measures wall time and
peak RSS, prints a markdown table and updates its own section of BENCHMARKS.md.

    python benchmarks/bench_prepare.py [--work-dir /tmp] [--n-notes 2000000] [--regenerate]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from clinicode import __version__
from clinicode.data.synthetic import write_demo_mimic

ROOT = Path(__file__).resolve().parents[1]
CAML_IDS = ROOT.parent / "shared" / "data" / "caml-mimic-ids"
START, END = "<!-- bench:prepare:start -->", "<!-- bench:prepare:end -->"
MAX_RSS_MB = 4096

CHILD = """
import json, sys
from pathlib import Path
from clinicode.data.prepare import prepare_mimic
args = json.loads(sys.argv[1])
summary = prepare_mimic(Path(args["mimic_dir"]), Path(args["out_dir"]),
                        splits_dir=Path(args["splits_dir"]) if args["splits_dir"] else None,
                        chunksize=args["chunksize"])
print(json.dumps(summary))
"""


def ensure_data(work_dir: Path, n_notes: int, seed: int, regenerate: bool) -> tuple[Path, dict, float | None]:
    """Reuse the cached synthetic folder, or generate it with exactly `n_notes` NOTEEVENTS rows."""
    ids = CAML_IDS if CAML_IDS.is_dir() else None
    folder = work_dir / f"clinicode-bench-mimic-{n_notes}-seed{seed}{'-caml' if ids else ''}"
    marker = folder / "GENERATED.json"
    if marker.is_file() and not regenerate:
        return folder, json.loads(marker.read_text()), None
    shutil.rmtree(folder, ignore_errors=True)
    n_adm = 11_368 if ids is None else 2000
    # Dry run without other notes: the discharge-summary rows do not depend on n_other_notes.
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        n_discharge = write_demo_mimic(Path(tmp), n_admissions=n_adm, n_other_notes=0, seed=seed, hadm_ids_from=ids)["noteevents_rows"]
    t0 = time.perf_counter()
    info = write_demo_mimic(folder, n_admissions=n_adm, n_other_notes=max(0, n_notes - n_discharge), seed=seed, hadm_ids_from=ids)
    gen_s = time.perf_counter() - t0
    info["generation_seconds"] = round(gen_s, 1)
    marker.write_text(json.dumps(info, indent=2))
    return folder, info, gen_s


def run_prepare(mimic_dir: Path, out_dir: Path, chunksize: int) -> tuple[dict, float, float]:
    """Run prepare in a child process; return its summary, wall seconds and peak RSS in MB."""
    args = {"mimic_dir": str(mimic_dir), "out_dir": str(out_dir), "chunksize": chunksize,
            "splits_dir": str(CAML_IDS) if CAML_IDS.is_dir() else None}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"prepare failed with exit code {proc.returncode}")
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux reports KiB
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall, peak_mb


def update_markdown(path: Path, section: str) -> None:
    """Replace (or append) the text between this benchmark's markers, leaving other sections alone."""
    block = f"{START}\n{section.rstrip()}\n{END}"
    text = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp"), help="cache folder for the synthetic data")
    ap.add_argument("--n-notes", type=int, default=2_000_000, help="NOTEEVENTS rows")
    ap.add_argument("--chunksize", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--regenerate", action="store_true", help="ignore the cached folder")
    ap.add_argument("--markdown", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)

    folder, info, gen_s = ensure_data(args.work_dir, args.n_notes, args.seed, args.regenerate)
    size_mb = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
    out_dir = args.work_dir / f"{folder.name}-prepared"
    summary, wall, peak_mb = run_prepare(folder, out_dir, args.chunksize)
    splits = summary["splits"]
    row = (
        f"| {info['noteevents_rows']:,} | {size_mb:,.0f} MB | {splits['train']:,} / {splits['dev']:,} / {splits['test']:,} "
        f"| {args.chunksize:,} | {wall:,.1f} s | {peak_mb:,.0f} MB | "
        f"{'yes' if peak_mb < MAX_RSS_MB else '**NO**'} |"
    )
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    section = "\n".join([
        "## prepare (synthetic MIMIC-III, `benchmarks/bench_prepare.py`)",
        "",
        f"Synthetic data (not MIMIC), seed {args.seed}; generation took "
        f"{info.get('generation_seconds', gen_s or 0):,.0f} s (cached afterwards). prepare ran in a child process; "
        f"peak RSS from `getrusage(RUSAGE_CHILDREN)`. Limit: < {MAX_RSS_MB:,} MB.",
        "",
        "| NOTEEVENTS rows | input size | docs train / dev / test | chunksize | wall time | peak RSS | < 4 GB |",
        "|---|---|---|---|---|---|---|",
        row,
        "",
        f"{when}; clinicode {__version__}, Python {platform.python_version()}, pandas {pd.__version__}, "
        f"{platform.machine()}.",
    ])
    print(section)
    update_markdown(args.markdown, section)
    if peak_mb >= MAX_RSS_MB:
        raise SystemExit(f"peak RSS {peak_mb:,.0f} MB exceeds {MAX_RSS_MB:,} MB")


if __name__ == "__main__":
    main()
