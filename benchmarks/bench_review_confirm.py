"""Does the next-note benchmark's verdict hold for the whole default model? `train` (LEAM part included) on the notes a
rule had reviewed at a budget, against `train` on every training note.

    python benchmarks/bench_review_confirm.py [--data bc5cdr] [--codes all] [--share 0.6] [--seed 0]
        [--rules arrival teach] [--work-dir /tmp/clinicode-bench-confirm] [--no-write]

`bench_review_learning.py` refits only the default model's parts that need no epochs. Here its simulation is replayed
for one seed (the same seed set, rules and learner) to find the notes each rule had reviewed at --share of train;
those notes, with their gold codes and evidence spans, and then every training note, are each given to a whole
`clinicode train` (the default model, fresh processes; dev and test unchanged). Test micro- and macro-F1 from each
run's metrics_test.json (accuracy only: the trains' seconds are kept in each run's seconds.json, not reported, since
these runs may share the machine with others). Runs are kept in --work-dir and reused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine_line, publish  # noqa: E402
from benchmarks.bench_review_learning import DATA, SETS, Set, prepared, simulate  # noqa: E402
from benchmarks.bench_review_retrain import _cli, _write  # noqa: E402


def _train(run: Path, data: Path, descriptions: Path, seed: int) -> dict:
    """The run's test metrics (a kept run is read, not trained again) and its `train` seconds."""
    done = run / "checkpoint" / "metrics_test.json"
    if not done.exists():
        took, _ = _cli("train", "--data", data, "--out", run, "--seed", seed, "--device", "cpu", "--no-progress",
                       "--descriptions", descriptions)
        (run / "seconds.json").write_text(json.dumps({"seconds": took}))
    m = json.loads(done.read_text())
    return {"micro": m["f1_micro"], "macro": m["f1_macro"], "seconds": json.loads((run / "seconds.json").read_text())[
        "seconds"]}


def reviewed_at(d: Set, rule: str, share: float, seed: int) -> list[dict]:
    """The training notes RULE had reviewed at SHARE of train in `bench_review_learning.py`'s simulation on D."""
    order: list[int] = []
    n = len(d.train)
    simulate(rule, "fused", d, seed=seed, seed_n=round(0.1 * n), batch=round(0.1 * n), order_out=order)
    return [d.train[i] for i in order[:round(share * n)]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bc5cdr", choices=sorted(SETS))
    ap.add_argument("--codes", default="all", choices=["top50", "all"])
    ap.add_argument("--share", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rules", nargs="+", default=["arrival", "teach"])
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-confirm"))
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    folder = DATA / SETS[a.data]
    work = a.work_dir / f"{a.data}-{a.codes}-s{a.seed}"
    d = prepared(a.data, a.codes)
    (dev, test), chosen = d.rows, d.codes
    titles = dict(line.split("\t", 1) for line in (folder / "descriptions.tsv").read_text().splitlines() if line)
    runs = {"every training note": d.train}
    runs.update({f"{rule}, {a.share:.0%} reviewed": reviewed_at(d, rule, a.share, a.seed) for rule in a.rules})
    rows = []
    for k, (label, notes) in enumerate(runs.items()):
        data = work / f"data-{k}"
        _write(data, {"train": notes, "dev": dev, "test": test}, chosen, titles)
        got = _train(work / f"run-{k}", data, folder / "descriptions.tsv", a.seed)
        rows.append(f"| {label} | {len(notes)} | {got['micro']:.4f} | {got['macro']:.4f} |")
    lines = [f"### the whole default model on what a rule reviewed (`benchmarks/bench_review_confirm.py --data "
             f"{a.data} --codes {a.codes} --share {a.share} --seed {a.seed}`)", "",
             f"{SETS[a.data]}, {'every code' if a.codes == 'all' else 'the 50 codes of most training notes'}; "
             f"`clinicode train` (the default model, LEAM part included) on the notes each rule of "
             f"`bench_review_learning.py` had reviewed at {a.share:.0%} of train (seed {a.seed}), with their gold "
             f"codes and evidence spans. {machine_line()}", "",
             "| trained on | notes | test micro-F1 | test macro-F1 |", "|---|---:|---:|---:|", *rows, ""]
    publish(f"review-confirm-{a.data}-{a.codes}", lines, write=not a.no_write)


if __name__ == "__main__":
    main()
