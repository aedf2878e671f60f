"""The long tail, measured post hoc on trained runs (docs/accuracy-tuning.md, round 11). Two studies:

`rules`: which rule turns scores into predicted codes. Each run's checkpoint scores dev and test once (cached in --cache
under the run folder's name: clear it when a run of that name is retrained); every rule's parameters are chosen on
dev, and test only reports. Rules:
- global: one threshold, the first of 100 on [0, 1] with the best dev micro-F1 (today's rule, `tune_threshold`);
- top-k: each note's k highest codes, k in 1..30 tuned on dev;
- global+top1: the global rule plus each note's top code, t tuned on dev under that rule;
- dev picks global or +top1: global+top1 only where it beats the global rule on dev;
- per-code fallback / shrunk: each code's own F1-best dev threshold, for codes with >= m dev positives (fallback:
  the global one otherwise), or shrunk to the global one, t_k = (n_k t^_k + m t) / (n_k + m); m in
  {1, 2, 3, 5, 10, 20, inf} chosen by 2-fold cross-validation on dev (tuning on a half, scoring the other).

`untrained`: codes with a title and no training label, suggested from the title alone, on the mtsamples keyword
proxies: every keyword of mtsamples (train, dev, test) that is not one of the run's labels is a candidate whose title is
the keyword; each note's gold is its keywords among them; recall@k over those, pooled over notes. Scores compared:
title words found in the note (2 for the whole title as a phrase, plus the idf-weighted share of its words), tf-idf
cosine of title and note (fit on training notes), and the trained model's word vectors (title vector = mean of its
known words' vectors, as a code vector starts; score = max over positions of the cosine with the note's word vectors,
unwindowed or windowed by the run's W1, as code evidence reads them).

    python benchmarks/study_long_tail.py rules --data DATA_DIR RUN [RUN ...] [--cache DIR]
    python benchmarks/study_long_tail.py untrained RUN [--split dev|test] [--mtsamples DIR]
    python benchmarks/study_long_tail.py unseen RUN --data DIR [--split dev|test]

`unseen` (round 12): the same comparison on a coded-notes folder with titles (bc5cdr, ncbi): the candidates are the
codes of its descriptions.tsv that no training note carries.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np

GRID = np.linspace(0.0, 1.0, 100)
SHRINK_M = (1, 2, 3, 5, 10, 20, 10**9)   # 10**9: every code keeps the global threshold
TOP_K = tuple(range(1, 31))


# ---------------------------------------------------------------------------------------------- rules
def micro_f1(y: np.ndarray, yhat: np.ndarray) -> float:
    tp, pp, gp = int((y & yhat).sum()), int(yhat.sum()), int(y.sum())
    return 2 * tp / (pp + gp) if pp + gp else 0.0


def macro_f1(y: np.ndarray, yhat: np.ndarray) -> float:
    from clinicode.metrics import macro_prf
    return float(macro_prf(y, yhat)[2])


def top_mask(s: np.ndarray, k: int) -> np.ndarray:
    """Each row's k highest scores (ties: the lower label index), as a mask."""
    k = min(k, s.shape[1])
    out = np.zeros(s.shape, dtype=bool)
    np.put_along_axis(out, np.argsort(-s, axis=1, kind="stable")[:, :k], True, axis=1)
    return out


def best_threshold(y: np.ndarray, s: np.ndarray, extra: np.ndarray | None = None) -> float:
    """The first grid value with the best micro-F1 of [S > t] (| extra: codes always predicted)."""
    f = [micro_f1(y, (s > g) if extra is None else (s > g) | extra) for g in GRID]
    return float(GRID[int(np.argmax(f))])


def code_thresholds(y: np.ndarray, s: np.ndarray, t: float, m: int, *, shrink: bool) -> np.ndarray:
    """[K] per-code thresholds: each code's F1-best grid value (first of ties), kept for codes with >= m positives
    (else t), or shrunk to t with weight m."""
    n = y.sum(axis=0)
    best, best_f = np.full(s.shape[1], t), np.full(s.shape[1], -1.0)
    for g in GRID:
        yhat = s > g
        tp, pp = (yhat & y).sum(axis=0), yhat.sum(axis=0)
        f = np.where(pp + n > 0, 2 * tp / np.maximum(pp + n, 1), 0.0)
        better = f > best_f + 1e-12
        best[better], best_f[better] = g, f[better]
    return (n * best + m * t) / (n + m) if shrink else np.where(n >= m, best, t)


