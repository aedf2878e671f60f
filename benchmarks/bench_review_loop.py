"""The review loop, measured through the product's own commands: a simulated coder who is never wrong, rounds of
`review next` -> `review decide` -> `review retrain` -> `review rescore` -> `evaluate`, beside a fresh `train`.

    python benchmarks/bench_review_loop.py [--sets cmc2007 bc5cdr ncbi cantemist] [--seeds 0 1 2]
        [--budgets 10 20 30 40 50 60 70 80 90 100] [--orders teach arrival random]
        [--work-dir /tmp/clinicode-bench-loop] [--no-write] [--add] [--data-dir FOLDER] [--train-args '...']

Each set (bc5cdr-disease-mesh, ncbi-disease-mesh, cmc2007-radiology-icd9, cantemist-icdo3 in ../shared/data, or
$CLINICODE_DATA) is cut to the 50 codes of most training notes, fixed by labels.json (notes left with none of them
are dropped from every split, as `train --top-k 50` drops them). Per seed, every step is a `python -m clinicode ...`
process, as docs/review.md tells a coder to run it:

1. `train` on the seed set (10% of train, a seeded draw); `review queue` the rest of train (the pool, in file
   order) with that run.
2. Rounds, one ending at each budget (% of the pool reviewed; the default budgets make rounds of 10%): the order
   under test picks the notes (`teach`: `review next`; `arrival`: `review next --order arrival`; `random`: a
   seeded permutation of the pool); each note gets one `review decide ... --done` that accepts its gold
   suggestions, rejects the others and adds the gold codes missed, with the set's gold evidence spans
   (`--evidence`) where it has them (the suggestions are read from the database read-only, as `review show
   --json` prints them, to spare a process a note); `review retrain` from the previous round's run (`--data`: the
   data that run was trained on); `review rescore` the queue with the new run; `evaluate` it on test.
3. Beside each budget, a fresh `train` on the same notes (seed set and every note reviewed so far, the seed
   train's options), evaluated on test.

The coder's gold codes are the note's codes among the 50 (the label set every run is scored on). Coder effort is
codes decided (accepted, rejected or added) per reviewed note; no seconds per note are simulated. Commands are
timed whole (wall seconds, and the CPU seconds of the process). Micro- and macro-F1 (CAML's `f1_macro`) at each
run's dev-tuned threshold, as `evaluate` reports them. Everything written (data with note text, databases, runs)
stays in --work-dir, owner-only. Runs are kept there and reused by a later run: a fresh train by its notes, seed
and options, a round by the budgets before it; so more seeds or budgets cost only what is new (pass a new
--work-dir after changing the code: each cached run records the commit it was made at). Results:
WORK-DIR/review_loop.json; unless --no-write also benchmarks/review_loop.json and the "review-loop" section of
BENCHMARKS.md (with --add, beside the sets already published there, each with its own seeds and commits).
"""

from __future__ import annotations

import argparse
import collections
import functools
import hashlib
import json
import os
import random
import resource
import shlex
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine_line, mark_own, publish, read_jsonl, read_titles, remove_own  # noqa: E402

DATA = Path(os.environ.get("CLINICODE_DATA", ROOT.parent / "shared" / "data"))  # beside the repository, or given
SETS = {"bc5cdr": "bc5cdr-disease-mesh", "ncbi": "ncbi-disease-mesh", "cmc2007": "cmc2007-radiology-icd9",
        "cantemist": "cantemist-icdo3"}
ICD9_TITLES = DATA / "caml-mimic-ids" / "ICD9_descriptions.tsv"   # cmc2007's codes are bare: ICD-9's titles
ORDERS = ("teach", "arrival", "random")
TOP_K = 50
SEED_SHARE = 0.1
CODER = "simulated-coder"
MAX_SPANS = 50     # clinicode.review.decisions.MAX_SPANS: spans a code and call
RESULTS = ROOT / "benchmarks" / "review_loop.json"


