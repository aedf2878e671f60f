"""The fused model's design measured post hoc on trained LEAM and tfidf-lr runs (docs/accuracy-tuning.md, round 14).

Stacked fusion (`clinicode.models.fused.fusion`): each part's logits divided by a temperature fitted on dev, mixed
per frequency band of training-note counts (1-2, 3-10, 11-50, >50) with LEAM weights chosen on dev by a rule fixed
in advance, then optionally a per-code threshold for rare codes (SCutfbr, tuned on dev) folded into the logit. Every
number is fitted on dev; test only reports. Beside it: each part alone, round 13's logit blend (w = 0.25, one global
weight, no temperatures), and the fused model with one part switched off at scoring (what each part contributes per
band). Whether per-code thresholds help is judged on dev alone, by 2-fold cross-fitting within dev (fit on one half,
score the other), before test is read.

    python benchmarks/study_fusion.py --leam RUN[,RUN...] --lr RUN --data ../shared/data/bc5cdr-disease-mesh
        [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_accuracy import band_figures
from study_blend import aligned, scored


def fused_parts(run: Path, data_dir: Path) -> tuple[dict, dict, np.ndarray]:
    """The parts' dev and test logits of a fused run ({"dev": (z_leam, z_lr, z_title), ...}), the gold, the counts."""
    from clinicode.evaluate import scored_split
    from clinicode.predict import Predictor

    pred = Predictor.from_checkpoint(run, device="cpu")
    z, y = {}, {}
    for split in ("dev", "test"):
        df, yy, _ = scored_split(pred, data_dir, split)
        z[split], y[split] = pred.scorer.logits(df["text"].tolist()), yy.astype(bool)
    ck = pred.checkpoint
    return z, y, np.array([ck.train_counts.get(c, 0) for c in ck.labels.codes])


def _rows(zs: tuple, idx: np.ndarray) -> tuple:
    return tuple(None if x is None else x[idx] for x in zs)


def _fused(zs: tuple, f, counts: np.ndarray, part: str = "both") -> np.ndarray:
    """The fused logits of the parts ZS = (z_leam, z_lr, z_title) under fusion F (PART: which parts are on)."""
    from clinicode.models.fused.fusion import fused_logits

    return fused_logits(zs[0], zs[1], f, counts, parts=part, z_title=zs[2])


def _fit(zs: tuple, yy: np.ndarray, rule: str, counts: np.ndarray):
    """The fusion fitted on the parts ZS and gold YY by RULE ("auc+platt, no titles": without the title part)."""
    from clinicode.models.fused.fusion import fit_fusion

    if rule == "auc+platt, no titles":
        return fit_fusion(yy, zs[0], zs[1], counts, rule="auc+platt")
    return fit_fusion(yy, zs[0], zs[1], counts, rule=rule, z_title=zs[2])