def choose_m(y: np.ndarray, s: np.ndarray, *, shrink: bool, seed: int = 0) -> int:
    """m by 2-fold cross-validation on dev (micro-F1 of the held-out half; ties: the larger m)."""
    perm = np.random.default_rng(seed).permutation(len(y))
    halves = (perm[: len(y) // 2], perm[len(y) // 2:])

    def score(m: int) -> float:
        total = 0.0
        for a, b in (halves, halves[::-1]):
            t = code_thresholds(y[a], s[a], best_threshold(y[a], s[a]), m, shrink=shrink)
            total += micro_f1(y[b], s[b] > t)
        return total
    return max(SHRINK_M, key=lambda m: (score(m), m))


def rules(y_dev: np.ndarray, s_dev: np.ndarray, s_test: np.ndarray) -> dict[str, tuple[str, np.ndarray]]:
    """Every rule: name -> (its dev-chosen parameters, the test predictions as a mask)."""
    out: dict[str, tuple[str, np.ndarray]] = {}
    t = best_threshold(y_dev, s_dev)
    out["global"] = (f"t={t:.2f}", s_test > t)
    ks = [k for k in TOP_K if k <= s_dev.shape[1]]
    k = max(ks, key=lambda k: (micro_f1(y_dev, top_mask(s_dev, k)), -k))
    out["top-k"] = (f"k={k}", top_mask(s_test, k))
    top_dev, top_test = top_mask(s_dev, 1), top_mask(s_test, 1)
    t1 = best_threshold(y_dev, s_dev, top_dev)
    out["global+top1"] = (f"t={t1:.2f}", (s_test > t1) | top_test)
    wins = micro_f1(y_dev, (s_dev > t1) | top_dev) > micro_f1(y_dev, s_dev > t) + 1e-12
    out["dev picks global or +top1"] = (f"+top1 t={t1:.2f}", (s_test > t1) | top_test) if wins else \
        (f"global t={t:.2f}", s_test > t)
    for shrink, name in ((False, "per-code fallback"), (True, "per-code shrunk")):
        m = choose_m(y_dev, s_dev, shrink=shrink)
        out[name] = (f"m={'inf' if m == SHRINK_M[-1] else m}", s_test > code_thresholds(y_dev, s_dev, t, m,
                                                                                           shrink=shrink))
    return out


def score_run(run: Path, data: Path, cache: Path) -> dict[str, np.ndarray]:
    """Dev and test scores and gold of RUN's checkpoint on DATA (cached as CACHE/<run name>.npz)."""
    path = cache / f"{run.name}.npz"
    if path.is_file():
        return dict(np.load(path, allow_pickle=False))
    from clinicode.predict import Predictor

    pred = Predictor.from_checkpoint(run / "checkpoint", device="cpu")
    index = {c: i for i, c in enumerate(pred.codes)}
    out = {}
    for part in ("dev", "test"):
        rows = [json.loads(line) for line in (data / f"{part}.jsonl").read_text(encoding="utf-8").splitlines() if line]
        y = np.zeros((len(rows), len(index)), dtype=bool)
        for i, row in enumerate(rows):
            y[i, [index[c] for c in row["labels"] if c in index]] = True
        out[f"y_{part}"], out[f"s_{part}"] = y, pred.score([row["text"] for row in rows])
    cache.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **out)
    return out


def rules_table(runs: list[Path], data: Path, cache: Path) -> str:
    got: dict[str, list] = {}
    for run in runs:
        d = score_run(run, data, cache)
        for name, (param, yhat) in rules(d["y_dev"], d["s_dev"], d["s_test"]).items():
            got.setdefault(name, []).append((param, micro_f1(d["y_test"], yhat), macro_f1(d["y_test"], yhat),
                                             yhat.sum() / len(yhat)))
    lines = [f"{data.name}, {len(runs)} run(s)", "",
             "| rule | dev-chosen | test micro-F1 mean / worst | macro-F1 mean / worst | codes per note |",
             "|---|---|---|---|---|"]
    for name, rows in got.items():
        a = np.array([r[1:] for r in rows])
        lines.append(f"| {name} | {', '.join(r[0] for r in rows)} | {a[:, 0].mean():.4f} / {a[:, 0].min():.4f} | "
                     f"{a[:, 1].mean():.4f} / {a[:, 1].min():.4f} | {a[:, 2].mean():.2f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- untrained codes
def recall_at(scores: np.ndarray, gold: list[list[int]], ks=(5, 10, 20)) -> dict[int, float]:
    """Pooled recall@k: gold codes found among each note's k best-scored candidates / all gold codes."""
    top = np.argsort(-scores, axis=1, kind="stable")[:, :max(ks)]
    total = sum(map(len, gold))
    return {k: sum(len(set(g) & set(top[i, :k].tolist())) for i, g in enumerate(gold)) / max(total, 1) for k in ks}


def title_word_scores(notes: list[list[str]], titles: list[list[str]], idf) -> np.ndarray:
    """[N, C] 2 when the whole title occurs as a phrase, plus the idf-weighted share of its words in the note."""
    out = np.zeros((len(notes), len(titles)), dtype=np.float32)
    for i, words in enumerate(notes):
        present, joined = set(words), f" {' '.join(words)} "
        for j, title in enumerate(titles):
            found = [w in present for w in title]
            if not any(found):
                continue
            share = sum(idf(w) for w, f in zip(title, found) if f) / sum(idf(w) for w in title)
            out[i, j] = share + (2.0 if all(found) and f" {' '.join(title)} " in joined else 0.0)
    return out


def suggestion_scores(ck, titles: list[str], notes: list[str], train_notes: list[str]) -> tuple[dict, dict]:
    """[N, C] scores of each candidate title for each note, by every method compared, and seconds per note.

    Methods: title words found in the note, tf-idf cosine of title and note (fit on the training notes), and the
    trained model's word vectors (title vector = mean of its known words' vectors, as a code vector starts; score = max
    over positions of its cosine with the note's word vectors, unwindowed or windowed by the run's W1), and tf-idf plus
    half the windowed model score. A title with no word the model knows gets -1 from the model.
    """
    import torch
    import torch.nn.functional as F
    from sklearn.feature_extraction.text import TfidfVectorizer

    from clinicode.constants import PAD_ID, UNK_ID
    from clinicode.data.text import tokenize

    torch.set_num_threads(1)
    title_words = [tokenize(t) for t in titles]
    note_words = [tokenize(t) for t in notes]
    df = Counter(w for t in train_notes for w in set(tokenize(t)))
    n_train = len(train_notes)

    def idf(w: str) -> float:
        return math.log((n_train + 1) / (df.get(w, 0) + 1)) + 1

    t0 = time.perf_counter()
    out = {"title words in the note": title_word_scores(note_words, title_words, idf)}
    secs = {"title words": (time.perf_counter() - t0) / len(notes)}
    t0 = time.perf_counter()
    vec = TfidfVectorizer(analyzer=tokenize, sublinear_tf=True).fit(train_notes)
    out["tf-idf cosine"] = (vec.transform(notes) @ vec.transform(titles).T).toarray()
    secs["tf-idf"] = (time.perf_counter() - t0) / len(notes)

    E = ck.model.word_emb.weight.detach()
    T, known = torch.zeros(len(titles), E.shape[1]), torch.zeros(len(titles), dtype=torch.bool)
    for j, words in enumerate(title_words):
        ids = [i for i in (ck.tokenizer.token_id(w) for w in words) if i is not None and i not in (PAD_ID, UNK_ID)]
        if ids:
            T[j], known[j] = E[ids].mean(0), True
    Tn = T / (T.norm(dim=-1, keepdim=True) + 1e-8)
    encs = ck.tokenizer.encode(notes)
    t0 = time.perf_counter()
    for name, w in (("model word vectors, best word", None),
                    ("model word vectors, W1 window", ck.model.phrase_w.detach())):
        S = np.zeros((len(notes), len(titles)), dtype=np.float32)
        with torch.inference_mode():
            for i, enc in enumerate(encs):
                V = E[torch.tensor(enc.ids)]
                Vn = V / (V.norm(dim=-1, keepdim=True) + 1e-8)
                if w is not None:
                    Vn = F.conv1d(Vn.T.unsqueeze(1), w.view(1, 1, -1), padding=w.numel() // 2).squeeze(1).T
                    Vn = Vn / (Vn.norm(dim=-1, keepdim=True) + 1e-8)
                S[i] = (Vn @ Tn.T).amax(0).numpy()
        S[:, ~known.numpy()] = -1.0
        out[name] = S
    secs["model"] = (time.perf_counter() - t0) / 2 / len(notes)
    out["tf-idf + 0.5 x model W1 window"] = out["tf-idf cosine"] + 0.5 * out["model word vectors, W1 window"]
    out["n_unknown"] = int((~known).sum())
    return out, secs


def _table(head: str, scores: dict, gold: list[list[int]]) -> str:
    lines = [head, "", "| score | recall@5 | recall@10 | recall@20 |", "|---|---|---|---|"]
    for name, S in scores.items():
        if name == "n_unknown":
            continue
        r = recall_at(S, gold)
        lines.append(f"| {name} | {r[5]:.3f} | {r[10]:.3f} | {r[20]:.3f} |")
    return "\n".join(lines)


def untrained_table(run: Path, split: str, mtsamples: Path) -> str:
    from clinicode.checkpoint import load_checkpoint

    ck = load_checkpoint(run / "checkpoint")
    rows = {p: [json.loads(line) for line in (mtsamples / f"{p}.jsonl").read_text(encoding="utf-8").splitlines()
                if line] for p in ("train", "dev", "test")}

    def keywords(row: dict) -> set[str]:
        return {" ".join(k.lower().split()) for k in row.get("keywords") or []} - {""}
    cands = sorted(set().union(*(keywords(r) for p in rows for r in rows[p])) - set(ck.labels.codes))
    index = {c: i for i, c in enumerate(cands)}
    notes = rows[split]
    gold = [[index[k] for k in keywords(r) if k in index] for r in notes]
    scores, secs = suggestion_scores(ck, cands, [r["text"] for r in notes], [r["text"] for r in rows["train"]])
    return _table(f"{run.name}, {split}: {len(ck.labels)} labels, {len(cands)} candidates ({scores['n_unknown']} with "
                  f"no word the model knows), {sum(map(len, gold))} untrained gold keywords in {sum(map(bool, gold))} "
                  f"of {len(notes)} notes; seconds per note: title words {secs['title words']:.3f}, model "
                  f"{secs['model']:.3f}", scores, gold)


def unseen_table(run: Path, data: Path, split: str, more_titles: list[Path] = ()) -> str:
    """Codes with a title (descriptions.tsv) and no training note, suggested from the title, on a coded-notes folder.

    Candidates: every code of descriptions.tsv (and of the `more_titles` files: distractors, codes this corpus never
    uses) that no training note carries; each note's gold: its codes among them.
    """
    from clinicode.checkpoint import load_checkpoint

    ck = load_checkpoint(run / "checkpoint")
    rows = {p: [json.loads(line) for line in (data / f"{p}.jsonl").read_text(encoding="utf-8").splitlines() if line]
            for p in ("train", split)}
    titled = {}
    for f in [*more_titles, data / "descriptions.tsv"]:
        titled.update(line.split("\t", 1) for line in f.read_text(encoding="utf-8").splitlines() if "\t" in line)
    seen = {c for r in rows["train"] for c in r["labels"]}
    cands = sorted(c for c in titled if c not in seen and c not in set(ck.labels.codes))
    index = {c: i for i, c in enumerate(cands)}
    notes = rows[split]
    gold = [[index[c] for c in r["labels"] if c in index] for r in notes]
    n_pairs = sum(len(r["labels"]) for r in notes)
    n_untitled = sum(c not in seen and c not in titled for r in notes for c in r["labels"])
    titles = [titled[c].strip() for c in cands]
    scores, secs = suggestion_scores(ck, titles, [r["text"] for r in notes], [r["text"] for r in rows["train"]])
    scores["title words, idf over the titles (no training notes)"] = title_scores_from_titles(
        titles, [r["text"] for r in notes])
    return _table(f"{run.name}, {data.name} {split}: {len(ck.labels)} labels, {len(cands)} candidates (titled, no "
                  f"training note; {scores['n_unknown']} with no word the model knows); {sum(map(len, gold))} of the "
                  f"split's {n_pairs} note-code pairs ({sum(map(len, gold)) / max(n_pairs, 1):.1%}) use one, in "
                  f"{sum(map(bool, gold))} of {len(notes)} notes ({n_untitled} more pairs use an unseen code without "
                  f"a title); seconds per note: title words {secs['title words']:.4f}, tf-idf {secs['tf-idf']:.4f}, "
                  f"model {secs['model']:.4f}", scores, gold) + "\n\n" + _suggestion_rules(scores, gold) + "\n" + \
        _shipped_rule(cands, titles, [r["text"] for r in notes], gold)


def _shipped_rule(cands: list[str], titles: list[str], notes: list[str], gold: list[list[int]]) -> str:
    """`predict --titles` itself (`clinicode.codes.titles.TitleIndex`, at most `TITLE_SUGGESTIONS` per note)."""
    from benchmarks._common import TITLE_SUGGESTIONS
    from clinicode.codes.titles import TitleIndex

    index = TitleIndex(dict(zip(cands, titles)))
    where = {c: i for i, c in enumerate(cands)}
    n = hits = 0
    for text, g in zip(notes, gold):
        found = {where[m.code] for m in index.match(text, limit=TITLE_SUGGESTIONS)}
        n += len(found)
        hits += len(found & set(g))
    return (f"| `predict --titles` (every title word, stop words aside) | {n / len(notes):.2f} | "
            f"{hits / max(n, 1):.3f} | {hits / max(sum(map(len, gold)), 1):.3f} |")


def title_scores_from_titles(titles: list[str], notes: list[str]) -> np.ndarray:
    """`title_word_scores` with each word's idf taken over the titles themselves (a word in many titles, "diseases",
    "syndrome", counts little): what predict can compute from a titles file alone, without training notes."""
    from clinicode.data.text import tokenize

    title_words = [tokenize(t) for t in titles]
    df = Counter(w for t in title_words for w in set(t))

    def idf(w: str) -> float:
        return math.log((len(titles) + 1) / (df.get(w, 0) + 1)) + 1

    return title_word_scores([tokenize(t) for t in notes], title_words, idf)


def _suggestion_rules(scores: dict, gold: list[list[int]]) -> str:
    """Suggestions a coder would read: every candidate above a bar (not a fixed 10 per note), as precision/recall."""
    lines = ["| suggest (title words, idf over titles) | suggestions per note | precision | recall |",
             "|---|---|---|---|"]
    S = scores["title words, idf over the titles (no training notes)"]
    n_gold = sum(map(len, gold))
    for name, mask in (("the whole title as a phrase", S >= 2.0),
                       ("every title word, in any order", S >= 1.0 - 1e-9),
                       ("at least half the title's weight", S >= 0.5)):
        hits = sum(int(mask[i, g].sum()) for i, g in enumerate(gold) if g)
        n = int(mask.sum())
        lines.append(f"| {name} | {n / len(gold):.2f} | {hits / max(n, 1):.3f} | {hits / max(n_gold, 1):.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="study", required=True)
    r = sub.add_parser("rules", help="threshold rules on dev-chosen parameters, test reported")
    r.add_argument("--data", type=Path, required=True, help="the prepared set the runs trained on")
    r.add_argument("--cache", type=Path, default=Path("runs/study-long-tail"), help="dev/test scores per run")
    r.add_argument("runs", type=Path, nargs="+")
    u = sub.add_parser("untrained", help="title-only suggestions for codes without training labels")
    u.add_argument("run", type=Path)
    u.add_argument("--split", choices=("dev", "test"), default="test")
    u.add_argument("--mtsamples", type=Path, default=Path(__file__).resolve().parents[1] / "../shared/data/mtsamples")
    n = sub.add_parser("unseen", help="title-only suggestions for titled codes without a training note (coded notes)")
    n.add_argument("run", type=Path)
    n.add_argument("--data", type=Path, required=True, help="coded-notes folder with descriptions.tsv")
    n.add_argument("--split", choices=("dev", "test"), default="dev")
    n.add_argument("--more-titles", type=Path, action="append", default=[],
                   help="another code<TAB>title file whose codes join the candidates (distractors)")
    a = ap.parse_args()
    if a.study == "rules":
        print(rules_table(a.runs, a.data, a.cache))
    elif a.study == "untrained":
        print(untrained_table(a.run, a.split, a.mtsamples))
    else:
        print(unseen_table(a.run, a.data, a.split, a.more_titles))


if __name__ == "__main__":
    main()