# ------------------------------------------------------------------------------------------------ the commands
class Clinicode:
    """Runs `python -m clinicode ...` processes and keeps each one's wall and CPU seconds."""

    def __init__(self, python: str = sys.executable, train_args: list[str] | None = None) -> None:
        self.python = python
        self.train_args = train_args or []     # every `train`'s extra options
        self.stderr = ""                       # the last command's (what it said beside its output)

    def __call__(self, *args: object, check: bool = True) -> tuple[str, float, float]:
        """(stdout, wall seconds, CPU seconds of the process) of `clinicode ARGS`; exits with its stderr on failure."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        res = subprocess.run([self.python, "-m", "clinicode", *map(str, args)], capture_output=True, text=True,
                             cwd=ROOT)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.stderr = res.stderr
        if check and res.returncode:
            raise SystemExit(f"clinicode {' '.join(map(str, args[:2]))} failed (exit {res.returncode}):\n"
                             f"{res.stderr[-3000:]}")
        return res.stdout, wall, cpu


# ------------------------------------------------------------------------------------------------ the data
def load_set(folder: Path) -> dict:
    """The splits of a public set's FOLDER cut to its TOP_K codes of most training notes: {"train", "dev", "test":
    rows, "codes", "titles": {code: title}, "descriptions": the `--descriptions` file a user would pass, or None}."""
    splits = {s: read_jsonl(folder / f"{s}.jsonl") for s in ("train", "dev", "test")}
    count = collections.Counter(c for r in splits["train"] for c in set(r["labels"]))
    codes = [c for c, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))][:TOP_K]
    keep = set(codes)
    cut = {}
    for s, rows in splits.items():
        cut[s] = []
        for r in rows:
            labels = sorted(set(r["labels"]) & keep)
            if labels:
                spans = [m for m in r.get("evidence") or [] if m["code"] in keep]
                cut[s].append({"id": str(r["id"]), "text": r["text"], "labels": labels, "evidence": spans})
    titles = read_titles(folder) if (folder / "labels.tsv").is_file() else {}
    descriptions = folder / "descriptions.tsv"
    if not descriptions.is_file():
        descriptions = ICD9_TITLES if folder.name.startswith("cmc2007") and ICD9_TITLES.is_file() else None
    if descriptions is not None and not any(titles.get(c) for c in codes):
        for line in descriptions.read_text(encoding="utf-8").splitlines():
            code, _, title = line.partition("\t")
            if code in keep:
                titles[code] = title
    return {**cut, "codes": codes, "titles": titles, "descriptions": descriptions}


def write_data(folder: Path, train: list[dict], data: dict) -> None:
    """A coded-notes folder: TRAIN, the set's dev and test, labels.json fixing its codes (owner-only: note text)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("dev", data["dev"]), ("test", data["test"])):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                row = {"id": r["id"], "text": r["text"], "labels": r["labels"]}
                if r["evidence"]:
                    row["evidence"] = r["evidence"]
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    (folder / "labels.json").write_text(json.dumps(
        [{"code": c, "description": data["titles"].get(c, "")} for c in data["codes"]], ensure_ascii=False))


# ------------------------------------------------------------------------------------------------ runs
def _metrics(path: Path) -> dict:
    m = json.loads(path.read_text())
    return {"micro_f1": m["f1_micro"], "macro_f1": m["f1_macro"]}


def evaluate(cli: Clinicode, run: Path, data: Path) -> dict:
    """`evaluate` RUN on DATA's test split: micro- and macro-F1 and the command's seconds (kept in RUN/../)."""
    out = run.parent / f"{run.name}-test.json"
    if not out.exists():
        _, wall, cpu = cli("evaluate", "--checkpoint", run, "--data", data, "--split", "test", "--device", "cpu",
                           "--output", out)
        out.with_suffix(".seconds").write_text(json.dumps({"wall": wall, "cpu": cpu}))
    return {**_metrics(out), "evaluate_s": json.loads(out.with_suffix(".seconds").read_text())["wall"]}