def _offsets_dev_cv(y_dev: np.ndarray, zd: np.ndarray, counts: np.ndarray) -> dict[str, float]:
    """The dev-only judgement of the per-code thresholds: 2-fold within dev, 5 random halvings; the mean change they
    make on the held-out half."""
    from clinicode.metrics import tune_threshold
    from clinicode.models.fused.fusion import per_code_offsets, sigmoid

    cv = []
    rng = np.random.default_rng(0)
    for _ in range(5):
        order = rng.permutation(len(zd))
        halves = (order[: len(order) // 2], order[len(order) // 2:])
        for a, b in (halves, halves[::-1]):
            ta = tune_threshold(y_dev[a], sigmoid(zd[a]))
            off = per_code_offsets(y_dev[a], zd[a], counts, ta)
            base = band_figures(y_dev[b], sigmoid(zd[b]), ta, counts)
            got = band_figures(y_dev[b], sigmoid(zd[b] + off), ta, counts)
            cv.append({k: got[k] - base[k] for k in ("f1_micro", "f1_macro", "rare<10_f1", "prec_at_8")
                       if k in got and k in base})
    return {k: float(np.mean([c[k] for c in cv if k in c])) for k in cv[0]}


def _rules_dev_cv(z_dev: tuple, y_dev: np.ndarray, rules: list[str], counts: np.ndarray) -> dict[str, dict]:
    """The weight rules judged on dev alone: fitted on one half of dev, scored on the other (5 halvings x 2)."""
    from clinicode.metrics import tune_threshold
    from clinicode.models.fused.fusion import sigmoid

    rules_cv: dict[str, list[dict]] = {r: [] for r in rules}
    rng = np.random.default_rng(1)
    for _ in range(5):
        order = rng.permutation(len(y_dev))
        halves = (order[: len(order) // 2], order[len(order) // 2:])
        for a, b in (halves, halves[::-1]):
            za, zb = _rows(z_dev, a), _rows(z_dev, b)
            for r in rules:
                f = _fit(za, y_dev[a], r, counts)
                ta = tune_threshold(y_dev[a], sigmoid(_fused(za, f, counts)))
                rules_cv[r].append(band_figures(y_dev[b], sigmoid(_fused(zb, f, counts)), ta, counts))
    return {r: {k: float(np.nanmean([x[k] for x in v if k in x])) for k in ("f1_micro", "auc_macro",
                                                                            "prec_at_8", "f1_macro",
                                                                            "rare<10_auc")}
            for r, v in rules_cv.items()}


def study(leam: dict | None, lr: dict | None, counts: np.ndarray, parts: tuple[dict, dict] | None = None) -> dict:
    """Every variant fitted on dev and scored on dev and test; the rules and the per-code thresholds also judged by
    cross-fitting within dev. PARTS: ({split: (z_leam, z_lr, z_title)}, {split: gold}) of a fused run."""
    from clinicode.metrics import tune_threshold
    from clinicode.models.fused.fusion import Fusion, logit, per_code_offsets, sigmoid

    if parts is not None:
        z, y = parts
    else:
        z = {s: (logit(leam[s]), logit(aligned(lr, leam["codes"], s)), None) for s in ("dev", "test")}
        y = {s: leam[f"y_{s}"] for s in ("dev", "test")}
    titles = z["dev"][2] is not None

    fusion = _fit(z["dev"], y["dev"], "auc+platt", counts)
    rows: dict[str, dict] = {}

    def add(name: str, f: Fusion | None, part: str = "both", w: float | None = None) -> None:
        if f is None:  # round 13's blend: w LEAM + (1 - w) tfidf-lr on raw log-odds
            zz = {s: w * z[s][0] + (1 - w) * z[s][1] for s in z}
        else:
            zz = {s: _fused(z[s], f, counts, part) for s in z}
        sd, st = sigmoid(zz["dev"]), sigmoid(zz["test"])
        t = tune_threshold(y["dev"], sd)
        rows[name] = {"threshold": t, "dev": band_figures(y["dev"], sd, t, counts),
                      "test": band_figures(y["test"], st, t, counts), "_z": zz}

    add("LEAM", None, w=1.0)
    add("tfidf-lr", None, w=0.0)
    add("logit blend w=0.25 (round 13)", None, w=0.25)
    add("fused", fusion)
    rules = ["f1+auc", "auc+platt, no titles"] + (["auc+platt"] if titles else [])
    for r in rules[:-1] if titles else rules[:1]:
        add(f"fused, rule {r}", _fit(z["dev"], y["dev"], r, counts))
    add("fused, LEAM part only", fusion, "leam")
    add("fused, tfidf-lr part only", fusion, "lr")
    if titles:
        add("fused, title match off", fusion, "no-title")
    # per-code thresholds: the offsets are fitted on the fused dev scores at the fused dev threshold
    t = rows["fused"]["threshold"]
    with_off = Fusion(**{**fusion.__dict__, "offsets": per_code_offsets(y["dev"], rows["fused"]["_z"]["dev"], counts,
                                                                        t)})
    add("fused + per-code thresholds", with_off)
    cv_mean = _offsets_dev_cv(y["dev"], rows["fused"]["_z"]["dev"], counts)
    rules_mean = _rules_dev_cv(z["dev"], y["dev"], rules, counts)
    for r in rows.values():
        r.pop("_z")
    return {"fusion": fusion.to_json(), "n_offsets": int(np.count_nonzero(with_off.offsets)), "rows": rows,
            "offsets_dev_cv": cv_mean, "rules_dev_cv": rules_mean}


def show(name: str, res: dict) -> None:
    keys = ("f1_micro", "f1_macro", "auc_macro", "prec_at_8", "rare<10_auc", "rare<10_f1", "1-2_auc", "3-10_auc",
            "11-50_auc", ">50_auc")
    cv = {k: round(v, 4) for k, v in res["offsets_dev_cv"].items()}
    print(f"\n### {name}\n\nfusion (dev): {json.dumps(res['fusion'])}; per-code offsets: {res['n_offsets']}; "
          f"their effect on held-out dev halves (mean of 10): {json.dumps(cv)}\n")
    for r, m in res["rules_dev_cv"].items():
        print(f"rule {r}, fitted on half of dev, scored on the other (mean of 10): "
              + ", ".join(f"{k} {v:.4f}" for k, v in m.items()))
    print()
    print("| model | split | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for model, r in res["rows"].items():
        for split in ("dev", "test"):
            f = r[split]
            print(f"| {model} | {split} | " + " | ".join(f"{f[k]:.4f}" if k in f else "-" for k in keys) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leam", default="", help="comma-separated LEAM run folders (each fused with --lr).")
    ap.add_argument("--lr", default=None, help="the tfidf-lr run folder.")
    ap.add_argument("--fused", default="", help="comma-separated fused run folders: their two parts, refitted.")
    ap.add_argument("--data", required=True, help="the prepared dataset both were trained on.")
    ap.add_argument("--json", default=None, metavar="OUT")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    data = Path(args.data)
    out = {}
    for run in [r for r in args.fused.split(",") if r]:
        z, y, counts = fused_parts(Path(run), data)
        out[run] = res = study(None, None, counts, parts=(z, y))
        show(Path(run).name, res)
    lr = scored(Path(args.lr), data) if args.lr else None
    for run in [r for r in args.leam.split(",") if r]:
        leam = scored(Path(run), data)
        held = json.loads((Path(run) / "checkpoint" / "train_counts.json").read_text(encoding="utf-8"))["counts"]
        counts = np.array([held.get(c, 0) for c in leam["codes"]])
        out[run] = res = study(leam, lr, counts)
        show(Path(run).name, res)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
