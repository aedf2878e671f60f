"""What the review queue teaches, measured on a synthetic review run (docs/review.md, "What the queue teaches").

    python benchmarks/study_review_queue.py [--admissions 3000] [--seed 0] [--work-dir /tmp/clinicode-study-review]

Synthetic MIMIC-III-shaped data (`clinicode demo-data`), prepared as the tests prepare it, a tiny LEAM trained on it
with the tests' sizes (tests/conftest.py TINY_CLI), its test split queued with `clinicode review queue`, and a
simulated coder who knows the gold codes: each suggestion in the gold set is accepted, every other one rejected, and
each gold code the model did not suggest is added. Then `review stats --json`. Prints the overall counts, the per-code
accept and missed-code rates, and the routing scores (codes with >= 20 decided suggestions), with the decisions behind
each figure. Synthetic data, a tiny model and a coder who is never wrong: the numbers show what the report gives and
how to read it, not what a real model would reach.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

TINY = ["--paper", "--embed-dim", "32", "--window", "3", "--hidden-dim", "64", "--dropout", "0.2", "--epochs", "8",
        "--lr", "0.02", "--w2v-epochs", "2", "--patience", "3", "--seed", "7", "--device", "cpu", "--no-progress"]


def _cli(*args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "clinicode", *args], capture_output=True, text=True, cwd=ROOT)
    if res.returncode:
        raise SystemExit(f"clinicode {' '.join(args[:2])} failed:\n{res.stderr[-2000:]}")
    return res.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--admissions", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-study-review"))
    a = ap.parse_args()
    work = a.work_dir / f"a{a.admissions}-s{a.seed}"
    work.mkdir(parents=True, exist_ok=True)
    mimic, data, run, db = work / "mimic", work / "data", work / "run", work / "review.sqlite"
    if not (run / "checkpoint").exists():
        _cli("demo-data", "--out", str(mimic), "--n-admissions", str(a.admissions), "--seed", str(a.seed))
        _cli("prepare", "--mimic-dir", str(mimic), "--out", str(data))
        _cli("train", "--data", str(data), "--out", str(run), *TINY)

    from clinicode.data.prepared import read_split
    from clinicode.review import open_db

    test = read_split(data, "test")
    notes = work / "test_notes.jsonl"
    notes.write_text("".join(json.dumps({"id": str(r.id), "text": r.text}) + "\n" for r in test.itertuples()))
    gold = {str(r.id): set(r.labels) for r in test.itertuples()}
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)  # this study's own database, rebuilt each time
    _cli("review", "queue", "--checkpoint", str(run), "--input", str(notes), "--db", str(db))
    with open_db(db) as rdb:
        for note_id, codes in gold.items():
            suggested = {s["code"] for s in rdb.note(note_id)["suggestions"]}
            rdb.decide(note_id, "simulated-coder", accept=sorted(suggested & codes), reject=sorted(suggested - codes),
                       add=sorted(codes - suggested), done=True)
    t0 = time.perf_counter()
    s = json.loads(_cli("review", "stats", "--db", str(db), "--json"))
    took = time.perf_counter() - t0
    o = s["overall"]
    print(f"{a.admissions} synthetic admissions (seed {a.seed}), tiny LEAM; test split: {o['notes']} notes queued and "
          f"decided; `review stats` took {took:.1f} s (integrity check included)")
    print(f"overall: accepted {o['accepted']}, rejected {o['rejected']}, added {o['added']}; "
          f"precision {o['precision']:.3f}, recall {o['recall']:.3f}")
    r = s["routing"]
    routed = {c: t for e in r["by_checkpoint"].values() for c, t in e["codes"].items()}
    print(f"codes with >= {r['min_decisions']} decided suggestions: {len(routed)} of {len(s['per_code'])}; with a "
          f"score reaching {r['target']:.0%}: {sum(t['threshold'] is not None for t in routed.values())}")
    print("| code | suggested | accept rate | coded | missed rate | score >= | decisions there | accepted there | "
          "95% lower bound | share routed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for code, v in sorted(s["per_code"].items(), key=lambda kv: -kv[1]["suggested"]):
        t = routed.get(code)
        if t is None:
            continue
        cells = ["never", "", "", "", ""] if t["threshold"] is None else [
            f"{t['threshold']:.3f}", str(t["decisions"]), f"{t['rate']:.1%}", f"{t['lower_bound']:.1%}",
            f"{t['share']:.0%}"]
        print(f"| {code} | {v['suggested']} | {v['accept_rate']:.1%} | {v['coded']} | "
              f"{v['missed_rate']:.1%} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