def fresh_train(cli: Clinicode, work: Path, data: dict, ids: list[str], seed: int) -> dict:
    """A fresh `train` on the training notes IDS (and the set's dev and test), evaluated on test; cached in
    WORK/fresh/ by the notes and the seed, so every order, budget and later run with the same notes reuses it."""
    key = hashlib.sha256(json.dumps([sorted(ids), seed]).encode()).hexdigest()[:16]
    folder = work / "fresh" / key
    done = folder / "train.json"
    if not done.exists():
        if folder.exists():
            remove_own(folder)         # an interrupted train of an earlier run
        folder.mkdir(parents=True)
        mark_own(folder)
        wanted = set(ids)
        write_data(folder / "data", [r for r in data["train"] if r["id"] in wanted], data)
        desc = ["--descriptions", data["descriptions"]] if data["descriptions"] else []
        _, wall, cpu = cli("train", "--data", folder / "data", "--out", folder / "run", "--seed", seed, "--device",
                           "cpu", "--no-progress", *desc, *cli.train_args)
        done.write_text(json.dumps({"notes": len(ids), "train_s": wall, "train_cpu": cpu, "commit": _commit()}))
    return {**json.loads(done.read_text()), **evaluate(cli, folder / "run", folder / "data"),
            "run": str(folder / "run"), "data": str(folder / "data")}


def _copy_db(src: Path, dst: Path) -> None:
    """A copy of review database SRC at DST (owner-only, as the product makes them), by SQLite's backup."""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()


# ------------------------------------------------------------------------------------------------ the coder
def decide(cli: Clinicode, db: Path, row: dict) -> tuple[int, float]:
    """The simulated coder on one note: one `review decide --done` with the gold codes (accept the gold suggestions,
    reject the others, add the gold codes missed) and their gold evidence spans. The suggestions are read from the
    database read-only, as the Review page shows them (`review show --json` prints the same, at a process a note).
    Returns (codes decided, wall seconds of the command)."""
    from clinicode.review import open_db

    with open_db(db, readonly=True) as rdb:
        suggested = {s["code"] for s in rdb.note(row["id"])["suggestions"]}
    gold = set(row["labels"])
    args: list[object] = []
    for code in sorted(suggested & gold):
        args += ["--accept", code]
    for code in sorted(suggested - gold):
        args += ["--reject", code]
    for code in sorted(gold - suggested):
        args += ["--add", code]
    spans = sorted({(m["code"], int(m["start"]), int(m["end"])) for m in row["evidence"] if m["code"] in gold})
    per_code: collections.Counter = collections.Counter()
    for code, start, end in spans:
        per_code[code] += 1
        if per_code[code] <= MAX_SPANS:        # review decide's cap per code and call
            args += ["--evidence", f"{code}={start}:{end}"]
    _, wall, _ = cli("review", "decide", "--db", db, "--id", row["id"], "--reviewer", CODER, *args, "--done")
    return len(suggested | gold), wall


def pick(cli: Clinicode, order: str, db: Path, n: int, reviewed: set[str], permutation: list[str]) -> list[str]:
    """The next N notes of ORDER: `review next` (teach, arrival), or the seeded permutation's next unreviewed."""
    if order == "random":
        return [i for i in permutation if i not in reviewed][:n]
    out, _, _ = cli("review", "next", "--db", db, "--reviewer", CODER, "-n", n, "--order", order)
    return [line.strip() for line in out.splitlines() if line.strip()]


