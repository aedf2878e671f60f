"""Matching that survives clinical language (#50, #51): each mechanism's effect on dev, and the matching's cost.

    python benchmarks/bench_matching.py accuracy [--data bc5cdr ncbi cmc2007 cantemist] [--no-write]
    python benchmarks/bench_matching.py speed [--no-write]
    python benchmarks/bench_matching.py suggestions [--no-write]

`accuracy`: the default model's parts that need no LEAM epochs (tfidf-lr, the title match and the codes' mentions
learnt from the training split's evidence spans; `bench_review_learning.py --learner fused`), every code of the
training split, with the mentions built and matched (and the title match read: negation) under each
`clinicode.matching.Matching`: none of the mechanisms
(as before round 16), each one added alone, every kept one, and every kept one but one. DEV ONLY: dev is cut in two
halves (a fixed permutation); the fusion and the threshold are fitted on one and score the other, then the other way
round, and the two halves' predictions are pooled: micro-F1, macro-F1 and MAP (mean over notes with a gold code of the
average precision of their ranked codes). The test split is never read. Writes "matching-accuracy" into BENCHMARKS.md.

`speed`: title suggestions (every billable ICD-10-CM title as candidates) and mention matching (the lexicon learnt on
bc5cdr's train) on notes of 10k, 100k and 1M characters made of bc5cdr's dev notes, against an ordinary note's scoring
by tfidf-lr (the suggestions read at most what the model reads: `Predictor` cuts a truncated note first). Writes
"matching-speed".

`suggestions`: the title suggestions under each matching on bc5cdr DEV (every MeSH disease descriptor the model lacks
as candidates; `bench_suggestions.py`'s set-up): suggestions a note, share right, share of the unseen gold found.
Writes "matching-suggestions".
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine_line, multi_hot, publish, read_jsonl, read_titles  # noqa: E402
from clinicode.matching import DEFAULT, LEGACY, detect_language  # noqa: E402
from clinicode.metrics import binarize, macro_prf, micro_prf, tune_threshold  # noqa: E402
from clinicode.models.fused.fusion import fit_fusion, fused_logits, sigmoid  # noqa: E402
from clinicode.models.fused.mentions import MentionLexicon  # noqa: E402
from clinicode.models.fused.model import title_rows  # noqa: E402
from clinicode.models.fused.scorer import title_features  # noqa: E402
from clinicode.models.tfidf_lr.baseline import fit_tfidf_lr  # noqa: E402

DATA = Path(os.environ.get("CLINICODE_DATA", ROOT.parent / "shared" / "data"))  # beside the repository, or given
SETS = {"bc5cdr": "bc5cdr-disease-mesh", "ncbi": "ncbi-disease-mesh", "cmc2007": "cmc2007-radiology-icd9",
        "cantemist": "cantemist-icdo3"}
# one mechanism at a time, from none of them (LEGACY) and from the kept ones (DEFAULT)
ALONE = {"fold": dict(fold=True), "plural": dict(inflection="plural"), "snowball": dict(inflection="snowball"),
         "negation": dict(negation=True), "caps": dict(caps=True), "ordinary": dict(ordinary=True),
         "values": dict(values=True), "support 2": dict(support=2), "acronym support 2": dict(acronym_support=2),
         "weighted": dict(weighted=True), "longest": dict(longest=True)}
AROUND = {"without fold": dict(fold=False), "without plural": dict(inflection="none"),
          "snowball for plural": dict(inflection="snowball"), "with Spanish gender": dict(inflection="gender"),
          "with negation": dict(negation=True),
          "without caps": dict(caps=False), "without ordinary": dict(ordinary=False),
          "without values": dict(values=False),
          "with support 2": dict(support=2), "with acronym support 2": dict(acronym_support=2),
          "without weighted": dict(weighted=False), "without longest": dict(longest=False),
          "without weighted or longest": dict(weighted=False, longest=False)}




def load(name: str) -> tuple[list[dict], list[dict], list[str], list[str]]:
    """(train rows, dev rows, every code of train by training notes, their titles); test is never opened."""
    folder = DATA / SETS[name]
    train, dev = read_jsonl(folder / "train.jsonl"), read_jsonl(folder / "dev.jsonl")
    titles = read_titles(folder)
    count = collections.Counter(c for r in train for c in r["labels"])
    codes = [c for c, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))]
    return train, dev, codes, [titles.get(c, "") for c in codes]




def mean_average_precision(y: np.ndarray, s: np.ndarray) -> float:
    """Mean over notes with a gold code of the average precision of their codes ranked by score (ties: code order)."""
    aps = []
    for yi, si in zip(y.astype(bool), s):
        if not yi.any():
            continue
        order = np.argsort(-si, kind="stable")
        hits = yi[order]
        ranks = np.flatnonzero(hits) + 1
        aps.append(float(np.mean(np.arange(1, len(ranks) + 1) / ranks)))
    return float(np.mean(aps)) if aps else 0.0


def two_fold(y: np.ndarray, z_lr: np.ndarray, z_title: np.ndarray, counts: np.ndarray, *, seed: int = 0) -> dict:
    """Fusion and threshold fitted on one half of dev, scored on the other, both ways; pooled figures."""
    n = len(y)
    perm = np.random.default_rng(seed).permutation(n)
    halves = (perm[: n // 2], perm[n // 2:])
    proba = np.zeros(y.shape, dtype=np.float64)
    yhat = np.zeros(y.shape, dtype=bool)
    for fit, score in (halves, halves[::-1]):
        zero = np.zeros_like(z_lr[fit])
        fusion = fit_fusion(y[fit], zero, z_lr[fit], counts, z_title=z_title[fit])
        p_fit = sigmoid(fused_logits(zero, z_lr[fit], fusion, counts, z_title=z_title[fit]))
        t = tune_threshold(y[fit], p_fit)
        p = sigmoid(fused_logits(np.zeros_like(z_lr[score]), z_lr[score], fusion, counts, z_title=z_title[score]))
        proba[score] = p
        yhat[score] = binarize(p, t)
    return {"micro": micro_prf(y, yhat)[2], "macro": macro_prf(y, yhat)[2], "map": mean_average_precision(y, proba)}


def accuracy(name: str) -> list[dict]:
    train, dev, codes, titles = load(name)
    texts, dev_texts = [r["text"] for r in train], [r["text"] for r in dev]
    y, y_dev = multi_hot(train, codes), multi_hot(dev, codes)
    t0 = time.perf_counter()
    lr = fit_tfidf_lr(texts, y, single_label=False)
    x_dev = lr.transform(dev_texts).astype(np.float32)
    z_lr = np.asarray(x_dev @ lr.coef.T, dtype=np.float32) + lr.intercept                # [N, K]
    rows_t = title_rows(lr, titles)
    language = detect_language(texts)
    probe = MentionLexicon(codes=tuple(codes), language=language)
    z_titles = {neg: np.asarray((title_features(lr, probe.with_matching(replace(LEGACY, negation=neg)), dev_texts,
                                                x_dev) @ rows_t.T).todense(), dtype=np.float32)
                for neg in (False, True)}                                                # [N, K] each
    counts = y.sum(axis=0)
    print(f"{name}: {len(codes)} codes, tfidf-lr in {time.perf_counter() - t0:.0f} s", flush=True)
    evidence = [r.get("evidence") for r in train]
    rows = []
    configs = [("none (before)", LEGACY), ("no mentions", None)]
    configs += [(f"+ {k} alone", replace(LEGACY, **v)) for k, v in ALONE.items()]
    configs += [("the kept ones (default)", DEFAULT)]
    configs += [(f"default {k}", replace(DEFAULT, **v)) for k, v in AROUND.items()]
    if not any(titles) and not any(evidence):
        configs = [("nothing to match: no titles, no evidence spans", None)]
    for label, matching in configs:
        if matching is None:
            lex = MentionLexicon(codes=tuple(codes), language=language, matching=LEGACY)
        else:
            lex = MentionLexicon.build(codes, texts, evidence, matching=matching, language=language)
        t0 = time.perf_counter()
        z_title = z_titles[lex.matching.negation] + (lex.match(dev_texts, len(codes)) if len(lex) else 0.0)
        took = time.perf_counter() - t0
        got = two_fold(y_dev, z_lr, z_title, counts)
        rows.append({"set": name, "language": language, "config": label, "phrases": len(lex), **got,
                     "match_s": took})
        print(f"  {label:32s} {len(lex):6d} phrases  micro {got['micro']:.4f}  macro {got['macro']:.4f}  "
              f"MAP {got['map']:.4f}  ({took:.1f} s)", flush=True)
    return rows


def accuracy_table(rows: list[dict]) -> list[str]:
    lines = ["Matching mechanisms on DEV (two halves: fusion and threshold fitted on one, scored on the other, "
             "pooled); tfidf-lr + title match + mentions fused without LEAM, every code of train "
             "(`python benchmarks/bench_matching.py accuracy`). " + machine_line(), "",
             "| set (language) | mentions matched with | phrases | micro-F1 | macro-F1 | MAP |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['set']} ({r['language']}) | {r['config']} | {r['phrases']:,} | {r['micro']:.4f} | "
                     f"{r['macro']:.4f} | {r['map']:.4f} |")
    return lines


def speed(write: bool) -> None:
    from clinicode.codes.suggest import Suggester, system_titles
    from clinicode.codes.systems import CODE_SYSTEMS

    train, dev, codes, _ = load("bc5cdr")
    texts = [r["text"] for r in train]
    lex = MentionLexicon.build(codes, texts, [r.get("evidence") for r in train])
    lr = fit_tfidf_lr(texts, multi_hot(train, codes), single_label=False)
    t0 = time.perf_counter()
    sugg = Suggester(system_titles(CODE_SYSTEMS["ICD-10-CM"]))
    build = time.perf_counter() - t0
    pool = "\n\n".join(r["text"] for r in dev)
    ordinary = dev[0]["text"]

    def best(fn, repeat=3):
        out = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return min(out)

    lines = ["Title suggestions (every billable ICD-10-CM title, 74,736 candidates; the index built once in "
             f"{build:.1f} s) and mention matching (bc5cdr's {len(lex):,} phrases) against the same note's tfidf-lr "
             "scoring (`python benchmarks/bench_matching.py speed`; best of 3). " + machine_line(), "",
             "| note | characters | suggestions | mentions | the note's scoring | together / scoring |",
             "|---|---|---|---|---|---|"]
    for label, n in (("ordinary (bc5cdr dev)", len(ordinary)), ("10k", 10_000), ("100k", 100_000),
                     ("1M", 1_000_000)):
        note = ordinary if n == len(ordinary) else (pool * (n // len(pool) + 1))[:n]
        s = best(lambda: sugg.suggest(note))
        m = best(lambda: lex.match([note], len(codes)))
        base = best(lambda: lr.predict_proba([note]))
        lines.append(f"| {label} | {len(note):,} | {s * 1000:.1f} ms | {m * 1000:.1f} ms | {base * 1000:.1f} ms | "
                     f"{(s + m) / base:.2f}x |")
        print(lines[-1], flush=True)
    publish("matching-speed", lines, write=write)


def suggestions(write: bool) -> None:
    """The title suggestions under each matching, on bc5cdr DEV: every MeSH disease descriptor a checkpoint trained on
    train lacks is a candidate (with the MeSH tree), tfidf-lr's scores are what the model knows, the shipped bar and
    limit; a note's gold is its codes among the candidates."""
    from clinicode.codes.suggest import Suggester, read_tree
    from clinicode.matching import SUGGESTING

    train, dev, codes, titles = load("bc5cdr")
    lr = fit_tfidf_lr([r["text"] for r in train], multi_hot(train, codes), single_label=False)
    own = dict(zip(codes, titles))
    mesh = DATA / "mesh-diseases"
    cands = dict(line.split("\t", 1) for line in (mesh / "descriptions.tsv").read_text(encoding="utf-8").splitlines()
                 if "\t" in line)
    tree = read_tree(mesh / "mesh_tree.tsv")
    texts = [r["text"] for r in dev]
    proba = lr.predict_proba(texts)
    scores = [dict(zip(codes, map(float, row))) for row in proba]
    before = replace(SUGGESTING, fold=False, negation=False)
    variants = [("before (no fold, no negation)", before), ("+ fold", replace(before, fold=True)),
                ("+ negation", replace(before, negation=True)), ("fold + negation (shipped)", SUGGESTING),
                ("shipped, Snowball stems", replace(SUGGESTING, inflection="snowball"))]
    lines = ["Title suggestions on bc5cdr DEV under each matching: candidates every MeSH disease descriptor the "
             "every-code model lacks (with the tree), tfidf-lr's scores, the shipped bar and limit; gold: a note's "
             "codes among the candidates (`python benchmarks/bench_matching.py suggestions`). " + machine_line(), "",
             "| matching | suggestions a note | right | unseen gold found |", "|---|---|---|---|"]
    for label, matching in variants:
        sugg = Suggester({c: t.strip() for c, t in cands.items()}, own=own, tree=tree, matching=matching)
        gold = [{c for c in r["labels"] if c in sugg.titles} for r in dev]
        got = [{x.code for x in sugg.suggest(t, sc)} for t, sc in zip(texts, scores)]
        n, hits = sum(map(len, got)), sum(len(g & w) for g, w in zip(got, gold))
        lines.append(f"| {label} | {n / len(dev):.2f} | {hits / max(n, 1):.1%} | "
                     f"{hits / max(sum(map(len, gold)), 1):.1%} |")
        print(lines[-1], flush=True)
    publish("matching-suggestions", lines, write=write)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("accuracy", "speed", "suggestions"))
    ap.add_argument("--data", nargs="+", default=list(SETS), choices=list(SETS))
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    if a.what == "speed":
        speed(not a.no_write)
        return
    if a.what == "suggestions":
        suggestions(not a.no_write)
        return
    rows = [r for name in a.data for r in accuracy(name)]
    publish("matching-accuracy", accuracy_table(rows), write=not a.no_write)


if __name__ == "__main__":
    main()
