"""Benchmark `prepare_mimic` on full-scale synthetic MIMIC folders (2,000,000 NOTEEVENTS rows by default).

Two inputs, both generated once and cached under --work-dir:
  * realistic (default on): real MIMIC-III size, ~4 GB: ~60k discharge summaries of ~10 KB and other notes of
    ~1.7 KB on average (write_demo_mimic(discharge_chars=10_000, other_chars=1_700)), as many admissions as
    MIMIC has discharge summaries for;
  * short text: the same row count with the short template notes (~330 MB), for comparison.
Each prepare runs in a child process; wall time and peak RSS (ru_maxrss of that child, via os.wait4) are
measured, RSS is also sampled over time (psutil) to show which phase peaks. Prints a markdown table and
updates its own section of BENCHMARKS.md. With CAML's id lists in ../shared/data/caml-mimic-ids they are used
as hadm_ids_from and --splits-dir, so the prepared counts are 8,066 / 1,573 / 1,729.

    python benchmarks/bench_prepare.py [--work-dir /tmp] [--n-notes 2000000] [--no-realistic] [--regenerate]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from clinicode import __version__
from clinicode.synthetic.mimic3 import REAL_DISCHARGE_CHARS, REAL_OTHER_CHARS, write_demo_mimic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import mark_own, remove_own  # noqa: E402  (never delete what this script did not create)

CAML_IDS = ROOT.parent / "shared" / "data" / "caml-mimic-ids"
START, END = "<!-- bench:prepare:start -->", "<!-- bench:prepare:end -->"
MAX_RSS_MB = 4096
# MIMIC-III v1.4: 2,083,180 NOTEEVENTS rows, 59,652 discharge-summary rows for 52,726 admissions.
REAL_NOTES, REAL_DISCHARGE_ROWS = 2_083_180, 59_652
FREE_DISK_MARGIN = 1.5  # need this many times the expected folder size free before generating

CHILD = """
import json, logging, sys, time
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="@%(created).3f %(name)s: %(message)s")
from clinicode.data.prepare import prepare_mimic
args = json.loads(sys.argv[1])
print(f"@{time.time():.3f} start", file=sys.stderr, flush=True)
kw = {k: (Path(v) if k.endswith(("_dir", "_file")) and v else v) for k, v in args["options"].items()}
summary = prepare_mimic(Path(args["mimic_dir"]), Path(args["out_dir"]), **kw)
print(f"@{time.time():.3f} prepare_mimic returned", file=sys.stderr, flush=True)
print(json.dumps(summary))
"""


def admissions_for(n_notes: int, realistic: bool, ids: Path | None) -> int:
    """n_admissions for write_demo_mimic: the old fixed size, or enough for MIMIC's discharge-summary share."""
    if not realistic:
        return 11_368 if ids is None else 2000
    # write_demo_mimic: ~1.2 discharge rows per admission with a summary; without ids 95% of admissions have
    # one; with ids all listed ones do and n_admissions // 5 extra admissions are added, 75% with one.
    with_summary = REAL_DISCHARGE_ROWS * n_notes / REAL_NOTES / 1.2
    if ids is None:
        return max(1, round(with_summary / 0.95))
    return max(100, 5 * round(max(0.0, with_summary - 11_368) / 0.75))