def run_round(cli: Clinicode, rnd: Path, prev: dict, order: str, n: int, rows: dict[str, dict], seed: int,
              permutation: list[str]) -> dict:
    """One round into folder RND: copy the previous round's database, pick and decide N notes, retrain from the
    previous run, rescore, evaluate. Returns the round's record (also RND/round.json)."""
    rnd.mkdir(parents=True)
    mark_own(rnd)
    db = rnd / "review.sqlite"
    _copy_db(Path(prev["db"]), db)
    reviewed = set(prev["reviewed"])
    t0 = time.perf_counter()
    picked = pick(cli, order, db, n, reviewed, permutation)
    pick_s = time.perf_counter() - t0
    if len(picked) != n or reviewed & set(picked):
        raise SystemExit(f"{order}: expected {n} unreviewed notes to review, got {len(picked)} "
                         f"({len(reviewed & set(picked))} already reviewed)")
    decided, decide_s = 0, 0.0
    for note in picked:
        k, s = decide(cli, db, rows[note])
        decided, decide_s = decided + k, decide_s + s
    _, retrain_s, retrain_cpu = cli("review", "retrain", "--checkpoint", prev["run"], "--data", prev["data"],
                                    "--out", rnd / "run", "--db", db, "--seed", seed, "--device", "cpu")
    _, rescore_s, _ = cli("review", "rescore", "--checkpoint", rnd / "run", "--db", db, "--device", "cpu")
    record = {"picked": picked, "reviewed": sorted(reviewed | set(picked)), "codes_decided": decided,
              "next_s": pick_s if order != "random" else None, "decide_s": decide_s,
              "retrain_s": retrain_s, "retrain_cpu": retrain_cpu, "rescore_s": rescore_s,
              "run": str(rnd / "run"), "data": str(rnd / "run" / "data"), "db": str(db), "commit": _commit()}
    (rnd / "round.json").write_text(json.dumps(record))
    return record


# ------------------------------------------------------------------------------------------------ one seed
def measure_seed(cli: Clinicode, name: str, data: dict, seed: int, budgets: list[int], orders: list[str],
                 work: Path) -> dict:
    """Seed run, queue, and every order's rounds and fresh trains for one seed of set NAME."""
    train = data["train"]
    rows = {r["id"]: r for r in train}
    seed_ids = sorted(r["id"] for r in random.Random(seed).sample(train, max(1, round(SEED_SHARE * len(train)))))
    pool = [r for r in train if r["id"] not in set(seed_ids)]           # file order: the queue's arrival order
    base = fresh_train(cli, work, data, seed_ids, seed)
    sdir = work / f"seed{seed}"
    queued = sdir / "queue"
    if not (queued / "queue.json").exists():
        if queued.exists():
            remove_own(queued)
        queued.mkdir(parents=True)
        mark_own(queued)
        notes = queued / "pool.jsonl"
        notes.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}, ensure_ascii=False) + "\n"
                                 for r in pool), encoding="utf-8")
        _, wall, _ = cli("review", "queue", "--checkpoint", base["run"], "--input", notes, "--db",
                         queued / "review.sqlite", "--device", "cpu")
        (queued / "queue.json").write_text(json.dumps({"queue_s": wall}))
    queue_s = json.loads((queued / "queue.json").read_text())["queue_s"]
    permutation = [r["id"] for r in pool]
    random.Random(f"random order {seed}").shuffle(permutation)
    out = {"seed_notes": len(seed_ids), "pool_notes": len(pool), "queue_s": queue_s,
           "seed_run": {k: base[k] for k in ("micro_f1", "macro_f1", "train_s", "train_cpu", "evaluate_s")},
           "orders": {}}
    commits = {base.get("commit", "unknown")}
    for order in orders:
        prev = {"run": base["run"], "data": base["data"], "db": str(queued / "review.sqlite"), "reviewed": []}
        chain, points, decided = [], [], 0
        for b in budgets:
            chain.append(str(b))
            rnd = sdir / order / "-".join(chain)     # a round is reused only after the same budgets before it
            target = round(b / 100 * len(pool))
            if (rnd / "round.json").exists():
                record = json.loads((rnd / "round.json").read_text())
            else:
                if rnd.exists():
                    remove_own(rnd)                  # an interrupted round of an earlier run
                record = run_round(cli, rnd, prev, order, target - len(prev["reviewed"]), rows, seed, permutation)
                print(f"{name} seed {seed} {order} {b}%: reviewed {len(record['reviewed'])}", file=sys.stderr)
            decided += record["codes_decided"]
            loop = evaluate(cli, Path(record["run"]), Path(base["data"]))
            fresh = fresh_train(cli, work, data, seed_ids + record["reviewed"], seed)
            points.append({
                "budget": b, "reviewed": len(record["reviewed"]), "micro_f1": loop["micro_f1"],
                "macro_f1": loop["macro_f1"], "codes_per_note": decided / max(1, len(record["reviewed"])),
                "next_s": record["next_s"], "decide_s_per_note":
                    record["decide_s"] / max(1, len(record["picked"])),
                "retrain_s": record["retrain_s"], "retrain_cpu": record["retrain_cpu"],
                "rescore_s": record["rescore_s"], "evaluate_s": loop["evaluate_s"],
                "fresh": {k: fresh[k] for k in ("micro_f1", "macro_f1", "train_s", "train_cpu")},
                "retrain_cpu_over_fresh": record["retrain_cpu"] / fresh["train_cpu"] if fresh["train_cpu"] else None})
            commits |= {record.get("commit", "unknown"), fresh.get("commit", "unknown")}
            prev = record
        out["orders"][order] = points
    out["commits"] = sorted(commits)      # the code each cached run was made with
    return out


