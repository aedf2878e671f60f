"""Which note next, measured: a simulated coder replays gold labels in the order each next-note rule proposes.

A stand-in study, not the product's loop: its learner is refitted in this process from every reviewed note, without
LEAM and without `review retrain`'s chaining. The loop itself (`review next`, `decide`, `retrain`, `rescore`,
`evaluate`, each a command) is measured by benchmarks/bench_review_loop.py, whose figures docs/review.md quotes.

    python benchmarks/bench_review_learning.py [--data bc5cdr ncbi] [--codes top50 all] [--seeds 0 1 2]
        [--learner fused|tfidf-lr] [--seed-share 0.1] [--batch-share 0.1]
        [--rules arrival uncertainty rarity teach] [--no-write]

For each data set (../shared/data/<name>-disease-mesh or cmc2007-radiology-icd9), code set (the 50 codes with the most
training notes, or every code) and seed: a model is fitted on a random seed set (--seed-share of train); each round
the rule picks the next --batch-share of train from the notes not yet reviewed, the coder's decisions on them are
their gold codes and gold evidence spans, and the model is refitted on every note reviewed so far. Test micro-F1 and
macro-F1 at the threshold tuned on dev (as `train` tunes it) after each refit, and the refit's time.

--learner fused (the default model's parts that need no epochs): tfidf-lr, the title match and the codes' mentions
learnt from the reviewed notes' evidence spans, fused per frequency band on dev as `train --model fused` fuses them
(`clinicode.models.fused`); its LEAM part is left out, since each curve takes dozens of refits (LEAM's retrain is
timed by `bench_review_retrain.py`). --learner tfidf-lr: `train --model tfidf-lr`'s fit alone (the earlier table).

`arrival` is the queue's order (a random permutation per seed: the notes' arrival); the other rules are
`clinicode.review.teach.pick` on the signals `review queue` stores (`teach.signals`; unseen codes by their titles):
`uncertainty` and `rarity` alone, `teach` with `teach.TEACH`'s weights and the reviewed notes as `seen` (what `review
next` does). Writes the table to BENCHMARKS.md ("review-learning") and every curve to benchmarks/review_learning.json
(the sets measured now replace theirs; the others are kept), which the app's Review page plots.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine_line, multi_hot, publish, read_jsonl, read_titles  # noqa: E402
from clinicode.metrics import binarize, macro_prf, micro_prf, tune_threshold  # noqa: E402
from clinicode.models.fused.fusion import fit_fusion, fused_logits, sigmoid  # noqa: E402
from clinicode.models.fused.mentions import MentionLexicon  # noqa: E402
from clinicode.models.fused.model import title_rows  # noqa: E402
from clinicode.models.fused.scorer import bag_of_words  # noqa: E402
from clinicode.models.tfidf_lr.baseline import fit_tfidf_lr  # noqa: E402
from clinicode.review import teach  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SETS = {"bc5cdr": "bc5cdr-disease-mesh", "ncbi": "ncbi-disease-mesh", "cmc2007": "cmc2007-radiology-icd9"}
RULES = {"uncertainty": teach.Weights(1.0, 0.0, 0.0), "rarity": teach.Weights(0.0, 1.0, 0.0),
         "teach": teach.TEACH}
LEARNERS = ("fused", "tfidf-lr")
CURVES = ROOT / "benchmarks" / "review_learning.json"
BUDGETS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)




def load(name: str, codes: str) -> tuple[list[dict], list[dict], list[dict], list[str], list[str]]:
    folder = DATA / SETS[name]
    train, dev, test = (read_jsonl(folder / f"{s}.jsonl") for s in ("train", "dev", "test"))
    titles = read_titles(folder)
    count = collections.Counter(c for r in train for c in r["labels"])
    ranked = [c for c, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))]
    chosen = ranked[:50] if codes == "top50" else ranked
    return train, dev, test, chosen, [titles.get(c, "") for c in chosen]




class Set(NamedTuple):
    """One data set and code set, ready for `simulate`."""

    train: list[dict]
    codes: list[str]
    titles: list[str]
    dev: tuple[list[str], np.ndarray]     # texts, [N, K] gold
    test: tuple[list[str], np.ndarray]
    hits: np.ndarray                      # [N_train, K] `teach.title_hits`
    vecs: Any                             # the training notes' tf-idf rows (`teach.vectors`)
    rows: tuple[list[dict], list[dict]]   # the dev and test notes as read


def prepared(name: str, codes: str) -> Set:
    train, dev_rows, test_rows, chosen, titles = load(name, codes)
    texts = [r["text"] for r in train]
    return Set(train, chosen, titles, ([r["text"] for r in dev_rows], multi_hot(dev_rows, chosen)),
               ([r["text"] for r in test_rows], multi_hot(test_rows, chosen)), teach.title_hits(texts, titles),
               teach.vectors(texts), (dev_rows, test_rows))


class Fitted:
    """A refitted model: probabilities of notes, the dev-tuned threshold and each code's training notes."""

    def __init__(self, learner: str, rows: list[dict], codes: list[str], titles: list[str],
                 dev: tuple[list[str], np.ndarray]) -> None:
        texts, y = [r["text"] for r in rows], multi_hot(rows, codes)
        self.counts = y.sum(axis=0)
        self.lr = fit_tfidf_lr(texts, y, single_label=False)
        self.fused = learner == "fused"
        if self.fused:   # the coder's evidence spans teach the codes' mentions, as a training split's do
            self.titles = title_rows(self.lr, titles)
            self.mentions = MentionLexicon.build(codes, texts, [r.get("evidence") for r in rows])
            z_lr, z_title = self._parts(dev[0])
            self.fusion = fit_fusion(dev[1], np.zeros_like(z_lr), z_lr, self.counts, z_title=z_title)
        self.threshold = tune_threshold(dev[1], self.proba(dev[0]))

    def _parts(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """([N, K] tfidf-lr's logits, [N, K] title match + mentions), the fused scorer's own computation."""
        return bag_of_words(self.lr, self.titles, self.mentions, texts)

    def proba(self, texts: list[str]) -> np.ndarray:
        if not self.fused:
            return self.lr.predict_proba(texts)
        z_lr, z_title = self._parts(texts)
        return sigmoid(fused_logits(np.zeros_like(z_lr), z_lr, self.fusion, self.counts, z_title=z_title))

    def scores(self, test: tuple[list[str], np.ndarray]) -> tuple[float, float]:
        """(test micro-F1, test macro-F1) at the dev-tuned threshold."""
        yhat = binarize(self.proba(test[0]), self.threshold)
        return micro_prf(test[1], yhat)[2], macro_prf(test[1], yhat)[2]


def simulate(rule: str, learner: str, d: Set, *, seed: int, seed_n: int, batch: int,
             order_out: list[int] | None = None) -> list[dict]:
    """One curve on D; ORDER_OUT, when given, receives the indices of train in the order they were reviewed."""
    train, codes, titles, dev, test, hits, vecs, _ = d
    texts, y = [r["text"] for r in train], multi_hot(train, codes)
    order = list(np.random.default_rng(seed).permutation(len(texts)))
    reviewed, pool = order[:seed_n], order[seed_n:]
    curve = []
    while True:
        t0 = time.perf_counter()
        model = Fitted(learner, [train[i] for i in reviewed], codes, titles, dev)
        took = time.perf_counter() - t0
        micro, macro = model.scores(test)
        curve.append({"reviewed": len(reviewed), "share": len(reviewed) / len(texts), "micro_f1": micro,
                      "macro_f1": macro, "threshold": model.threshold, "refit_s": took,
                      "codes_decided": int(y[reviewed].sum())})
        if not pool:
            if order_out is not None:
                order_out.extend(int(i) for i in reviewed)
            return curve
        if rule == "arrival":
            nxt = pool[:batch]
        else:
            unc, rare = teach.signals(model.proba([texts[i] for i in pool]), model.threshold, model.counts,
                                      hits[pool])
            seen = vecs[reviewed] if rule == "teach" else None   # `review next` compares with the finished notes
            nxt = [pool[j] for j in teach.pick(unc, rare, batch, vecs=vecs[pool], weights=RULES[rule], seen=seen)]
        taken = set(nxt)
        reviewed = reviewed + nxt
        pool = [i for i in pool if i not in taken]


def at_budget(curve: list[dict], share: float) -> dict:
    """The point of CURVE with the most notes reviewed at or under SHARE of train."""
    return max((p for p in curve if p["share"] <= share + 1e-9), key=lambda p: p["share"])


def measure(name: str, codes: str, a: argparse.Namespace) -> dict:
    """One data set and code set: the full fit and every rule's curve for every seed."""
    d = prepared(name, codes)
    t0 = time.perf_counter()
    full = Fitted(a.learner, d.train, d.codes, d.titles, d.dev)
    full_s = time.perf_counter() - t0
    full_micro, full_macro = full.scores(d.test)
    n = len(d.train)
    seed_n, batch = max(1, round(a.seed_share * n)), max(1, round(a.batch_share * n))
    entry = {"data": SETS[name], "codes": len(d.codes), "train_notes": n, "test_notes": len(d.test[0]),
             "learner": a.learner, "full": {"micro_f1": full_micro, "macro_f1": full_macro, "fit_s": full_s},
             "seed_notes": seed_n, "batch_notes": batch, "seeds": a.seeds, "curves": {}}
    for rule in a.rules:
        entry["curves"][rule] = [simulate(rule, a.learner, d, seed=s, seed_n=seed_n, batch=batch) for s in a.seeds]
        print(f"{name}/{codes} {rule}: done", file=sys.stderr)
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["bc5cdr", "ncbi"], choices=sorted(SETS))
    ap.add_argument("--codes", nargs="+", default=["top50"], choices=["top50", "all"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--learner", default="fused", choices=LEARNERS)
    ap.add_argument("--seed-share", type=float, default=0.1)
    ap.add_argument("--batch-share", type=float, default=0.1)
    ap.add_argument("--rules", nargs="+", default=["arrival", "uncertainty", "rarity", "teach"],
                    choices=["arrival", *RULES])
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    a = ap.parse_args()
    measured = {f"{name}/{codes}": measure(name, codes, a) for name in a.data for codes in a.codes}
    # the curves file keeps the sets not measured now (read here, at the end: a run beside this one may have written)
    results: dict = json.loads(CURVES.read_text()) if CURVES.exists() and not a.no_write else {}
    results.update(measured)
    if not a.no_write:
        CURVES.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    lines = [
        "## review: which note next (`benchmarks/bench_review_learning.py`)",
        "",
        "`python benchmarks/bench_review_learning.py --data DATA --codes top50|all --seeds 0 1 2`: a simulated coder "
        "replays gold codes and gold evidence spans in the order each rule proposes; the model is refitted on every "
        "note reviewed so far (seed set and each round: below), test micro- and macro-F1 at the dev-tuned "
        "threshold, mean over the seeds (min-max in brackets). Learner `fused`: the default model's tfidf-lr, title "
        "match and mentions (learnt from the reviewed notes' spans), fused on dev, without its LEAM part; "
        "`tfidf-lr`: tfidf-lr alone. `full`: the same learner fitted on every training note. Rules: `arrival` (queue "
        "order), `uncertainty`, `rarity`, `teach` (`review next`'s default). Codes/note: gold codes decided per note "
        "reviewed at 60% (the coder's work per note). Macro > arrival: (budget, seed) pairs below 100% where the "
        "rule's macro-F1 is above arrival order's from the same seed set. Refit: mean seconds per refit along the "
        f"curve. {machine_line()}",
        "",
    ]
    for key, entry in results.items():
        lines += _table(key, entry)
    publish("review-learning", lines, write=not a.no_write)


def _table(key: str, entry: dict) -> list[str]:
    full = entry["full"]
    out = [f"**{key}**, learner {entry.get('learner', 'tfidf-lr')} ({entry['codes']} codes, {entry['train_notes']} "
           f"training notes, {entry['test_notes']} test notes; seed set {entry['seed_notes']} notes, then "
           f"{entry['batch_notes']} a round): full train micro-F1 {full['micro_f1']:.3f}, macro-F1 "
           f"{full['macro_f1']:.3f} (fit {full['fit_s']:.1f} s)", "",
           "| rule | " + " | ".join(f"{b:.0%} micro / macro" for b in BUDGETS)
           + " | codes/note | macro > arrival | refit s | reaches full micro at |",
           "|---|" + "---|" * (len(BUDGETS) + 4)]
    arrival = entry["curves"].get("arrival")
    for rule, curves in entry["curves"].items():
        cells = []
        for b in BUDGETS:
            pts = [at_budget(c, b) for c in curves]
            mi, ma = [p["micro_f1"] for p in pts], [p["macro_f1"] for p in pts]
            cells.append(f"{statistics.mean(mi):.3f} [{min(mi):.2f}-{max(mi):.2f}] / {statistics.mean(ma):.3f}")
        at60 = [at_budget(c, 0.6) for c in curves]
        cells.append(f"{statistics.mean(p.get('codes_decided', 0) / p['reviewed'] for p in at60):.2f}")
        if arrival is None or rule == "arrival":
            cells.append("")
        else:
            pairs = [(at_budget(c, b)["macro_f1"], at_budget(r, b)["macro_f1"])
                     for c, r in zip(curves, arrival) for b in BUDGETS[:-1]]
            cells.append(f"{sum(m > r for m, r in pairs)}/{len(pairs)}")
        cells.append(f"{statistics.mean(p['refit_s'] for c in curves for p in c):.2f}")
        reach = [next((p["share"] for p in c if p["micro_f1"] >= full["micro_f1"] - 1e-9), None) for c in curves]
        cells.append("never" if any(r is None for r in reach) else f"{max(reach):.0%} (worst seed)")
        out.append(f"| {rule} | " + " | ".join(cells) + " |")
    out.append("")
    return out


if __name__ == "__main__":
    main()
