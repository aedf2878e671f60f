"""Blending tfidf-lr's scores with LEAM's, measured post hoc on trained runs (docs/accuracy-tuning.md, round 13).

At every code (bc5cdr-disease-mesh-all, ncbi-disease-mesh-all) LEAM leads tfidf-lr on micro-F1 and P@8 but trails it
on macro-AUC (issue 35, item 3). This study scores dev and test once with each checkpoint (`Predictor`), aligns
tfidf-lr's columns to LEAM's codes by name (a code tfidf-lr lacks scores 0) and measures three blends, each with the
LEAM weight w in WEIGHTS (w = 1: LEAM alone, w = 0: tfidf-lr alone):

- prob: p = w p_leam + (1 - w) p_lr;
- logit: p = sigmoid(w logit(p_leam) + (1 - w) logit(p_lr));
- rank: each code's scores turned to percentiles over the split's notes, then averaged with the same weights. A
  per-code rank has no threshold and does not compare codes within a note, so only its macro-AUC is reported.

micro-F1 is at the threshold tuned on dev for each blend and w (`clinicode.metrics.tune_threshold`, the rule training
uses: the first of 100 grid points on [0, 1] with the best dev micro-F1); macro-AUC and P@8 are `all_metrics`'s.
w is chosen on dev only, by RULE: among the weights whose dev micro-F1 is at least LEAM's own dev micro-F1 minus
F1_SLACK, the one with the largest dev macro-AUC (ties: the larger w). Test only reports: every weight's figures, and
the chosen blends against tfidf-lr alone with a paired bootstrap over the test notes (as `clinicode compare`).

    python benchmarks/study_blend.py [--study bc5cdr-all,ncbi-all,bc5cdr-50] [--bench /tmp/bench] [--json OUT]
        [--weights 0,0.25,0.5,0.75,1]

Each study names its runs under --bench (the run folders `bench_accuracy.py --runs` keeps); several LEAM runs (seeds)
are each blended with the one tfidf-lr run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
F1_SLACK = 0.005
RULE = (f"among the w whose dev micro-F1 >= LEAM's dev micro-F1 - {F1_SLACK}, the largest dev macro-AUC "
        "(ties: the larger w)")
# study: (data folder, LEAM run names, tfidf-lr run name) under --bench
STUDIES = {
    "bc5cdr-all": ("bc5cdr-disease-mesh", ["bc5cdr-disease-mesh-all-leam-1337"],
                   "bc5cdr-disease-mesh-all-tfidf-lr-1337"),
    "ncbi-all": ("ncbi-disease-mesh", ["ncbi-disease-mesh-all-leam-1337"], "ncbi-disease-mesh-all-tfidf-lr-1337"),
    "bc5cdr-50": ("bc5cdr-disease-mesh", [f"bc5cdr-disease-mesh-leam-{s}" for s in range(1337, 1342)],
                  "bc5cdr-disease-mesh-tfidf-lr-1337"),
}
EPS = 1e-6
N_BOOT = 2000   # paired-bootstrap resamples of the test notes, as bench_accuracy's gaps


def scored(run: Path, data_dir: Path) -> dict:
    """The run's codes, dev and test gold over them, and its scores on both, with the scoring seconds."""
    from clinicode.evaluate import scored_split
    from clinicode.predict import Predictor

    pred = Predictor.from_checkpoint(run, device="cpu")
    out: dict = {"codes": list(pred.codes), "seconds": 0.0}
    for split in ("dev", "test"):
        df, y, _ = scored_split(pred, data_dir, split)
        t0 = time.perf_counter()
        out[split] = pred.score(df["text"].tolist())
        out["seconds"] += time.perf_counter() - t0
        out[f"y_{split}"], out[f"ids_{split}"] = y.astype(bool), df["id"].tolist()
    return out


def aligned(lr: dict, codes: list[str], split: str) -> np.ndarray:
    """tfidf-lr's scores in the column order of CODES; a code it lacks scores 0."""
    where = {c: i for i, c in enumerate(lr["codes"])}
    s = np.zeros((lr[split].shape[0], len(codes)), dtype=np.float64)
    for j, c in enumerate(codes):
        if c in where:
            s[:, j] = lr[split][:, where[c]]
    return s