def summarise(per_seed: dict[str, dict], budgets: list[int], orders: list[str]) -> dict:
    """Mean and worst seed of each order's micro- and macro-F1 (and the fresh train's) per budget."""
    out: dict = {}
    for order in orders:
        out[order] = {}
        for i, b in enumerate(budgets):
            pts = [s["orders"][order][i] for s in per_seed.values()]
            cell = {}
            for key in ("micro_f1", "macro_f1"):
                vals, fresh = [p[key] for p in pts], [p["fresh"][key] for p in pts]
                cell[key] = {"mean": statistics.mean(vals), "worst": min(vals)}
                cell[f"fresh_{key}"] = {"mean": statistics.mean(fresh), "worst": min(fresh)}
            cell["codes_per_note"] = statistics.mean(p["codes_per_note"] for p in pts)
            ratios = [p["retrain_cpu_over_fresh"] for p in pts if p["retrain_cpu_over_fresh"] is not None]
            cell["retrain_cpu_over_fresh"] = statistics.mean(ratios) if ratios else None
            out[order][str(b)] = cell
    return out


def measure_set(cli: Clinicode, name: str, folder: Path, seeds: list[int], budgets: list[int], orders: list[str],
                work: Path) -> dict:
    """Every seed of set NAME, read from FOLDER."""
    data = load_set(folder)
    tag = hashlib.sha256(json.dumps(cli.train_args).encode()).hexdigest()[:8]
    swork = work / (f"{name}-train-{tag}" if cli.train_args else name)  # runs of other train options never mix
    swork.mkdir(parents=True, exist_ok=True)
    per_seed = {str(s): measure_seed(cli, name, data, s, budgets, orders, swork) for s in seeds}
    return with_seeds({"data": folder.name, "codes": len(data["codes"]), "train_notes": len(data["train"]),
                       "dev_notes": len(data["dev"]), "test_notes": len(data["test"]),
                       "evidence": any(r["evidence"] for r in data["train"])}, per_seed, budgets, orders)


def with_seeds(entry: dict, per_seed: dict[str, dict], budgets: list[int], orders: list[str]) -> dict:
    """A set's ENTRY holding PER_SEED's seeds (in order), with the mean and worst seed recomputed over them."""
    seed_runs = [s["seed_run"] for s in per_seed.values()]
    return {**entry, "seeds": dict(sorted(per_seed.items(), key=lambda kv: int(kv[0]))),
            "summary": summarise(per_seed, budgets, orders),
            "seed_run": {k: {"mean": statistics.mean(r[k] for r in seed_runs), "worst": min(r[k] for r in seed_runs)}
                         for k in ("micro_f1", "macro_f1")}}


