"""Retraining from decisions, measured: `review retrain` from 50 decisions against a full `train`, on bc5cdr.

    python benchmarks/bench_review_retrain.py [--decisions 50] [--model leam] [--seed 0] [--epochs 3] [--sample 200]
        [--codes top50|all] [--work-dir /tmp/clinicode-bench-retrain] [--no-write]

../shared/data/bc5cdr-disease-mesh with the 50 codes of most training notes (labels.json; notes without one of them
dropped from every split, as `train --top-k 50` drops them), or every code (--codes all). --decisions training notes
(a seeded draw) are held out:
the base run trains on the others; the held-out notes are queued with it (`review queue`), a simulated coder decides
them by their gold codes and gold evidence spans (`review decide --evidence`), and `review retrain` makes a new run
from those decisions. The full run trains on every
training note, as a full retrain would. Times are whole commands (`train`, `review retrain`), each a fresh process;
test micro-F1 at each run's dev-tuned threshold. The full and base runs are kept in --work-dir and reused;
each retrain writes a new database and run (nothing is deleted).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
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


def _cli(*args: object) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "clinicode", *map(str, args)], capture_output=True, text=True,
                         cwd=ROOT)
    took = time.perf_counter() - t0
    if res.returncode:
        raise SystemExit(f"clinicode {' '.join(map(str, args[:2]))} failed:\n{res.stderr[-3000:]}")
    return took, res.stdout


def _micro(run: Path) -> float:
    return json.loads((run / "checkpoint" / "metrics_test.json").read_text())["f1_micro"]


def _train(run: Path, data: Path, model: str, seed: int, epochs: int | None) -> float:
    """Seconds of `train` (cached in RUN/seconds.json)."""
    marker = run / "seconds.json"
    if marker.exists():
        return json.loads(marker.read_text())["seconds"]
    cap = ["--epochs", epochs] if epochs and model != "tfidf-lr" else []
    took, _ = _cli("train", "--data", data, "--out", run, "--model", model, "--seed", seed, "--device", "cpu",
                   "--no-progress", "--descriptions", DATA / "descriptions.tsv", *cap)
    marker.write_text(json.dumps({"seconds": took}))
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decisions", type=int, default=50)
    ap.add_argument("--model", default="leam")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--train-epochs", type=int, default=None,
                    help="cap the full and base trains' epochs (default: train's own, with early stopping)")
    ap.add_argument("--codes", default="top50", choices=["top50", "all"])
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-retrain"))
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    work = a.work_dir / (f"{a.model}-d{a.decisions}-s{a.seed}{f'-cap{a.train_epochs}' if a.train_epochs else ''}"
                         f"{'-all' if a.codes == 'all' else ''}")
    train, dev, test = _rows("train"), _rows("dev"), _rows("test")
    count = collections.Counter(c for r in train for c in r["labels"])
    codes = [c for c, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))][:50 if a.codes == "top50" else None]
    titles = {}
    for line in (DATA / "descriptions.tsv").read_text(encoding="utf-8").splitlines():
        code, _, title = line.partition("\t")
        titles[code] = title
    eligible = [r for r in train if set(r["labels"]) & set(codes)]
    held = random.Random(a.seed).sample(eligible, a.decisions)
    held_ids = {r["id"] for r in held}
    _write(work / "full-data", {"train": train, "dev": dev, "test": test}, codes, titles)
    _write(work / "base-data", {"train": [r for r in train if r["id"] not in held_ids], "dev": dev, "test": test},
           codes, titles)
    full_s = _train(work / "full", work / "full-data", a.model, a.seed, a.train_epochs)
    base_s = _train(work / "base", work / "base-data", a.model, a.seed, a.train_epochs)
    notes = work / "held.jsonl"
    notes.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in held))
    stamp = time.strftime("%Y%m%d-%H%M%S")  # a new database and run each time: nothing under --work-dir is deleted
    db = work / f"review-{stamp}.sqlite"
    _cli("review", "queue", "--checkpoint", work / "base", "--input", notes, "--db", db)
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
    out = work / f"retrained-e{a.epochs}-n{a.sample}-{stamp}"
    retrain_s, _ = _cli("review", "retrain", "--checkpoint", work / "base", "--data", work / "base-data", "--out", out,
                        "--db", db, "--epochs", a.epochs, "--sample", a.sample, "--seed", a.seed, "--device", "cpu")
    full, base, new = _micro(work / "full"), _micro(work / "base"), _micro(out)
    kind = "warm start" if a.model != "tfidf-lr" else "refit"
    lines = [
        f"### retrain from {a.decisions} decisions, {a.model} (`benchmarks/bench_review_retrain.py --model {a.model} "
        f"--epochs {a.epochs} --sample {a.sample} --seed {a.seed}{' --codes all' if a.codes == 'all' else ''}"
        f"{f' --train-epochs {a.train_epochs}' if a.train_epochs else ''}`)",
        "",
        f"bc5cdr-disease-mesh, {'every code' if a.codes == 'all' else 'the 50 codes of most training notes'}; "
        f"{a.decisions} training notes held out and decided by a simulated coder (their gold codes and evidence spans) "
        f"on the base run's suggestions. Whole commands, fresh processes"
        f"{f'; full and base trains capped at {a.train_epochs} epochs' if a.train_epochs else ''}. "
        f"{machine_line()}",
        "",
        "| run | trained on | seconds | test micro-F1 |",
        "|---|---|---:|---:|",
        f"| full `train` | every training note | {full_s:.1f} | {full:.4f} |",
        f"| base `train` | all but the {a.decisions} held out | {base_s:.1f} | {base:.4f} |",
        f"| `review retrain` ({kind}) | base + {a.decisions} decisions"
        f"{f' ({a.epochs} epochs on them and {a.sample} sampled training notes)' if kind == 'warm start' else ''} | "
        f"{retrain_s:.1f} | {new:.4f} |",
        "",
        f"Retrain / full train time: {retrain_s / full_s:.2f} (goal <= 0.10); micro-F1 retrain - full: "
        f"{new - full:+.4f} (goal within 0.01).",
        "",
    ]
    publish(f"review-retrain-{a.model}{'-all' if a.codes == 'all' else ''}", lines, write=not a.no_write)


if __name__ == "__main__":
    main()
