"""All labelled notes (#50, deliverable 6), measured on dev alone: should the fused model's parts that need no epochs
(tfidf-lr, the title match, the coders' mentions) refit on train + dev once dev has chosen the fusion and the
threshold, and should codes that only dev carries join the label set?

Dev is split in halves per seed (A, B). A plays dev (the fusion, the threshold), B plays test. Three fits:
- train:        the parts fitted on train, fused and thresholded on A (what `train` does today);
- train+dev (moved bands): the same fusion and threshold, the parts refitted on train + A, train's codes only, each
                code's fusion numbers from its band by its notes in train + A;
- train+dev:    the same, but each code keeps the fusion numbers of its band by train's notes (what `train --fit-on
                train+dev` does: dev chose them for the code as train had taught it);
- train+dev+codes: as train+dev, and the codes A carries that train lacks join the label set (in the band of the
                rarest codes).
Scores on B: micro-F1 and macro-F1 at the threshold, and MAP (each note's codes ranked; a gold code outside the label
set is never retrieved). Test is never read.

    python benchmarks/study_all_notes.py [--data cantemist bc5cdr ncbi cmc2007] [--seeds 0 1 2]
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

from benchmarks._common import multi_hot, read_jsonl, read_titles  # noqa: E402
from clinicode.metrics import binarize, macro_prf, tune_threshold  # noqa: E402
from clinicode.models.fused.fusion import fit_fusion, fused_logits, sigmoid  # noqa: E402
from clinicode.models.fused.mentions import MentionLexicon  # noqa: E402
from clinicode.models.fused.model import title_rows  # noqa: E402
from clinicode.models.fused.scorer import bag_of_words  # noqa: E402
from clinicode.models.tfidf_lr.baseline import fit_tfidf_lr  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SETS = {"cantemist": "cantemist-icdo3", "bc5cdr": "bc5cdr-disease-mesh", "ncbi": "ncbi-disease-mesh",
        "cmc2007": "cmc2007-radiology-icd9"}








def mean_ap(rows: list[dict], codes: list[str], scores: np.ndarray) -> float:
    """Mean over notes with gold codes of average precision over the note's ranked codes; a gold code outside CODES
    is never retrieved (it counts in the denominator)."""
    index = {c: k for k, c in enumerate(codes)}
    aps = []
    for i, r in enumerate(rows):
        gold = set(r["labels"])
        if not gold:
            continue
        inside = [index[c] for c in gold if c in index]
        if not inside:
            aps.append(0.0)
            continue
        order = np.argsort(-scores[i], kind="stable")
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(1, len(order) + 1)
        ranks = np.sort(rank[inside])
        aps.append(float(np.sum(np.arange(1, len(ranks) + 1) / ranks)) / len(gold))
    return float(np.mean(aps)) if aps else float("nan")


class Parts:
    """tfidf-lr, the title rows and the mentions fitted on ROWS for CODES."""

    def __init__(self, rows: list[dict], codes: list[str], titles: dict[str, str]) -> None:
        texts, y = [r["text"] for r in rows], multi_hot(rows, codes)
        self.codes, self.counts = codes, y.sum(axis=0)
        self.lr = fit_tfidf_lr(texts, y, single_label=False)
        self.titles = title_rows(self.lr, [titles.get(c, "") for c in codes])
        self.mentions = MentionLexicon.build(codes, texts, [r.get("evidence") for r in rows])

    def logits(self, texts: list[str], fusion, bands_of: np.ndarray | None = None) -> np.ndarray:
        """Fused logits; BANDS_OF: the training notes that choose each code's band (None: the parts' own)."""
        z_lr, z_title = bag_of_words(self.lr, self.titles, self.mentions, texts)
        counts = self.counts if bands_of is None else bands_of
        return fused_logits(np.zeros_like(z_lr), z_lr, fusion, counts, z_title=z_title)


def score(name: str, rows_b: list[dict], codes: list[str], p: np.ndarray, t: float) -> dict:
    y = multi_hot(rows_b, codes)
    # gold codes outside the label set are missed: count them in micro-F1's recall
    outside = sum(1 for r in rows_b for c in set(r["labels"]) if c not in set(codes))
    yhat = binarize(p, t)
    tp, pp, gp = int((yhat.astype(bool) & y.astype(bool)).sum()), int(yhat.sum()), int(y.sum()) + outside
    return {"micro_f1": 2 * tp / (pp + gp) if pp + gp else 0.0, "macro_f1": float(macro_prf(y, yhat)[2]),
            "map": mean_ap(rows_b, codes, p)}


def run(name: str, seed: int) -> dict:
    folder = DATA / SETS[name]
    train, dev = read_jsonl(folder / "train.jsonl"), read_jsonl(folder / "dev.jsonl")
    titles = read_titles(folder)
    order = np.random.default_rng(seed).permutation(len(dev))
    a = [dev[i] for i in order[: len(dev) // 2]]
    b = [dev[i] for i in order[len(dev) // 2:]]
    count = collections.Counter(c for r in train for c in r["labels"])
    codes = sorted(count)
    out = {}
    t0 = time.perf_counter()
    base = Parts(train, codes, titles)
    za_lr, za_title = bag_of_words(base.lr, base.titles, base.mentions, [r["text"] for r in a])
    y_a = multi_hot(a, codes)
    fusion = fit_fusion(y_a, np.zeros_like(za_lr), za_lr, base.counts, z_title=za_title)
    t = tune_threshold(y_a, sigmoid(base.logits([r["text"] for r in a], fusion)))
    out["train"] = score(name, b, codes, sigmoid(base.logits([r["text"] for r in b], fusion)), t)
    texts_b = [r["text"] for r in b]
    refit = Parts(train + a, codes, titles)
    out["train+dev (moved bands)"] = score(name, b, codes, sigmoid(refit.logits(texts_b, fusion)), t)
    out["train+dev"] = score(name, b, codes, sigmoid(refit.logits(texts_b, fusion, base.counts)), t)
    grown = [*codes, *sorted({c for r in a for c in r["labels"]} - set(codes))]
    refit_g = Parts(train + a, grown, titles)
    kept = np.concatenate([base.counts, np.zeros(len(grown) - len(codes), dtype=base.counts.dtype)])
    out["train+dev+codes"] = score(name, b, grown, sigmoid(refit_g.logits(texts_b, fusion, kept)), t)
    out["codes"] = {"train": len(codes), "grown": len(grown)}
    out["s"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=list(SETS), choices=sorted(SETS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=None, help="write every number as JSON here")
    args = ap.parse_args()
    results = {}
    for name in args.data:
        results[name] = [run(name, s) for s in args.seeds]
        for variant in ("train", "train+dev (moved bands)", "train+dev", "train+dev+codes"):
            cells = []
            for m in ("micro_f1", "macro_f1", "map"):
                v = [r[variant][m] for r in results[name]]
                cells.append(f"{m} {statistics.mean(v):.3f} (worst {min(v):.3f})")
            print(f"{name:10s} {variant:24s} " + "  ".join(cells), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