# ------------------------------------------------------------------------------------------------ the report
def table(name: str, entry: dict, budgets: list[int], orders: list[str]) -> list[str]:
    """BENCHMARKS.md lines for one set: per budget, each order's chained loop and the fresh train on its notes."""
    seeds = list(entry["seeds"])
    sr = entry["seed_run"]
    first = entry["seeds"][seeds[0]]
    lines = [f"**{name}** ({entry['data']}: {entry['codes']} codes, {entry['train_notes']} training notes = "
             f"{first['seed_notes']} seed + {first['pool_notes']} pool, {entry['test_notes']} test notes; "
             f"{'gold evidence spans' if entry['evidence'] else 'no evidence spans'}; seeds {', '.join(seeds)}). "
             f"Seed run alone: micro-F1 {sr['micro_f1']['mean']:.3f} (worst {sr['micro_f1']['worst']:.3f}), macro-F1 "
             f"{sr['macro_f1']['mean']:.3f}.", "",
             "| reviewed | " + " | ".join(f"{o}: loop micro / macro | {o}: fresh train micro / macro" for o in orders)
             + " |", "|---|" + "---|---|" * len(orders)]
    seed_cell = (f"{sr['micro_f1']['mean']:.3f} ({sr['micro_f1']['worst']:.3f}) / {sr['macro_f1']['mean']:.3f} "
                 f"({sr['macro_f1']['worst']:.3f})")
    lines.append("| seed set only | " + " | ".join([seed_cell, seed_cell] * len(orders)) + " |")
    for b in budgets:
        cells = []
        for o in orders:
            c = entry["summary"][o][str(b)]
            cells.append(f"{c['micro_f1']['mean']:.3f} ({c['micro_f1']['worst']:.3f}) / {c['macro_f1']['mean']:.3f} "
                         f"({c['macro_f1']['worst']:.3f})")
            cells.append(f"{c['fresh_micro_f1']['mean']:.3f} ({c['fresh_micro_f1']['worst']:.3f}) / "
                         f"{c['fresh_macro_f1']['mean']:.3f} ({c['fresh_macro_f1']['worst']:.3f})")
        reviewed = entry["seeds"][seeds[0]]["orders"][orders[0]][budgets.index(b)]["reviewed"]
        lines.append(f"| {b}% ({reviewed} notes) | " + " | ".join(cells) + " |")
    lines += ["", "| order | codes decided / note at " + " / ".join(f"{b}%" for b in budgets)
              + " | retrain s (mean) | retrain CPU / fresh train CPU | rescore s | evaluate s | next s | "
              "decide s / note |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for o in orders:
        pts = [p for s in entry["seeds"].values() for p in s["orders"][o]]
        nxt = [p["next_s"] for p in pts if p["next_s"] is not None]
        ratios = [p["retrain_cpu_over_fresh"] for p in pts if p["retrain_cpu_over_fresh"] is not None]
        lines.append(
            f"| {o} | " + " / ".join(f"{entry['summary'][o][str(b)]['codes_per_note']:.2f}" for b in budgets)
            + f" | {statistics.mean(p['retrain_s'] for p in pts):.1f} | "
            + (f"{statistics.mean(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-")
            + f" | {statistics.mean(p['rescore_s'] for p in pts):.1f} | "
            f"{statistics.mean(p['evaluate_s'] for p in pts):.1f} | "
            + (f"{statistics.mean(nxt):.1f}" if nxt else "-")
            + f" | {statistics.mean(p['decide_s_per_note'] for p in pts):.2f} |")
    fresh = [s["seed_run"] for s in entry["seeds"].values()]
    lines += ["", f"Fresh `train` seconds: seed set {statistics.mean(r['train_s'] for r in fresh):.0f} s; at the last "
              "budget " + ", ".join(
                  f"{o} {statistics.mean(s['orders'][o][-1]['fresh']['train_s'] for s in entry['seeds'].values()):.0f}"
                  " s" for o in orders) + ".", ""]
    return lines


@functools.cache
def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _published_sets(budgets: list[int], orders: list[str]) -> dict:
    """The sets benchmarks/review_loop.json holds (none without it), for --add; refused when measured at other
    budgets or orders than this run's (one table cannot show both)."""
    if not RESULTS.exists():
        return {}
    old = json.loads(RESULTS.read_text())
    if old["budgets"] != budgets or old["orders"] != orders:
        raise SystemExit(f"--add: {RESULTS} was measured at budgets {old['budgets']} and orders {old['orders']}, this "
                         f"run at {budgets} and {orders}; give the same, or leave out --add to replace it.")
    return old["sets"]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=sorted(SETS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--budgets", nargs="+", type=int, default=list(range(10, 101, 10)),
                    help="%% of the pool reviewed at the end of each round, ascending, each in 1..100")
    ap.add_argument("--orders", nargs="+", default=list(ORDERS), choices=ORDERS)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-loop"))
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="a folder of {train,dev,test}.jsonl (id, text, labels[, evidence]) measured in place of "
                         "--sets, under its own name (the tests' synthetic set)")
    ap.add_argument("--train-args", default="",
                    help="more options for every `train` (the seed set's and the fresh ones), e.g. '--epochs 5'")
    ap.add_argument("--no-write", action="store_true", help="write only into --work-dir (no BENCHMARKS.md, no "
                                                             "benchmarks/review_loop.json)")
    ap.add_argument("--add", action="store_true",
                    help="publish this run's sets beside those benchmarks/review_loop.json already has (a set "
                         "measured again keeps its published seeds this run did not measure; a seed measured again "
                         "is replaced); they must have the same budgets and orders")
    a = ap.parse_args(argv)
    if sorted(set(a.budgets)) != a.budgets or not all(1 <= b <= 100 for b in a.budgets):
        raise SystemExit(f"--budgets must rise strictly, each in 1..100, got {' '.join(map(str, a.budgets))}; "
                         "e.g. --budgets 10 30 60 100.")
    folders = {a.data_dir.name: a.data_dir} if a.data_dir else {name: DATA / SETS[name] for name in a.sets}
    os.umask(0o077)       # the data folders, databases and runs hold note text: owner-only
    a.work_dir.mkdir(parents=True, exist_ok=True)
    cli = Clinicode(train_args=shlex.split(a.train_args))
    t0 = time.perf_counter()
    sets = {name: measure_set(cli, name, folder, a.seeds, a.budgets, a.orders, a.work_dir)
            for name, folder in folders.items()}
    if a.add:   # a set measured again keeps the published seeds this run did not measure
        old = _published_sets(a.budgets, a.orders)
        sets = {**old, **{n: with_seeds(e, {**old.get(n, {}).get("seeds", {}), **e["seeds"]}, a.budgets, a.orders)
                          for n, e in sets.items()}}
    made = sorted({c for e in sets.values() for s in e["seeds"].values() for c in s["commits"]})
    seeds = sorted({int(k) for e in sets.values() for k in e["seeds"]})
    results = {"commit": _commit(), "runs_made_at": made, "machine": machine_line(), "budgets": a.budgets,
               "orders": a.orders, "seeds": seeds, "seed_share": SEED_SHARE, "top_k": TOP_K,
               "seconds": time.perf_counter() - t0, "sets": sets}
    (a.work_dir / "review_loop.json").write_text(json.dumps(results, indent=1) + "\n")
    if not a.no_write:
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    orders = "" if a.orders == list(ORDERS) else " --orders " + " ".join(a.orders)
    lines = [
        "## review: the loop through its own commands (`benchmarks/bench_review_loop.py`)",
        "",
        f"`python benchmarks/bench_review_loop.py --sets {' '.join(sets)} --seeds {' '.join(map(str, seeds))} "
        f"--budgets {' '.join(map(str, a.budgets))}{orders}`, runs made at commit {', '.join(made)}: `train` on a "
        "10% seed set, `review queue` the rest of train (the pool), then a round ending at each budget (% of the "
        "pool reviewed): the order picks the notes (`teach`: `review next`; `arrival`: queue order; `random`: "
        "seeded), a simulated coder who is never wrong decides them (one `review decide --done` a note with the gold "
        "codes and gold evidence spans), `review retrain` from the previous round's run, `review rescore`, "
        "`evaluate` on test. Beside it a fresh `train` on the same notes (seed set + every note reviewed). Test "
        "micro / macro-F1, mean of the seeds (worst seed in brackets); top 50 codes of training notes (labels.json). "
        "Every command is a separate process; seconds are wall time of whole commands, CPU is the process's. "
        f"{machine_line()}",
        "",
    ]
    for name, entry in sets.items():
        lines += table(name, entry, a.budgets, a.orders)
    publish("review-loop", lines, write=not a.no_write)
    return results


if __name__ == "__main__":
    main()