def percentile(s: np.ndarray) -> np.ndarray:
    """Each column's scores as mid-rank percentiles over the rows (ties share their mean rank)."""
    from scipy.stats import rankdata

    return rankdata(s, axis=0) / s.shape[0]


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def blend(kind: str, w: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if kind == "prob":
        return w * a + (1 - w) * b
    if kind == "logit":
        return 1.0 / (1.0 + np.exp(-(w * logit(a) + (1 - w) * logit(b))))
    return w * percentile(a) + (1 - w) * percentile(b)


def measure(leam: dict, lr: dict, weights: tuple[float, ...] = WEIGHTS) -> dict:
    """Dev and test figures of every blend and weight for one LEAM run against the tfidf-lr run."""
    from clinicode.metrics import all_metrics, auc_macro, paired_bootstrap, tune_threshold

    codes = leam["codes"]
    for split in ("dev", "test"):
        if lr[f"ids_{split}"] != leam[f"ids_{split}"]:
            raise SystemExit(f"the two runs scored different {split} notes; blend runs of the same data.")
    a = {s: leam[s].astype(np.float64) for s in ("dev", "test")}
    b = {s: aligned(lr, codes, s) for s in ("dev", "test")}
    rows, kept = [], {}
    for kind in ("prob", "logit", "rank"):
        for w in weights:
            row = {"blend": kind, "w": w}
            s = {split: blend(kind, w, a[split], b[split]) for split in ("dev", "test")}
            if kind == "rank":
                for split in ("dev", "test"):
                    row[split] = {"auc_macro": auc_macro(leam[f"y_{split}"], s[split])[0]}
            else:
                t = tune_threshold(leam["y_dev"], s["dev"])
                kept[(kind, w)] = (s["test"], t)
                for split in ("dev", "test"):
                    m = all_metrics(leam[f"y_{split}"], s[split], threshold=t)
                    row[split] = {k: m[k] for k in ("f1_micro", "auc_macro", "prec_at_8", "threshold")}
            rows.append(row)
    leam_dev_f1 = next(r for r in rows if r["blend"] == "prob" and r["w"] == 1.0)["dev"]["f1_micro"]
    chosen = {}
    for kind in ("prob", "logit"):
        ok = [r for r in rows if r["blend"] == kind and r["dev"]["f1_micro"] >= leam_dev_f1 - F1_SLACK]
        chosen[kind] = max(ok, key=lambda r: (r["dev"]["auc_macro"], r["w"]))["w"]
    # the chosen blends against tfidf-lr alone on test: a paired bootstrap over notes (as `clinicode compare`)
    boot = {kind: paired_bootstrap(leam["y_test"], [kept[(kind, w)]], [kept[(kind, 0.0)]], n_boot=N_BOOT)
            for kind, w in chosen.items()}
    return {"rows": rows, "chosen": chosen, "leam_dev_f1": leam_dev_f1, "boot": boot}


def table(result: dict) -> list[str]:
    lines = ["| blend | w (LEAM) | dev micro-F1 | dev macro-AUC | dev P@8 | threshold | test micro-F1 | "
             "test macro-AUC | test P@8 |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        d, t = r["dev"], r["test"]
        mark = " (chosen)" if result["chosen"].get(r["blend"]) == r["w"] else ""
        if r["blend"] == "rank":
            lines.append(f"| rank | {r['w']:.2f} | - | {d['auc_macro']:.4f} | - | - | - | {t['auc_macro']:.4f} | - |")
        else:
            lines.append(f"| {r['blend']} | {r['w']:.2f}{mark} | {d['f1_micro']:.4f} | {d['auc_macro']:.4f} | "
                         f"{d['prec_at_8']:.4f} | {d['threshold']:.3f} | {t['f1_micro']:.4f} | "
                         f"{t['auc_macro']:.4f} | {t['prec_at_8']:.4f} |")
    return lines


def goals(result: dict) -> list[str]:
    """The chosen prob and logit blends against tfidf-lr alone (w = 0) on test: micro-F1, P@8, macro-AUC."""
    out = []
    for kind, w in result["chosen"].items():
        rows = {r["w"]: r["test"] for r in result["rows"] if r["blend"] == kind}
        lr, got = rows[0.0], rows[w]
        parts = [f"{k} {got[k]:.4f} vs {lr[k]:.4f} ({'met' if got[k] >= lr[k] - 1e-12 else 'NOT met'})"
                 for k in ("f1_micro", "prec_at_8", "auc_macro")]
        b = result["boot"][kind]
        parts += [f"{k} minus tfidf-lr {b[k]['diff']:+.4f} [{b[k]['lo']:+.4f}, {b[k]['hi']:+.4f}] "
                  f"(below in {100 * b[k]['p_a_below_b']:.0f}% of {N_BOOT} resamples)"
                  for k in ("f1_micro", "auc_macro")]
        out.append(f"- {kind}, w = {w:.2f} (chosen on dev): " + "; ".join(parts))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=",".join(STUDIES), help=f"comma-separated, of {', '.join(STUDIES)}.")
    ap.add_argument("--bench", default="/tmp/bench", help="folder holding the run folders (bench_accuracy --runs).")
    ap.add_argument("--weights", default=",".join(str(w) for w in WEIGHTS),
                    help="LEAM weights to measure (0 and 1 are always added: the two models alone).")
    ap.add_argument("--json", default=None, metavar="OUT", help="also write every figure to this JSON file.")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    weights = tuple(sorted({0.0, 1.0} | {float(w) for w in args.weights.split(",") if w}))
    bench, everything = Path(args.bench), {}
    for name in [s for s in args.study.split(",") if s]:
        folder, leam_runs, lr_run = STUDIES[name]
        data_dir = DATA / folder
        lr = scored(bench / lr_run, data_dir)
        lr_row = json.loads((bench / f"{lr_run}.row.json").read_text(encoding="utf-8"))
        for run in leam_runs:
            leam = scored(bench / run, data_dir)
            leam_row = json.loads((bench / f"{run}.row.json").read_text(encoding="utf-8"))
            result = measure(leam, lr, weights)
            result["cost"] = {"leam_train_s": leam_row["seconds"], "lr_train_s": lr_row["seconds"],
                              "leam_score_s": leam["seconds"], "lr_score_s": lr["seconds"],
                              "n_notes": len(leam["ids_dev"]) + len(leam["ids_test"]), "n_codes": len(leam["codes"]),
                              "lr_codes_missing": len(set(leam["codes"]) - set(lr["codes"]))}
            everything[f"{name}/{run}"] = result
            c = result["cost"]
            print(f"\n### {name}: {run} + {lr_run}\n")
            print("\n".join(table(result)))
            print(f"\nRule: {RULE}; LEAM's dev micro-F1 {result['leam_dev_f1']:.4f}.")
            print("\n".join(goals(result)))
            print(f"Cost: train {c['leam_train_s']:.0f} s (LEAM) vs {c['lr_train_s']:.0f} s (tfidf-lr); scoring "
                  f"{c['n_notes']} notes (dev + test) {c['leam_score_s']:.1f} s vs {c['lr_score_s']:.1f} s; "
                  f"{c['n_codes']} codes, {c['lr_codes_missing']} of them missing from tfidf-lr.", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
