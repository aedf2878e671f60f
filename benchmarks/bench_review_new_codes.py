"""Codes that only coders added, measured through the product's commands: a base `train` that never saw some of a
set's codes, a simulated coder who adds them while reviewing, `review retrain`, and on how many of their test notes
the new checkpoint predicts them.

    python benchmarks/bench_review_new_codes.py [--set ncbi|bc5cdr|cmc2007|cantemist] [--new 5] [--min-notes 10]
        [--base-share 0.7] [--base-notes strip|drop] [--seed 0] [--work-dir /tmp/clinicode-bench-new-codes]
        [--no-write] [--data-dir FOLDER] [--train-args '...']

The set (../shared/data or $CLINICODE_DATA) is cut to its 50 codes of most training notes, as
bench_review_loop.py cuts it. Its training notes are split by a seeded draw: --base-share for the base run, the
rest is the pool. The new codes are the --new codes on the fewest pool notes among those on at least --min-notes pool
notes and 3 test notes (the goal's edge: a code coders added on 10 or more notes). The base's data loses them in
every split (labels and evidence spans; a note left with no code is dropped; `train` refuses a label its labels.json
lacks), so neither the base nor a retrain's dev ever saw them: codes new to the data. The base's training notes that
carry one keep their other codes (`--base-notes strip`: notes coded before the code existed, so negatives for it in
every later train) or are left out (`drop`: no such hidden positives). Every pool note is queued with the base run
(`review queue`) and decided by bench_review_loop.py's simulated coder (one `review decide --done` a note: the gold
suggestions accepted, the others rejected, the gold codes missed added, with their gold evidence spans). `review
retrain` from the base makes the new run (with the set's titles, `--descriptions`, as the base's `train` had them);
beside it, a fresh `train` on the retrain's own data folder (the same notes and codes). Each run then `predict`s the
set's test notes (its 50-code cut, new codes included). Per new code: the notes coders gave it (added, or accepted
from a title suggestion), its test notes, on how many of them each run predicts it, and on how many test notes in
all. Everything written stays in --work-dir, owner-only; the base, the decisions, the runs and their predictions are
reused by a later run with the same arguments. Results:
WORK-DIR/new_codes-SET.json and, unless --no-write, the set's "review-new-codes-SET" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine_line, mark_own, publish  # noqa: E402
from benchmarks.bench_review_loop import DATA, SETS, Clinicode, _commit, decide, load_set, write_data  # noqa: E402

MIN_TEST = 3    # test notes a new code needs to be measured at all


def choose(pool: list[dict], test: list[dict], codes: list[str], k: int, min_notes: int) -> list[str]:
    """The K codes on the fewest pool notes among CODES on at least MIN_NOTES pool notes and MIN_TEST test notes."""
    in_pool = collections.Counter(c for r in pool for c in r["labels"])
    in_test = collections.Counter(c for r in test for c in r["labels"])
    ok = [c for c in codes if in_pool[c] >= min_notes and in_test[c] >= MIN_TEST]
    if not ok:
        raise SystemExit(f"no code of the set is on {min_notes} or more pool notes and {MIN_TEST} test notes; "
                         "lower --min-notes or --base-share.")
    return sorted(ok, key=lambda c: (in_pool[c], c))[:k]


def without(rows: list[dict], drop: set[str]) -> list[dict]:
    """ROWS without the codes DROP (labels and evidence spans); a row left with no code is left out."""
    out = []
    for r in rows:
        labels = [c for c in r["labels"] if c not in drop]
        if labels:
            out.append({**r, "labels": labels, "evidence": [m for m in r["evidence"] if m["code"] not in drop]})
    return out


def _f1(pairs: set, gold: set) -> float:
    return 2 * len(pairs & gold) / (len(pairs) + len(gold)) if pairs or gold else 0.0


def from_predictions(cli: Clinicode, run: Path, test: list[dict], codes: list[str], work: Path) -> dict:
    """RUN's `predict` on the TEST notes (a score strictly above its threshold), against their gold codes: micro-F1
    over every code of the set and over CODES alone; per code of CODES its test notes, on how many of them RUN
    predicts it, and on how many test notes in all."""
    out = work / f"{run.name}-test-predictions.jsonl"
    if not out.exists():
        notes = work / "test-notes.jsonl"
        if not notes.exists():       # one file for the three runs' `predict`
            notes.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}, ensure_ascii=False) + "\n"
                                     for r in test))
        cli("predict", "--checkpoint", run, "--input", notes, "--output", out, "--device", "cpu", "--no-progress")
    predicted = {}
    for line in out.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        predicted[str(rec["id"])] = {p["code"] for p in rec["predicted"]}
    known = {lab["code"] for lab in json.loads((run / "checkpoint" / "labels.json").read_text())}
    per_code = {}
    for code in codes:
        on = [r["id"] for r in test if code in r["labels"]]
        per_code[code] = {"known": code in known, "test_notes": len(on), "found": sum(code in predicted[i] for i in on),
                          "predicted": sum(code in p for p in predicted.values())}
    pairs = {(i, c) for i, p in predicted.items() for c in p}
    gold = {(r["id"], c) for r in test for c in r["labels"]}
    new = set(codes)
    return {"micro_f1": _f1(pairs, gold), "new_micro_f1": _f1({x for x in pairs if x[1] in new},
                                                              {x for x in gold if x[1] in new}), "codes": per_code}


def measure(cli: Clinicode, data: dict, work: Path, a: argparse.Namespace) -> dict:
    """Base train, queue, decisions, retrain and fresh train in WORK (each step skipped when already done)."""
    rows = sorted(data["train"], key=lambda r: r["id"])
    rng = random.Random(a.seed)
    base_ids = set(r["id"] for r in rng.sample(rows, round(len(rows) * a.base_share)))
    pool = [r for r in rows if r["id"] not in base_ids]
    new = choose(pool, data["test"], data["codes"], a.new, a.min_notes)
    carry = [r for r in rows if r["id"] in base_ids and (a.base_notes == "strip" or not set(r["labels"]) & set(new))]
    base_rows = without(carry, set(new))
    desc = ["--descriptions", data["descriptions"]] if data["descriptions"] else []
    base_data, base = work / "base-data", work / "base"
    if not (base / "checkpoint" / "manifest.json").exists():
        kept = [c for c in data["codes"] if c not in set(new)]
        cut = {"codes": kept, "dev": without(data["dev"], set(new)), "test": without(data["test"], set(new))}
        write_data(base_data, base_rows, {**data, **cut})
        cli("train", "--data", base_data, "--out", base, "--seed", a.seed, "--device", "cpu", "--no-progress",
            *desc, *cli.train_args)
    db, notes = work / "review.sqlite", work / "pool.jsonl"
    if not (work / "decided.json").exists():
        for path in (notes, db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            path.unlink(missing_ok=True)     # an interrupted run's (nothing else writes these names in WORK)
        notes.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}, ensure_ascii=False) + "\n"
                                 for r in pool))
        cli("review", "queue", "--checkpoint", base, "--input", notes, "--db", db)
        added = collections.Counter()
        for r in pool:
            decide(cli, db, r)
            added.update(set(r["labels"]) & set(new))
        (work / "decided.json").write_text(json.dumps({"notes": len(pool), "added": added}))
    retrained, fresh = work / "retrained", work / "fresh"
    if not (retrained / "checkpoint" / "manifest.json").exists():
        said, wall, cpu = cli("review", "retrain", "--checkpoint", base, "--data", base_data, "--out", retrained,
                              "--db", db, "--seed", a.seed, "--device", "cpu", *desc)   # the new codes' titles
        said = [line.replace(str(work), "WORK") for line in (cli.stderr + said).splitlines() if line.strip()]
        (work / "retrain.json").write_text(json.dumps({"said": said, "wall": wall, "cpu": cpu}))
    if not (fresh / "checkpoint" / "manifest.json").exists():
        _, wall, cpu = cli("train", "--data", retrained / "data", "--out", fresh, "--seed", a.seed, "--device", "cpu",
                           "--no-progress", *desc, *cli.train_args)
        (work / "fresh.json").write_text(json.dumps({"wall": wall, "cpu": cpu}))
    decided = json.loads((work / "decided.json").read_text())
    return {"new_codes": new, "titles": {c: data["titles"].get(c, "") for c in new},
            "train_notes": len(rows), "base_notes": len(base_rows), "pool_notes": len(pool),
            "added_on": decided["added"],
            "retrain": json.loads((work / "retrain.json").read_text()),
            "fresh_train": json.loads((work / "fresh.json").read_text()),
            "runs": {name: from_predictions(cli, run, data["test"], new, work)
                     for name, run in (("base", base), ("retrained", retrained), ("fresh", fresh))}}


def _cell(x: dict) -> str:
    return f"{x['found']} / {x['predicted']}" if x["known"] else "not in its label set"


def table(name: str, r: dict, a: argparse.Namespace) -> list[str]:
    said = r["retrain"]["said"]
    lines = [
        f"### codes only coders added (`benchmarks/bench_review_new_codes.py "
        f"{f'--data-dir {name}' if a.data_dir else f'--set {a.set}'} --new {a.new} "
        f"--min-notes {a.min_notes} --base-share {a.base_share:g}{' --base-notes drop' * (a.base_notes == 'drop')} "
        f"--seed {a.seed}`)",
        "",
        f"{name}, the 50 codes of most training notes. The base `train` saw {r['base_notes']} of the "
        f"{r['train_notes']} training notes (of a seeded {a.base_share:g}, those left with a code); the "
        f"{len(r['new_codes'])} codes below (at most {a.new}: those on {a.min_notes} or more of the other notes and 3 "
        "or more test notes, the fewest first) were taken out of its data (every split's labels and evidence, and "
        f"labels.json). A simulated coder decided the other {r['pool_notes']} (`review decide "
        "--done`, gold codes and evidence spans), giving those codes where the base could not suggest them; `review "
        "retrain` from the base, beside a fresh `train` on the retrain's data. `predict` on the test notes: those of "
        f"each new code on which the run predicts it (found), and those it is predicted on in all. {machine_line()}",
        "",
        "| new code | title | coders gave it on | test notes | retrained: found / predicted | fresh train: found / "
        "predicted |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for c in r["new_codes"]:
        got, ref = r["runs"]["retrained"]["codes"][c], r["runs"]["fresh"]["codes"][c]
        lines.append(f"| {c} | {r['titles'][c]} | {r['added_on'].get(c, 0)} | {ref['test_notes']} | {_cell(got)} | "
                     f"{_cell(ref)} |")
    runs = r["runs"]
    lines += [
        "",
        f"`predict` on every test note, micro-F1 over the set's 50 codes / over the new codes: base "
        f"{runs['base']['micro_f1']:.4f} / {runs['base']['new_micro_f1']:.4f} (it lacks them), retrained "
        f"{runs['retrained']['micro_f1']:.4f} / {runs['retrained']['new_micro_f1']:.4f}, fresh train "
        f"{runs['fresh']['micro_f1']:.4f} / {runs['fresh']['new_micro_f1']:.4f}. `review retrain` took "
        f"{r['retrain']['cpu']:.0f} s of CPU (the fresh train {r['fresh_train']['cpu']:.0f} s) and said:",
        "",
        "```",
        *said[-4:],
        "```",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="ncbi", choices=sorted(SETS))
    ap.add_argument("--new", type=int, default=5, help="codes taken out of the base's training notes")
    ap.add_argument("--min-notes", type=int, default=10, help="pool notes a new code must be on")
    ap.add_argument("--base-share", type=float, default=0.7, help="share of the training notes the base saw")
    ap.add_argument("--base-notes", default="strip", choices=["strip", "drop"],
                    help="the base's training notes that carry a new code: strip the code (notes coded before it "
                         "existed) or leave the notes out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-new-codes"))
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="a folder of {train,dev,test}.jsonl measured in place of --set (the tests' synthetic set)")
    ap.add_argument("--train-args", default="", help="more options for both `train`s, e.g. '--model tfidf-lr'")
    ap.add_argument("--no-write", action="store_true", help="write only into --work-dir (no BENCHMARKS.md)")
    a = ap.parse_args(argv)
    folder = a.data_dir or DATA / SETS[a.set]
    name = folder.name if a.data_dir else SETS[a.set]
    os.umask(0o077)       # the data folders, database and runs hold note text: owner-only
    drop = "-drop" if a.base_notes == "drop" else ""
    work = a.work_dir / f"{name}-n{a.new}-m{a.min_notes}-b{a.base_share:g}-s{a.seed}{drop}"
    if not work.exists():
        work.mkdir(parents=True)
        mark_own(work)
    cli = Clinicode(train_args=shlex.split(a.train_args))
    t0 = time.perf_counter()
    result = {"commit": _commit(), "machine": machine_line(), "set": name,
              **measure(cli, load_set(folder), work, a), "seconds": time.perf_counter() - t0}
    (a.work_dir / f"new_codes-{name}{drop}.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    publish(f"review-new-codes-{name}{drop}", table(name, result, a), write=not a.no_write)
    return result


if __name__ == "__main__":
    main()
