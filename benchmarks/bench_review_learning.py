"""Which note next, measured: a simulated coder replays gold labels in the order each next-note rule proposes.

    python benchmarks/bench_review_learning.py [--data bc5cdr ncbi] [--codes top50 all] [--seeds 0 1 2]
        [--seed-share 0.1] [--batch-share 0.05] [--rules arrival uncertainty rarity teach] [--no-write]

For each data set (../shared/data/<name>-disease-mesh or cmc2007-radiology-icd9), code set (the 50 codes with the most
training notes, or every code) and seed: a tfidf-lr model (`train --model tfidf-lr`'s fit, seconds each) is fitted
on a random seed set (--seed-share of train); each round the rule picks the next --batch-share of train from the notes
not yet reviewed, the coder's decisions on them are their gold codes, and the model is refitted on every note reviewed
so far. Test micro-F1 and macro-F1 at the threshold tuned on dev (as `train` tunes it) after each refit, and the
refit's time. `arrival` is the queue's order (a random permutation per seed: the notes' arrival); the other rules are
`clinicode.review.teach.pick` with weights (uncertainty, rarity, diversity) of (1,0,0), (0,1,0) and (1,1,1), on the
same signals `review queue` stores (`teach.signals`; unseen codes by their titles, from labels.tsv).

Writes the table to BENCHMARKS.md ("review-learning") and every curve to benchmarks/review_learning.json, which the
app's Review page plots. LEAM is not refitted here (each of these curves takes dozens of refits); its retrain is timed
by `bench_review_retrain.py`.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine_line, publish  # noqa: E402
from clinicode.metrics import binarize, macro_prf, micro_prf, tune_threshold  # noqa: E402
from clinicode.models.tfidf_lr.baseline import fit_tfidf_lr  # noqa: E402
from clinicode.review import teach  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SETS = {"bc5cdr": "bc5cdr-disease-mesh", "ncbi": "ncbi-disease-mesh", "cmc2007": "cmc2007-radiology-icd9"}
RULES = {"uncertainty": teach.Weights(1.0, 0.0, 0.0), "rarity": teach.Weights(0.0, 1.0, 0.0),
         "teach": teach.TEACH}
CURVES = ROOT / "benchmarks" / "review_learning.json"
BUDGETS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)


def _read(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load(name: str, codes: str) -> tuple[list[dict], list[dict], list[dict], list[str], list[str]]:
    folder = DATA / SETS[name]
    train, dev, test = (_read(folder / f"{s}.jsonl") for s in ("train", "dev", "test"))
    titles: dict[str, str] = {}
    with open(folder / "labels.tsv", encoding="utf-8") as f:
        head = f.readline().rstrip("\n").split("\t")
        for line in f:
            row = dict(zip(head, line.rstrip("\n").split("\t")))
            titles[row.get("code") or row.get("label", "")] = row.get("title", "")
    count = collections.Counter(c for r in train for c in r["labels"])
    ranked = [c for c, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))]
    chosen = ranked[:50] if codes == "top50" else ranked
    return train, dev, test, chosen, [titles.get(c, "") for c in chosen]


def multi_hot(rows: list[dict], codes: list[str]) -> np.ndarray:
    index = {c: k for k, c in enumerate(codes)}
    y = np.zeros((len(rows), len(codes)), dtype=np.int8)
    for i, r in enumerate(rows):
        for c in r["labels"]:
            if c in index:
                y[i, index[c]] = 1
    return y


def scores(model, dev: tuple[list[str], np.ndarray], test: tuple[list[str], np.ndarray]) -> tuple[float, float, float]:
    """(test micro-F1, test macro-F1, threshold): at the threshold tuned on dev, as `train` does."""
    t = tune_threshold(dev[1], model.predict_proba(dev[0]))
    yhat = binarize(model.predict_proba(test[0]), t)
    return micro_prf(test[1], yhat)[2], macro_prf(test[1], yhat)[2], t


def simulate(rule: str, texts: list[str], y: np.ndarray, dev: tuple, test: tuple, hits: np.ndarray, vecs, *,
             seed: int, seed_n: int, batch: int) -> list[dict]:
    order = list(np.random.default_rng(seed).permutation(len(texts)))
    reviewed, pool = order[:seed_n], order[seed_n:]
    curve = []
    while True:
        t0 = time.perf_counter()
        model = fit_tfidf_lr([texts[i] for i in reviewed], y[reviewed], single_label=False)
        took = time.perf_counter() - t0
        micro, macro, threshold = scores(model, dev, test)
        curve.append({"reviewed": len(reviewed), "share": len(reviewed) / len(texts), "micro_f1": micro,
                      "macro_f1": macro, "threshold": threshold, "refit_s": took})
        if not pool:
            return curve
        if rule == "arrival":
            nxt = pool[:batch]
        else:
            probs = model.predict_proba([texts[i] for i in pool])
            unc, rare = teach.signals(probs, threshold, y[reviewed].sum(axis=0), hits[pool])
            nxt = [pool[j] for j in teach.pick(unc, rare, batch, vecs=vecs[pool], weights=RULES[rule])]
        taken = set(nxt)
        reviewed = reviewed + nxt
        pool = [i for i in pool if i not in taken]


def at_budget(curve: list[dict], share: float) -> dict:
    """The point of CURVE with the most notes reviewed at or under SHARE of train."""
    return max((p for p in curve if p["share"] <= share + 1e-9), key=lambda p: p["share"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["bc5cdr", "ncbi"], choices=sorted(SETS))
    ap.add_argument("--codes", nargs="+", default=["top50"], choices=["top50", "all"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--seed-share", type=float, default=0.1)
    ap.add_argument("--batch-share", type=float, default=0.05)
    ap.add_argument("--rules", nargs="+", default=["arrival", "uncertainty", "rarity", "teach"],
                    choices=["arrival", *RULES])
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    a = ap.parse_args()
    results: dict = json.loads(CURVES.read_text()) if CURVES.exists() and not a.no_write else {}
    lines = []
    for name in a.data:
        for codes in a.codes:
            train, dev_rows, test_rows, chosen, titles = load(name, codes)
            texts, y = [r["text"] for r in train], multi_hot(train, chosen)
            dev = ([r["text"] for r in dev_rows], multi_hot(dev_rows, chosen))
            test = ([r["text"] for r in test_rows], multi_hot(test_rows, chosen))
            hits = teach.title_hits(texts, titles)
            vecs = teach.vectors(texts)
            t0 = time.perf_counter()
            full = fit_tfidf_lr(texts, y, single_label=False)
            full_s = time.perf_counter() - t0
            full_micro, full_macro, _ = scores(full, dev, test)
            seed_n, batch = max(1, round(a.seed_share * len(texts))), max(1, round(a.batch_share * len(texts)))
            key = f"{name}/{codes}"
            entry = {"data": SETS[name], "codes": len(chosen), "train_notes": len(texts), "test_notes": len(test_rows),
                     "full": {"micro_f1": full_micro, "macro_f1": full_macro, "fit_s": full_s},
                     "seed_notes": seed_n, "batch_notes": batch, "curves": {}}
            for rule in a.rules:
                entry["curves"][rule] = [simulate(rule, texts, y, dev, test, hits, vecs, seed=s, seed_n=seed_n,
                                                  batch=batch) for s in a.seeds]
                print(f"{key} {rule}: done", file=sys.stderr)
            entry["seeds"] = a.seeds
            results[key] = entry
    for key, entry in results.items():  # every set measured so far (the curves file keeps earlier runs' sets)
        lines += _table(key, entry, entry.get("seeds", a.seeds))
    if not a.no_write:
        CURVES.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    head = [
        "## review: which note next (`benchmarks/bench_review_learning.py`)",
        "",
        f"`python benchmarks/bench_review_learning.py --data DATA --codes top50|all --seeds "
        f"{' '.join(map(str, a.seeds))} --batch-share {a.batch_share}`: a simulated coder replays gold codes in the "
        "order each rule proposes; "
        f"tfidf-lr refitted on every note reviewed so far (seed set {a.seed_share:.0%} of train, then "
        f"{a.batch_share:.0%} of train per round), test micro- and macro-F1 at the dev-tuned threshold, mean over "
        f"{len(a.seeds)} seeds (min-max in brackets). `full`: tfidf-lr fitted on every training note. Rules: "
        "`arrival` (queue order), `uncertainty`, `rarity`, `teach` (both plus diversity: `review next`'s "
        f"default). Refit: mean seconds per refit along the curve. {machine_line()}",
        "",
    ]
    publish("review-learning", head + lines, write=not a.no_write)


def _table(key: str, entry: dict, seeds: list[int]) -> list[str]:
    full = entry["full"]
    out = [f"**{key}** ({entry['codes']} codes, {entry['train_notes']} training notes, {entry['test_notes']} test "
           f"notes): full train micro-F1 {full['micro_f1']:.3f}, macro-F1 {full['macro_f1']:.3f} "
           f"(fit {full['fit_s']:.1f} s)", "",
           "| rule | " + " | ".join(f"{b:.0%} micro / macro" for b in BUDGETS) + " | refit s | reaches full micro at |",
           "|---|" + "---|" * (len(BUDGETS) + 2)]
    for rule, curves in entry["curves"].items():
        cells = []
        for b in BUDGETS:
            pts = [at_budget(c, b) for c in curves]
            mi, ma = [p["micro_f1"] for p in pts], [p["macro_f1"] for p in pts]
            cells.append(f"{statistics.mean(mi):.3f} [{min(mi):.2f}-{max(mi):.2f}] / {statistics.mean(ma):.3f}")
        refit = statistics.mean(p["refit_s"] for c in curves for p in c)
        reach = []
        for c in curves:
            hit = next((p["share"] for p in c if p["micro_f1"] >= full["micro_f1"] - 1e-9), None)
            reach.append(hit)
        reached = "never" if any(r is None for r in reach) else f"{max(reach):.0%} (worst seed)"
        cells.append(f"{refit:.2f}")
        cells.append(reached)
        out.append(f"| {rule} | " + " | ".join(cells) + " |")
    out.append("")
    return out


if __name__ == "__main__":
    main()
