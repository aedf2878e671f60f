"""Retraining from decisions, measured: `review retrain` from 50 decisions against a fresh `train` on the same notes,
on bc5cdr.

    python benchmarks/bench_review_retrain.py [--decisions 50] [--base-share 0.5] [--model fused] [--seed 0]
        [--epochs N] [--sample N] [--start auto|warm|fresh] [--codes top50|all]
        [--work-dir /tmp/clinicode-bench-retrain] [--no-write]

../shared/data/bc5cdr-disease-mesh with the 50 codes of most training notes (labels.json; notes without one of them
dropped from every split, as `train --top-k 50` drops them), or every code (--codes all). --decisions training notes
(a seeded draw) are held out:
the base run trains on a seeded --base-share of the others; the held-out notes are queued with it (`review queue`), a
simulated coder decides them by their gold codes and gold evidence spans (`review decide --evidence`), and `review
retrain` makes a new run from those decisions. The full run is a fresh `train` on the same notes as the retrain (the
base's and the decided ones); beside it a `train` on every training note (the base's, the decided and the rest).
Times are whole commands (`train`, `review retrain`), each a fresh process, wall and CPU (user + system of the
child); test micro- and macro-F1 at each run's dev-tuned threshold. The retrain's options are the product's defaults
unless --epochs, --sample or --start are given. The full, every-note and base runs are kept in --work-dir and reused;
each retrain writes a new database and run (nothing is deleted).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine_line, publish  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "bc5cdr-disease-mesh"


def _rows(split: str) -> list[dict]:
    with open(DATA / f"{split}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write(folder: Path, splits: dict[str, list[dict]], codes: list[str], titles: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    keep = set(codes)
    for name, rows in splits.items():
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                labels = [c for c in r["labels"] if c in keep]
                if labels:      # the coders' evidence spans go with the note (the fused model learns from them)
                    spans = [m for m in r.get("evidence") or [] if m["code"] in keep]
                    f.write(json.dumps({"id": r["id"], "text": r["text"], "labels": labels, "evidence": spans})
                            + "\n")
    (folder / "labels.json").write_text(json.dumps([{"code": c, "description": titles.get(c, "")} for c in codes]))


def _cli(*args: object) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child process, stdout) of one `clinicode` command."""
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([sys.executable, "-m", "clinicode", *map(str, args)], capture_output=True, text=True,
                         cwd=ROOT)
    took, c1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode:
        raise SystemExit(f"clinicode {' '.join(map(str, args[:2]))} failed:\n{res.stderr[-3000:]}")
    return took, (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime), res.stdout


def _f1(run: Path) -> tuple[float, float]:
    m = json.loads((run / "checkpoint" / "metrics_test.json").read_text())
    return m["f1_micro"], m["f1_macro"]


def _train(run: Path, data: Path, model: str, seed: int, epochs: int | None) -> tuple[float, float]:
    """(wall, CPU) seconds of `train` (cached in RUN/seconds.json)."""
    marker = run / "seconds.json"
    if marker.exists():
        t = json.loads(marker.read_text())
        return t["seconds"], t.get("cpu", float("nan"))
    cap = ["--epochs", epochs] if epochs and model != "tfidf-lr" else []
    took, cpu, _ = _cli("train", "--data", data, "--out", run, "--model", model, "--seed", seed, "--device", "cpu",
                        "--no-progress", "--descriptions", DATA / "descriptions.tsv", *cap)
    marker.write_text(json.dumps({"seconds": took, "cpu": cpu}))
    return took, cpu


def _decide(db: Path, held: list[dict], codes: list[str]) -> None:
    """The simulated coder: every held-out note decided by its gold codes, with their gold evidence spans."""
    from clinicode.review import open_db

    with open_db(db) as rdb:
        for r in held:
            gold = set(r["labels"]) & set(codes)
            suggested = {s["code"] for s in rdb.note(r["id"])["suggestions"]}
            spans: dict[str, list[tuple[int, int]]] = {}   # the coder marks the gold evidence of each code kept
            for m in r.get("evidence") or []:
                if m["code"] in gold:
                    spans.setdefault(m["code"], []).append((int(m["start"]), int(m["end"])))
            rdb.decide(r["id"], "simulated-coder", accept=sorted(suggested & gold), reject=sorted(suggested - gold),
                       add=sorted(gold - suggested), done=True, evidence=spans)


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decisions", type=int, default=50)
    ap.add_argument("--base-share", type=float, default=0.5, help="share of the other training notes the base saw")
    ap.add_argument("--model", default="fused")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=None, help="review retrain --epochs (default: the product's)")
    ap.add_argument("--sample", type=int, default=None, help="review retrain --sample (default: every note)")
    ap.add_argument("--start", default="auto", choices=["auto", "warm", "fresh"])
    ap.add_argument("--train-epochs", type=int, default=None,
                    help="cap the full and base trains' epochs (default: train's own, with early stopping)")
    ap.add_argument("--codes", default="top50", choices=["top50", "all"])
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-retrain"))
    ap.add_argument("--no-write", action="store_true")
    return ap.parse_args()