def ensure_data(work_dir: Path, n_notes: int, seed: int, regenerate: bool, realistic: bool) -> tuple[Path, dict, bool]:
    """Reuse the cached synthetic folder, or generate it with exactly `n_notes` NOTEEVENTS rows.

    Returns (folder, info written to GENERATED.json, whether it was generated now).
    """
    ids = CAML_IDS if CAML_IDS.is_dir() else None
    folder = work_dir / (f"clinicode-bench-mimic-{n_notes}-seed{seed}"
                         f"{'-caml' if ids else ''}{'-realistic' if realistic else ''}")
    params = {"n_admissions": admissions_for(n_notes, realistic, ids), "seed": seed,
              "hadm_ids_from": str(ids) if ids else None,
              "discharge_chars": REAL_DISCHARGE_CHARS if realistic else None,
              "other_chars": REAL_OTHER_CHARS if realistic else None}
    marker = folder / "GENERATED.json"
    if marker.is_file() and not regenerate:
        info = json.loads(marker.read_text())
        if info.get("params", params) == params and info.get("noteevents_rows") == n_notes:
            return folder, info, False
    remove_own(folder, marks=("GENERATED.json",))
    if realistic:
        need = 4.1e9 * n_notes / REAL_NOTES * FREE_DISK_MARGIN
        free = shutil.disk_usage(work_dir).free
        if free < need:
            raise SystemExit(f"{work_dir} has {free / 2**30:.1f} GiB free; the realistic folder "
                             f"needs ~{need / 2**30:.1f} GiB "
                             "(use --work-dir elsewhere or --no-realistic)")
    kw = {k: v for k, v in params.items() if k != "hadm_ids_from"} | {"hadm_ids_from": ids}
    # Dry run with neither other notes nor padding: the discharge-summary rows do not depend on them.
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        dry = kw | {"discharge_chars": None, "other_chars": None}
        n_discharge = write_demo_mimic(Path(tmp), n_other_notes=0, **dry)["noteevents_rows"]
    t0 = time.perf_counter()
    info = write_demo_mimic(folder, n_other_notes=max(0, n_notes - n_discharge), **kw)
    info["generation_seconds"] = round(time.perf_counter() - t0, 1)
    info["params"] = params
    info["noteevents_bytes"] = Path(info["files"]["NOTEEVENTS"]).stat().st_size
    marker.write_text(json.dumps(info, indent=2))
    return folder, info, True