def main() -> None:
    a = _args()
    work = a.work_dir / (f"{a.model}-d{a.decisions}-b{a.base_share:g}-s{a.seed}"
                         f"{f'-cap{a.train_epochs}' if a.train_epochs else ''}{'-all' if a.codes == 'all' else ''}")
    train, dev, test = _rows("train"), _rows("dev"), _rows("test")
    count = collections.Counter(c for r in train for c in r["labels"])
    codes = [c for c, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))][:50 if a.codes == "top50" else None]
    titles = {}
    for line in (DATA / "descriptions.tsv").read_text(encoding="utf-8").splitlines():
        code, _, title = line.partition("\t")
        titles[code] = title
    eligible = [r for r in train if set(r["labels"]) & set(codes)]
    rng = random.Random(a.seed)
    held = rng.sample(eligible, a.decisions)
    held_ids = {r["id"] for r in held}
    rest = [r for r in eligible if r["id"] not in held_ids]
    base_rows = sorted(rng.sample(rest, round(len(rest) * a.base_share)), key=lambda r: r["id"])
    _write(work / "full-data", {"train": base_rows + held, "dev": dev, "test": test}, codes, titles)
    _write(work / "base-data", {"train": base_rows, "dev": dev, "test": test}, codes, titles)
    _write(work / "every-data", {"train": sorted(eligible, key=lambda r: r["id"]), "dev": dev, "test": test}, codes,
           titles)
    full_s, full_cpu = _train(work / "full", work / "full-data", a.model, a.seed, a.train_epochs)
    every_s, every_cpu = _train(work / "every", work / "every-data", a.model, a.seed, a.train_epochs)
    base_s, _ = _train(work / "base", work / "base-data", a.model, a.seed, a.train_epochs)
    notes = work / "held.jsonl"
    notes.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in held))
    stamp = time.strftime("%Y%m%d-%H%M%S")  # a new database and run each time: nothing under --work-dir is deleted
    db = work / f"review-{stamp}.sqlite"
    _cli("review", "queue", "--checkpoint", work / "base", "--input", notes, "--db", db)
    _decide(db, held, codes)
    out = work / f"retrained-{a.start}-e{a.epochs}-n{a.sample}-{stamp}"
    given = [*(["--epochs", a.epochs] if a.epochs else []), *(["--sample", a.sample] if a.sample is not None else [])]
    retrain_s, retrain_cpu, said = _cli("review", "retrain", "--checkpoint", work / "base", "--data",
                                        work / "base-data", "--out", out, "--db", db, "--start", a.start, *given,
                                        "--seed", a.seed, "--device", "cpu")
    (full, full_ma), (base, base_ma), (new, new_ma) = _f1(work / "full"), _f1(work / "base"), _f1(out)
    every, every_ma = _f1(work / "every")
    said = said.strip().splitlines()[-1]
    how = said[said.index(" (") + 2:said.index(") -> ")]   # what the command says it did
    lines = [
        f"### retrain from {a.decisions} decisions, {a.model} (`benchmarks/bench_review_retrain.py --model {a.model} "
        f"--base-share {a.base_share:g} --start {a.start} --seed {a.seed}"
        f"{' --codes all' if a.codes == 'all' else ''}{f' --epochs {a.epochs}' if a.epochs else ''}"
        f"{f' --sample {a.sample}' if a.sample is not None else ''}"
        f"{f' --train-epochs {a.train_epochs}' if a.train_epochs else ''}`)",
        "",
        f"bc5cdr-disease-mesh, {'every code' if a.codes == 'all' else 'the 50 codes of most training notes'}; "
        f"the base saw {len(base_rows)} training notes ({a.base_share:g} of those not held out); {a.decisions} more "
        f"were decided by a simulated coder (their gold codes and evidence spans) on the base run's suggestions. "
        f"Whole commands, fresh processes{f'; trains capped at {a.train_epochs} epochs' if a.train_epochs else ''}. "
        f"{machine_line()}",
        "",
        "| run | trained on | wall s | CPU s | test micro-F1 | test macro-F1 |",
        "|---|---|---:|---:|---:|---:|",
        f"| fresh `train` | base + the {a.decisions} decided notes | {full_s:.1f} | {full_cpu:.1f} | {full:.4f} | "
        f"{full_ma:.4f} |",
        f"| `train` on every note | all {len(eligible)} training notes | {every_s:.1f} | {every_cpu:.1f} | "
        f"{every:.4f} | {every_ma:.4f} |",
        f"| base `train` | {len(base_rows)} notes | {base_s:.1f} | | {base:.4f} | {base_ma:.4f} |",
        f"| `review retrain` ({how}) | base + {a.decisions} decisions | {retrain_s:.1f} | {retrain_cpu:.1f} | "
        f"{new:.4f} | {new_ma:.4f} |",
        "",
        f"Retrain / fresh train CPU: {retrain_cpu / full_cpu:.2f} (goal <= 0.15); retrain - fresh train: micro-F1 "
        f"{new - full:+.4f}, macro-F1 {new_ma - full_ma:+.4f} (goal within 0.01). Retrain / a `train` on every "
        f"training note: {retrain_cpu / every_cpu:.2f} of its CPU.",
        "",
    ]
    publish(f"review-retrain-{a.model}{'-all' if a.codes == 'all' else ''}", lines, write=not a.no_write)


if __name__ == "__main__":
    main()