class RssSampler(threading.Thread):
    """Samples a process's RSS (psutil) every `every` seconds: [(unix time, MB)]."""

    def __init__(self, pid: int, every: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.every, self.samples = pid, every, []
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            import psutil
            proc = psutil.Process(self.pid)
            while not self._stop_event.is_set():
                self.samples.append((time.time(), proc.memory_info().rss / 2**20))
                time.sleep(self.every)
        except Exception:  # the process ended or psutil is missing: sampling is optional
            return

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def run_prepare(mimic_dir: Path, out_dir: Path, options: dict) -> tuple[dict, float, float, list[str]]:
    """Run prepare_mimic(mimic_dir, out_dir, **options) in a child process; return its summary, wall seconds, peak
    RSS in MB and an RSS-by-phase log."""
    args = {"mimic_dir": str(mimic_dir), "out_dir": str(out_dir),
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in options.items()}}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], stdout=out, stderr=err, text=True)
        sampler = RssSampler(proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not the max over all children
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.stop()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        sys.stderr.write(stderr[-3000:])
        raise SystemExit(f"prepare failed with exit code {proc.returncode}")
    peak_mb = usage.ru_maxrss / 1024  # Linux reports KiB
    return json.loads(stdout.strip().splitlines()[-1]), wall, peak_mb, phase_log(stderr, sampler.samples)


def phase_log(stderr: str, samples: list[tuple[float, float]]) -> list[tuple[float, float | None, str, str]]:
    """Each logged step of prepare: (seconds from start, highest sampled RSS since the previous step, previous,
    step)."""
    events = []
    for line in stderr.splitlines():
        if line.startswith("@"):
            stamp, _, msg = line[1:].partition(" ")
            events.append((float(stamp), msg[:110]))
    if not events:
        return []
    out, prev, prev_msg = [], events[0][0], ""
    for when, msg in events:
        peak = max((mb for t, mb in samples if prev <= t <= when), default=None)
        out.append((when - events[0][0], peak, prev_msg, msg))
        prev, prev_msg = when, msg
    return out


def format_phases(phases) -> str:
    return "\n".join(f"  +{t:7.1f} s  max sampled RSS {'-' if mb is None else f'{mb:,.0f}':>6} MB "
                     f"since previous line | {msg}"
                     for t, mb, _, msg in phases)


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
    ap.add_argument("--realistic", action=argparse.BooleanOptionalAction, default=True,
                    help="also benchmark real-size notes (~4 GB at 2M rows; default on)")
    ap.add_argument("--regenerate", action="store_true", help="ignore the cached folders")
    ap.add_argument("--keep-data", action=argparse.BooleanOptionalAction, default=True,
                    help="keep the generated folders as a cache (--no-keep-data deletes them afterwards)")
    ap.add_argument("--markdown", type=Path, default=ROOT / "BENCHMARKS.md")
    args = ap.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)

    rows, failed, peak_note = [], [], ""
    for realistic in ([True, False] if args.realistic else [False]):
        folder, info, fresh = ensure_data(args.work_dir, args.n_notes, args.seed, args.regenerate, realistic)
        size_gb = sum(p.stat().st_size for p in folder.iterdir()) / 1e9
        out_dir = args.work_dir / f"{folder.name}-prepared"
        summary, wall, peak_mb, phases = run_prepare(folder, out_dir, {
            "chunksize": args.chunksize, "splits_dir": CAML_IDS if CAML_IDS.is_dir() else None})
        mark_own(out_dir)
        splits = summary["splits"]
        label = "real-size text" if realistic else "short text"
        print(f"{label}: {folder} ({size_gb:.2f} GB, generated in {info.get('generation_seconds', 0):.0f} s"
              f"{'' if fresh else ', cached'}); prepare {wall:.1f} s, peak RSS {peak_mb:,.0f} MB", flush=True)
        print(format_phases(phases), flush=True)
        top = max((p for p in phases if p[1] is not None), key=lambda p: p[1], default=None)
        if realistic and top is not None:
            where = ("after the NOTEEVENTS pass, while the discharge summaries are sorted and joined per admission "
                     "(`prepare._join_notes`), labelled, split and written" if "NOTEEVENTS" in top[2]
                     else f"before the log line \"{top[3][:60]}\"")
            peak_note = (f"Real size: the highest sampled RSS ({top[1]:,.0f} MB, psutil every 0.1 s) is reached "
                         f"{where}.")
        text = (f"~{REAL_DISCHARGE_CHARS / 1000:g} KB / ~{REAL_OTHER_CHARS / 1000:g} KB" if realistic
                else "~1 KB / ~50 B (templates)")
        rows.append(
            f"| {label} | {info['noteevents_rows']:,} | {info['discharge_summary_rows']:,} | "
            f"{text} | {size_gb:,.2f} GB "
            f"| {info.get('generation_seconds', 0):,.0f} s | {splits['train']:,} / "
            f"{splits['dev']:,} / {splits['test']:,} "
            f"| {args.chunksize:,} | {wall:,.1f} s | {peak_mb:,.0f} MB | "
            f"{'yes' if peak_mb < MAX_RSS_MB else '**NO**'} |"
        )
        if peak_mb >= MAX_RSS_MB:
            failed.append(f"{label}: peak RSS {peak_mb:,.0f} MB exceeds {MAX_RSS_MB:,} MB")
        if not args.keep_data:
            remove_own(out_dir)
            remove_own(folder, marks=("GENERATED.json",))

    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    split_note = ("CAML's top-50 id lists as `hadm_ids_from` and `--splits-dir`" if CAML_IDS.is_dir()
                  else "hash split (no CAML id lists found)")
    section = "\n".join([
        "## prepare (synthetic MIMIC-III, `benchmarks/bench_prepare.py`)",
        "",
        f"Synthetic data (not MIMIC), seed {args.seed}, {split_note}. \"real-size text\" pads the notes to "
        f"MIMIC-III's sizes (discharge summaries ~{REAL_DISCHARGE_CHARS:,} characters on average, other notes "
        f"~{REAL_OTHER_CHARS:,}; the real NOTEEVENTS.csv is ~4 GB for 2,083,180 rows) and has about as many "
        "discharge summaries as MIMIC (59,652); \"short text\" keeps the template notes. Generation is cached. "
        "prepare ran in a child process; peak RSS is that child's `ru_maxrss` (`os.wait4`). "
        f"Limit: < {MAX_RSS_MB:,} MB.",
        "",
        "| input | NOTEEVENTS rows | discharge rows | mean text (discharge / other) | input size | generation "
        "| docs train / dev / test | chunksize | wall time | peak RSS | < 4 GB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        *([peak_note, ""] if peak_note else []),
        f"{when}; clinicode {__version__}, Python {platform.python_version()}, pandas {pd.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} cores.",
    ])
    print(section)
    update_markdown(args.markdown, section)
    if failed:
        raise SystemExit("; ".join(failed))


if __name__ == "__main__":
    main()
