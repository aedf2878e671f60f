"""Accuracy benchmark: LEAM with its default settings next to tfidf-lr on the small public sets in ../shared/data.

For each set (hoc, cmc2007-radiology-icd9, mtsamples) both models are trained with library defaults; the only
flags passed are dataset-generic: `--top-k 50` only where a set has more than 50 labels (as the issue asks; top-k
also drops the notes left without a label, so it is not passed otherwise) and, for cmc2007
whose labels are bare ICD-9 codes, `--descriptions ../shared/data/caml-mimic-ids/ICD9_descriptions.tsv` so that
LEAM's label vectors start from the code descriptions (docs/domain.md section 8). Metrics are test-set values at the
dev-tuned threshold; LEAM is run with several seeds (mean ± sd), tfidf-lr is deterministic (one run).
Whether LEAM "matches" is judged by a paired bootstrap over test notes (`clinicode compare`, i.e.
`clinicode.evaluate.compare`):
the seed mean of LEAM minus tfidf-lr on 2,000 resamples of the same notes, with its 95% interval.
The table is printed and written between the bench:accuracy markers of BENCHMARKS.md.

Beside the three sets, two rare-code proxies, built in a temporary folder on every run (never copied into the repo):
- `mtsamples-rare` keeps mtsamples' dev and test but only part of its training notes (in a fixed shuffled order, a
  note is kept while one of its labels has fewer than 20 kept notes), so most of its 40 labels have 5-30 training
  notes, the shape of a real coding team's few hundred notes.
- `mtsamples-keywords` keeps every mtsamples note but labels it with its page's keywords instead of its specialties:
  the 300 keywords most often given in training (each in 10 to 67 training notes, 221 of them in fewer than 20).
  Like ICD codes, each keyword is a specific concept written in the note (98% of them verbatim), so this has the
  shape of the many-specific-codes problem: hundreds of labels, most with 5-30 training notes.
- `mtsamples-keywords-50` and `mtsamples-keywords-all` are the same at 50 labels and at every keyword given in at
  least 2 training notes (2,969 labels, 2,700 of them in 2-10 notes; issue 25's many-codes proxy at 50, 300 and all
  codes). `mtsamples-keywords-50-500` keeps only 500 of the 50-keyword proxy's training notes (the held-out set's
  size; not in the default list). A keyword label has no description: its vector starts from its own words, as an
  ICD code's from its title.
  With cmc2007 (45 ICD-9 codes with their titles) they are judged by issue 25's goals against tfidf-lr.
No proxy gets `--top-k 50`: its label set is the point. Every set gets the worst seed, the spread, how runs
ended, and the rare-code slice: macro-AUC and macro-F1 over the codes with fewer than 20 training notes.

    python benchmarks/bench_accuracy.py [--seeds 5] [--threads 2] [--datasets hoc,mtsamples,...]
        [--no-write] [--no-paper] [--runs DIR]
    python benchmarks/bench_accuracy.py --set lr_schedule=constant     # screen a training option (implies --no-write)

`--runs DIR` keeps every run folder (checkpoint, test scores) and its row (DIR/NAME.row.json) in DIR, a folder of
your choice outside the repo; a later call with the same DIR reuses each finished row whose settings match (set,
model row, seed, threads, options) instead of training it again, so a long benchmark can be stopped, resumed and
split, and its checkpoints studied afterwards. Each row names the clinicode commit that trained it.

`--embeddings FILE` runs LEAM with pretrained word vectors instead of word2vec (e.g. GloVe 6B 100-d, see
benchmarks/wink_to_glove.py); that is not the default setting, so it only prints and leaves BENCHMARKS.md alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DESCRIPTIONS = DATA / "caml-mimic-ids" / "ICD9_descriptions.tsv"
DATASETS = ("hoc", "cmc2007-radiology-icd9", "mtsamples", "mtsamples-rare", "mtsamples-keywords-50",
            "mtsamples-keywords",
            "mtsamples-keywords-all", "bc5cdr-disease-mesh", "bc5cdr-disease-mesh-all", "ncbi-disease-mesh",
            "ncbi-disease-mesh-all")
# The public sets with the held-out set's shape (issue 35): MeSH-coded abstracts with titles, a tree and the gold
# evidence spans of every code. Under its own name a set is cut to its 50 most frequent codes (`--top-k 50`); NAME-all
# is the same folder with every code seen in training.
ALL_CODES = {"bc5cdr-disease-mesh-all": "bc5cdr-disease-mesh", "ncbi-disease-mesh-all": "ncbi-disease-mesh"}
# name: (source set, how it is built, its number): "cut" keeps a note while one of its labels has fewer than the
# number of kept training notes; "keywords" relabels every note with that many of the most frequent training keywords
# (0: every keyword given in at least KEYWORD_ALL_MIN training notes). The three keyword proxies are the many-codes
# proxy of issue 25 at 50, 300 and all labels; a keyword label has no description, so its vector starts from its
# own words (its title).
PROXIES = {"mtsamples-rare": ("mtsamples", "cut", 20), "mtsamples-keywords-50": ("mtsamples", "keywords", 50),
           "mtsamples-keywords": ("mtsamples", "keywords", 300), "mtsamples-keywords-all": ("mtsamples", "keywords", 0),
           "mtsamples-keywords-50-500": ("mtsamples", "keywords-500", 50)}
SMALL_TRAIN = 500   # mtsamples-keywords-50-500: the 50-keyword proxy with the held-out set's ~500 training notes
KEYWORD_MIN_NOTES = 5   # a keyword proxy label of the 50/300 proxies is given in at least this many training notes
# Seeds per set and row when fewer than --seeds, for a shared 2-core machine: a keywords-all run took 21 min alone
# (66 epochs of ~18 s), an epoch 144 s beside other work; a keywords (300) run 10-15 min beside other work.
SEEDS_CAP = {"mtsamples-keywords-all": {"leam": 1, "leam (paper)": 0},
             "mtsamples-keywords": {"leam": 2, "leam (paper)": 1},
             "mtsamples-keywords-50": {"leam (paper)": 3},
             # the MeSH sets: five default seeds on bc5cdr top 50 (the spread goal), fewer elsewhere: on a loaded
             # 2-core machine a top-50 run took 3-4 min (80-130 epochs) and an every-code run 30+ min
             "bc5cdr-disease-mesh": {"leam (paper)": 2}, "ncbi-disease-mesh": {"leam": 3, "leam (paper)": 1},
             "cmc2007-radiology-icd9": {"leam": 3, "leam (paper)": 0},
             "bc5cdr-disease-mesh-all": {"leam": 1, "leam (paper)": 0},
             "ncbi-disease-mesh-all": {"leam": 1, "leam (paper)": 0}}
KEYWORD_ALL_MIN = 2     # keywords-all: 2,969 labels, 2,700 of them in 2-10 training notes (>= 1 note: 9,946, 70% once)
# Sets judged by the goals of issue 25 (codes with titles, 50 / 300 / all): name -> scale.
ISSUE_SCALES = {"cmc2007-radiology-icd9": "50", "mtsamples-keywords-50": "50", "mtsamples-keywords": "300",
                "mtsamples-keywords-all": "all", "bc5cdr-disease-mesh": "50", "bc5cdr-disease-mesh-all": "all",
                "ncbi-disease-mesh": "50", "ncbi-disease-mesh-all": "all"}
# Seeds agree (issue 35): on these sets the best seed's test micro-F1 is at most this far above the worst's.
SPREAD_GOAL = 0.05
SPREAD_SETS = ("bc5cdr-disease-mesh",)
# LEAM rows: name -> the LEAMConfig/TrainConfig fields it changes. "leam" is the library's default model (code
# evidence); "leam (paper)" is Wang et al.'s model exactly (`train --paper`).
VARIANTS = {"leam (paper)": {"code_evidence": False, "window_nonneg": False}}
# Each row's model kind: "fused" is the library's default since #41 (LEAM and tfidf-lr fused per code), "leam" the
# default before it (`train --model leam`), "leam (paper)" `train --paper`.
ROW_KIND = {"fused": "fused", "leam": "leam", "leam (paper)": "leam"}
# Seeds of the fused row where fewer than --seeds (#41: bc5cdr-all and ncbi-all first, then bc5cdr top 50)
FUSED_SEEDS = {"bc5cdr-disease-mesh-all": 3, "ncbi-disease-mesh-all": 3, "bc5cdr-disease-mesh": 3,
               "ncbi-disease-mesh": 3, "cmc2007-radiology-icd9": 3}
RARE_BAND = 10   # #41's rare band: codes with fewer than 10 training notes
START, END = "<!-- bench:accuracy:start -->", "<!-- bench:accuracy:end -->"
METRICS = (("f1_micro", "micro-F1"), ("f1_macro", "macro-F1"), ("auc_macro", "macro-AUC"),
           ("auc_micro", "micro-AUC"), ("prec_at_5", "P@5"), ("prec_at_8", "P@8"))
TOP_K = 50
N_BOOT = 2000


def make_proxy(name: str, out: Path) -> Path:
    """Build the rare-code proxy NAME under OUT from its source set (see the module docstring); the same bytes on
    every run."""
    source, kind, number = PROXIES[name]
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    splits = {part: [json.loads(line)
                     for line in (DATA / source / f"{part}.jsonl").read_text(encoding="utf-8").splitlines() if line]
              for part in ("train", "dev", "test")}
    if kind == "cut":                                   # dev and test (and labels.tsv) as they are, byte for byte
        splits = {"train": _cut(splits["train"], number)}
        for part in ("dev.jsonl", "test.jsonl", "labels.tsv"):
            if (DATA / source / part).is_file():
                (folder / part).write_bytes((DATA / source / part).read_bytes())
    else:
        splits = _keyword_labels(splits, number)
        if kind == "keywords-500":                      # the first SMALL_TRAIN training notes of a fixed shuffle
            import random

            order = list(range(len(splits["train"])))
            random.Random(0).shuffle(order)
            splits["train"] = [splits["train"][i] for i in sorted(order[:SMALL_TRAIN])]
    for part, rows in splits.items():
        with open(folder / f"{part}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return folder


def _cut(rows: list[dict], cap: int) -> list[dict]:
    """In a fixed shuffled order, keep a note only while one of its labels has fewer than CAP kept notes (file order
    kept)."""
    import random

    order = list(range(len(rows)))
    random.Random(0).shuffle(order)
    kept, counts = [], {}
    for i in order:
        labels = rows[i]["labels"]
        if labels and any(counts.get(c, 0) < cap for c in labels):
            kept.append(i)
            for c in labels:
                counts[c] = counts.get(c, 0) + 1
    return [rows[i] for i in sorted(kept)]


def _keyword_labels(splits: dict[str, list[dict]], n_labels: int) -> dict[str, list[dict]]:
    """Every note relabelled with its keywords (lower-cased, spaces collapsed) among the N_LABELS given most often in
    training (at least KEYWORD_MIN_NOTES notes; ties by name); N_LABELS 0: every keyword in >= KEYWORD_ALL_MIN. A note
    with none of them keeps an empty label list.
    Only id, text and labels are written: the specialties and the page's description would give the labels away."""
    def keywords(row: dict) -> set[str]:
        return {" ".join(k.lower().split()) for k in row.get("keywords") or []} - {""}

    counts: dict[str, int] = {}
    for row in splits["train"]:
        for k in keywords(row):
            counts[k] = counts.get(k, 0) + 1
    least = KEYWORD_MIN_NOTES if n_labels else KEYWORD_ALL_MIN
    ranked = sorted((k for k, n in counts.items() if n >= least), key=lambda k: (-counts[k], k))
    keep = set(ranked[:n_labels] if n_labels else ranked)
    return {part: [{"id": r["id"], "text": r["text"], "labels": sorted(keywords(r) & keep)} for r in rows]
            for part, rows in splits.items()}


def top_k_for(name: str, data_dir: Path) -> int | None:
    """`--top-k 50` only for a public set with more than 50 training labels: on smaller sets it would keep every label
    but still drop the notes that have none (hoc: 50 of 355 test notes), which makes the task easier. Never for a
    proxy: its label set is what it measures."""
    from clinicode.data.prepared import load_dataset

    if name in PROXIES or name in ALL_CODES:
        return None
    return TOP_K if len(load_dataset(data_dir).labels) > TOP_K else None


def source_dir(name: str) -> Path:
    """The folder under ../shared/data that set NAME reads (a proxy's source, NAME-all's own folder)."""
    return DATA / ALL_CODES.get(name, PROXIES.get(name, (name,))[0])


def descriptions_for(name: str, data_dir: Path) -> Path | None:
    """The `--descriptions` file a user would pass: ICD-9's titles for cmc2007 (bare codes), a set's own
    descriptions.tsv where it ships one (the MeSH sets), else none (labels that are their own titles)."""
    if name.startswith("cmc2007"):
        return DESCRIPTIONS if DESCRIPTIONS.is_file() else None
    own = data_dir / "descriptions.tsv"
    return own if own.is_file() else None


def unseen_share(data_dir: Path, labels: list[str]) -> float:
    """Share of the test split's (note, code) pairs whose code is outside LABELS (the model's codes): pairs no
    model trained on these labels can predict (codes without a training note, or cut by --top-k)."""
    known, n, out = set(labels), 0, 0
    for line in (data_dir / "test.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            codes = set(json.loads(line)["labels"])
            n += len(codes)
            out += len(codes - known)
    return out / n if n else 0.0


def _window_path(history: list[dict]) -> dict:
    """W1's sum after epochs 1, 2 and 5 and at the end, and a_k's mean at the end (the collapse's mechanism, issue
    35: a collapsed seed's W1 turns negative in its first epochs)."""
    w1 = [h.get("w1_sum") for h in history]
    if not w1 or w1[0] is None:
        return {}
    return {"w1_path": [w1[i] for i in (0, 1, 4) if i < len(w1)] + [w1[-1]], "a_end": history[-1].get("a_mean")}


@functools.cache
def _commit() -> str:
    """The commit (with -dirty) of the code this process imported: asked once, when `main` starts."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _window_stats(run: Path) -> dict:
    """The collapse check of issue 25: the sum of the shared phrase window W1 (starts at +phrase_init; a seed whose W1
    ends at or below 0 reads each code's worst-matching phrase as its best), b1's mean and the evidence weights' mean
    a_k = softplus(rho_k), from the run's final checkpoint."""
    import torch
    from safetensors.torch import load_file

    from clinicode.constants import CHECKPOINT_DIR, WEIGHTS_FILE

    w = load_file(str(run / CHECKPOINT_DIR / WEIGHTS_FILE))
    out = {"w1_sum": float(w["phrase_w"].sum()), "w1_min": float(w["phrase_w"].min()),
           "b1_mean": float(w["phrase_b"].mean())}
    if "evidence_rho" in w:
        out["a_mean"] = float(torch.nn.functional.softplus(w["evidence_rho"]).mean())
    return out


REUSE_ONLY = False   # --reuse-only


def run_one(dataset: str, data_dir: Path, model: str, seed: int, top_k: int | None, work: Path,
            options: dict | None = None, name: str | None = None) -> dict | None:
    """Train one model with default settings (LEAM: optionally with OPTIONS, TrainConfig or LEAMConfig fields,
    changed) into WORK/DATASET-NAME-SEED (NAME: the row's name, default MODEL); return its test metrics, the rare-code
    slice, how training ended, wall-clock seconds and the run folder. A row kept beside it by an earlier call with the
    same settings is returned as it is (see `--runs`)."""
    import torch

    from clinicode.config import TrainConfig
    from clinicode.constants import CHECKPOINT_DIR, LABELS_FILE
    from clinicode.data.labels import LabelSet
    from clinicode.models.leam.options import LEAMConfig
    from clinicode.train import train

    run_key = {"dataset": dataset, "model": name or model, "seed": seed, "threads": torch.get_num_threads(),
           "options": {k: str(v) for k, v in sorted((options or {}).items())}}
    run_dir = work / f"{dataset}-{(name or model).replace(' ', '_').replace('(', '').replace(')', '')}-{seed}"
    kept = run_dir.with_name(run_dir.name + ".row.json")
    if kept.is_file():
        row = json.loads(kept.read_text(encoding="utf-8"))
        if row.get("key") == run_key and Path(row["run"]).is_dir():
            print(f"reusing {kept.name} (trained at {row.get('commit')})", file=sys.stderr, flush=True)
            return {**row, "reused": True}
    if REUSE_ONLY:   # --reuse-only: report what --runs holds, train nothing
        return None

    model_fields = {f.name for f in dataclasses.fields(LEAMConfig)}
    extra = dict(options or {}) if model in ("leam", "fused") else {}
    model_options = {k: extra.pop(k) for k in list(extra) if k in model_fields}
    cfg = TrainConfig(model=model, seed=seed, top_k=top_k, device="cpu", **extra)
    desc = descriptions_for(dataset, data_dir)
    t0 = time.perf_counter()
    res = train(out_dir=run_dir, config=cfg, data_dir=data_dir,
                descriptions_path=desc, progress=False, model_options=model_options or None)
    secs = time.perf_counter() - t0
    row = {k: float(res["test"][k]) for k, _ in METRICS}
    row.update({f"dev_{k}": float(res["dev"][k]) for k in ("f1_micro", "auc_macro")})  # for screening on dev
    slices = res["test"]["slices"]
    for part in ("rare", "frequent"):
        for key in ("auc_macro", "f1_macro"):
            row[f"{part}_{key}"] = slices[part][key]
        row[f"{part}_n"] = slices[part]["n_present"]
    history = res.get("history") or []
    losses = [h["train_loss"] for h in history]
    row.update(seconds=secs, best_epoch=res.get("best_epoch"), epochs=len(history), stopped=res.get("stopped"),
               # how far the last epoch's training loss sits above the run's lowest (0 = still at its lowest)
               loss_rise=(losses[-1] / min(losses) - 1.0) if losses and min(losses) > 0 else 0.0,
               at_cap_improving=bool(history) and res.get("stopped") == "epochs" and bool(history[-1].get("best")))
    if model in ("leam", "fused"):
        row.update(_window_stats(Path(res["run"])), **_window_path(history))
        if res["test"].get("evidence"):   # scored by train itself where the test notes carry gold mentions
            row["evidence"] = res["test"]["evidence"]
    if model == "fused":   # what each part contributes per band: the fused model with one part switched off
        row["parts"] = parts_per_band(Path(res["run"]), data_dir)
        row["fusion"] = res.get("fusion")
    import resource

    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # this process's peak so far
    row["unseen_share"] = unseen_share(data_dir, LabelSet.load(Path(res["run"]) / CHECKPOINT_DIR / LABELS_FILE).codes)
    print(json.dumps({"dataset": dataset, "model": name or model, "seed": seed, **row}), file=sys.stderr, flush=True)
    row = {**row, "run": res["run"], "key": run_key, "commit": _commit()}
    tmp = kept.with_name(kept.name + ".tmp")
    tmp.write_text(json.dumps(row, indent=1), encoding="utf-8")
    tmp.replace(kept)
    return row


def band_figures(y, s, t: float, counts) -> dict:
    """Headline figures at threshold t, and macro-AUC / per-code mean F1 over the rare band (fewer than RARE_BAND
    training notes) and the four frequency bands of the fused model (1-2, 3-10, 11-50, >50 training notes); a band's
    figures count its codes with a gold test note."""
    import numpy as np

    from clinicode.metrics import all_metrics, auc_macro, f1_by_threshold

    m = all_metrics(y, s, threshold=t)
    out = {k: m[k] for k in ("f1_micro", "f1_macro", "auc_macro", "prec_at_8")}
    groups = {"rare<10": counts < RARE_BAND, "1-2": counts <= 2, "3-10": (counts > 2) & (counts <= 10),
              "11-50": (counts > 10) & (counts <= 50), ">50": counts > 50}
    for name, keep in groups.items():
        cols = np.flatnonzero(keep & (y.sum(axis=0) > 0))
        if not len(cols):
            continue
        out[f"{name}_auc"] = auc_macro(y[:, cols], s[:, cols])[0]
        out[f"{name}_f1"] = float(f1_by_threshold(y[:, cols], s[:, cols], np.array([t]))["f1_macro_mean"][0])
        out[f"{name}_n"] = int(len(cols))
    return out


def parts_per_band(run: Path, data_dir: Path) -> dict:
    """Test figures of a fused run per band: as trained, with the LEAM part switched off at scoring (its term 0), and
    with the tfidf-lr part switched off; the checkpoint's threshold and per-code shifts stay."""
    import numpy as np

    from clinicode.evaluate import scored_split
    from clinicode.predict import Predictor

    pred = Predictor.from_checkpoint(run, device="cpu")
    df, y, _ = scored_split(pred, data_dir, "test")
    model, ck = pred.scorer.model, pred.checkpoint
    z_leam, z_lr, z_title = pred.scorer.logits(df["text"].tolist())
    counts = np.array([ck.train_counts.get(c, 0) for c in ck.labels.codes])
    y = y.astype(bool)
    out, zero = {}, np.zeros_like(z_lr)
    for name, z in (("fused", model.fuse(z_leam, z_lr, z_title)), ("LEAM off", model.fuse(zero, z_lr, z_title)),
                    ("tfidf-lr off", model.fuse(z_leam, zero, z_title)),
                    ("title match off", model.fuse(z_leam, z_lr, zero)),
                    ("LEAM part only", model.fuse(z_leam, zero, zero))):
        out[name] = band_figures(y, 0.5 * (1.0 + np.tanh(0.5 * np.clip(z, -30, 30))), ck.threshold, counts)
    return out


def parts_table(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    """What each part of the fused model contributes per band (test, mean over seeds)."""
    keys = [("f1_micro", "micro-F1"), ("auc_macro", "macro-AUC"), ("prec_at_8", "P@8"), ("f1_macro", "macro-F1"),
            ("rare<10_auc", "<10 notes macro-AUC"), ("rare<10_f1", "<10 notes macro-F1"), ("1-2_auc", "1-2 AUC"),
            ("3-10_auc", "3-10 AUC"), ("11-50_auc", "11-50 AUC"), (">50_auc", ">50 AUC")]
    lines = ["| dataset | runs | scored with | " + " | ".join(n for _, n in keys) + " |",
             "|---|---|---|" + "---|" * len(keys)]
    for (dataset, name), rows in results.items():
        have = [r["parts"] for r in rows if r.get("parts")]
        if ROW_KIND.get(name) != "fused" or not have:
            continue
        for part in have[0]:
            cells = []
            for k, _ in keys:
                vals = [p[part][k] for p in have if k in p[part]]
                cells.append(f"{statistics.mean(vals):.4f}" if vals else "-")
            lines.append(f"| {dataset} | {len(have)} | {part} | " + " | ".join(cells) + " |")
    if len(lines) == 2:
        return []
    return ["What each part of the fused model contributes (test, mean over its seeds; the same checkpoint scored "
            "with one part's term set to 0, threshold and per-code shifts kept). Bands: training notes per code; a "
            "band counts its codes with a gold test note.", "", *lines, ""]


ISSUE41_EVIDENCE = {"bc5cdr-disease-mesh": (0.87, 0.67), "bc5cdr-disease-mesh-all": (0.85, 0.63)}
# The leam row's seed means as BENCHMARKS.md held them before #41 (e8b22bc), for a call that does not rerun the leam
# row: #41's bars for the fused model are relative to it.
LEAM_BEFORE = {"bc5cdr-disease-mesh": {"f1_micro": 0.7062, "prec_at_8": 0.2182, "f1_macro": 0.7035},
               "bc5cdr-disease-mesh-all": {"f1_micro": 0.5202, "prec_at_8": 0.2442, "f1_macro": 0.1385},
               "ncbi-disease-mesh": {"f1_micro": 0.8092, "prec_at_8": 0.2073, "f1_macro": 0.5451},
               "ncbi-disease-mesh-all": {"f1_micro": 0.6167, "prec_at_8": 0.2475, "f1_macro": 0.0785},
               "cmc2007-radiology-icd9": {"f1_micro": 0.7710, "prec_at_8": 0.1486, "f1_macro": 0.3827}}


def issue41_goals(results: dict[tuple[str, str], list[dict]], evidence: dict | None = None) -> list[str]:
    """#41's goals for the fused row, each with its numbers: every code (the NAME-all sets) against tfidf-lr and the
    previous default (the leam row, seed mean); top 50 against the leam row; evidence on bc5cdr; time."""
    out = []
    for (d, name), rows in results.items():
        if ROW_KIND.get(name) != "fused" or (d, "tfidf-lr") not in results:
            continue
        lr = results[(d, "tfidf-lr")][0]
        leam = results.get((d, "leam")) or []
        before = LEAM_BEFORE.get(d) if not leam else None
        f1 = [r["f1_micro"] for r in rows]

        def mean_of(key: str) -> float | None:
            if leam:
                return statistics.mean(r[key] for r in leam)
            return before[key] if before else None

        checks: list[tuple[str, float, float, bool]] = []   # (what, got, bar, got >= bar is met)
        if d in ALL_CODES:
            p8_bar = max(v for v in (mean_of("prec_at_8"), lr["prec_at_8"]) if v is not None) + 0.02
            mf1_bar = 1.5 * max(v for v in (mean_of("f1_macro"), lr["f1_macro"]) if v is not None)
            checks += [("worst micro-F1", min(f1), lr["f1_micro"] + 0.08, True),
                       ("worst P@8", min(r["prec_at_8"] for r in rows), p8_bar, True),
                       ("worst macro-AUC", min(r["auc_macro"] for r in rows), lr["auc_macro"] + 0.01, True),
                       ("worst macro-F1", min(r["f1_macro"] for r in rows), mf1_bar, True)]
            if len(rows) > 1:
                checks.append(("best - worst micro-F1", max(f1) - min(f1), 0.02, False))
            if d == "bc5cdr-disease-mesh-all":
                checks.append(("slowest train s", max(r["seconds"] for r in rows), 150.0, False))
        else:
            if leam or before:
                checks.append(("worst micro-F1", min(f1), mean_of("f1_micro") - 0.01, True))
            if len(rows) > 1:
                checks.append(("best - worst micro-F1", max(f1) - min(f1), 0.03, False))
        if evidence and d in ISSUE41_EVIDENCE and (d, name) in evidence:
            reps = [r["model"] for r in evidence[(d, name)]]
            for key, bar in zip(("hit_at_1", "token_f1"), ISSUE41_EVIDENCE[d]):
                checks.append((f"worst evidence {key.replace('_at_', '@').replace('token_', 'word ')}",
                               min(x[key] for x in reps), bar, True))
        parts = [f"{what} {got:.4f} (goal {'>=' if up else '<='} {bar:.4f}: "
                 f"{'met' if (got >= bar - 1e-12 if up else got <= bar + 1e-12) else 'NOT met'})"
                 for what, got, bar, up in checks]
        source = " (leam: BENCHMARKS.md's row before #41)" if before else ""
        out.append(f"- {d}, {name}, {len(rows)} seed(s){source}: " + "; ".join(parts))
    return out


def gap(data_dir: Path, leam: list[dict], lr: list[dict]) -> dict:
    """`clinicode compare` of the LEAM seeds (A) against tfidf-lr (B) on the test notes, as a user would run it."""
    from clinicode.evaluate import compare

    dataset = data_dir.name
    c = compare(runs_a=[Path(r["run"]) for r in leam], runs_b=[Path(r["run"]) for r in lr], data_dir=data_dir,
                n_boot=N_BOOT, device="cpu")
    for side, rows in (("metrics_a", leam), ("metrics_b", lr)):
        if abs(c[side]["f1_micro"] - statistics.mean(r["f1_micro"] for r in rows)) > 1e-9:
            raise RuntimeError(f"{dataset}: compare's scores disagree with train()'s test metrics.")
    return c


def _cell(values: list[float], digits: int = 4) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def table(results: dict[tuple[str, str], list[dict]]) -> str:
    head = "| dataset | model | runs | " + " | ".join(name for _, name in METRICS) + " | train s |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (dataset, model), rows in results.items():
        cells = [_cell([r[k] for r in rows]) for k, _ in METRICS]
        secs = _cell([r["seconds"] for r in rows], 0)
        lines.append(f"| {dataset} | {model} | {len(rows)} | " + " | ".join(cells) + f" | {secs} |")
    return "\n".join(lines)


def _worst(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    return f"{min(vals):.4f}" if vals else "-"


def _mean(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    return _cell(vals) if vals else "-"


def robustness_table(results: dict[tuple[str, str], list[dict]]) -> str:
    """Worst seed, rare-code slice and how each run ended, per set and model."""
    head = ("| dataset | model | micro-F1 worst | macro-AUC worst | rare codes in test | rare "
            "macro-AUC | rare macro-AUC "
            "worst | rare macro-F1 | frequent macro-AUC | frequent macro-F1 | epochs | stopped "
            "by the cap while improving "
            "| last loss above its lowest | W1 sum, min-max (seeds <= 0) | W1 sum after epochs 1, 2, 5, end; "
            "a_k end (the seed whose W1 ends lowest) | test code pairs outside the model's codes |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (dataset, model), rows in results.items():
        leam = model != "tfidf-lr"
        lines.append(" | ".join([
            f"| {dataset}", model, _worst([r["f1_micro"] for r in rows]), _worst([r["auc_macro"] for r in rows]),
            str(rows[0]["rare_n"]), _mean([r["rare_auc_macro"] for r in rows]),
                                 _worst([r["rare_auc_macro"] for r in rows]),
            _mean([r["rare_f1_macro"] for r in rows]), _mean([r["frequent_auc_macro"] for r in rows]),
            _mean([r["frequent_f1_macro"] for r in rows]),
            (f"{min(r['epochs'] for r in rows)}-{max(r['epochs'] for r in rows)}" if leam else "-"),
            (f"{sum(r['at_cap_improving'] for r in rows)} of {len(rows)}" if leam else "-"),
            (f"max {100 * max(r['loss_rise'] for r in rows):.0f}%" if leam else "-"),
            (f"{min(r['w1_sum'] for r in rows):+.2f} to {max(r['w1_sum'] for r in rows):+.2f} "
             f"({sum(r['w1_sum'] <= 0 for r in rows)})" if leam and all("w1_sum" in r for r in rows) else "-"),
            _w1_path(rows) if leam else "-",
            f"{100 * rows[0]['unseen_share']:.0f}%" if "unseen_share" in rows[0] else "-",
        ]) + " |")
    return "\n".join(lines)


def _w1_path(rows: list[dict]) -> str:
    """The window's path on the seed whose W1 ends lowest: the collapse shows there first."""
    rows = [r for r in rows if r.get("w1_path")]
    if not rows:
        return "-"
    r = min(rows, key=lambda r: r["w1_path"][-1])
    a = f"; a {r['a_end']:.2f}" if r.get("a_end") is not None else ""
    return " / ".join(f"{w:+.1f}" for w in r["w1_path"]) + a


def goals(results: dict[tuple[str, str], list[dict]], datasets: list[str]) -> list[str]:
    """The accuracy issue's goals, each with its numbers and whether it holds."""
    out = []
    for (d, name), leam in results.items():
        lr = results[(d, "tfidf-lr")][0]
        f1 = [r["f1_micro"] for r in leam]
        if name == "tfidf-lr" or d not in datasets or len(f1) < 2:
            continue
        sd, mean, worst = statistics.stdev(f1), statistics.mean(f1), min(f1)
        if d in PROXIES:
            auc = [r["auc_macro"] for r in leam]
            ok = min(f1) >= lr["f1_micro"] and min(auc) >= lr["auc_macro"]
            out.append(f"- {d}, {name} (rare-code proxy): at least tfidf-lr, seed mean and worst seed: micro-F1 mean "
                       f"{mean:.4f}, worst {worst:.4f} vs {lr['f1_micro']:.4f}; macro-AUC mean "
                       f"{statistics.mean(auc):.4f}, "
                       f"worst {min(auc):.4f} vs {lr['auc_macro']:.4f}: {'met' if ok else 'not met'}")
        ok = sd <= 0.01 and mean - worst <= 0.02
        out.append(f"- {d}, {name}: micro-F1 sd {sd:.4f} (goal <= 0.01), worst seed {mean - worst:.4f} below "
                   "the mean (goal <= 0.02): "
                   f"{'met' if ok else 'not met'}")
    return out


def issue_goals(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    """Issue 25's goals on the sets of ISSUE_SCALES, per LEAM row against tfidf-lr, each with its numbers and whether
    it holds (50 codes: mean micro-F1 >= tfidf-lr + 0.10, worst >= + 0.05, worst macro-AUC >= tfidf-lr's; 300: every
    seed micro-F1 >= + 0.10, macro-AUC and P@8 >= tfidf-lr's; all: micro-F1, P@8 and macro-AUC >= tfidf-lr's, every
    seed)."""
    out = []
    for (d, name), leam in results.items():
        if name == "tfidf-lr" or d not in ISSUE_SCALES or (d, "tfidf-lr") not in results:
            continue
        lr, scale = results[(d, "tfidf-lr")][0], ISSUE_SCALES[d]
        f1 = [r["f1_micro"] for r in leam]
        auc, p8 = [r["auc_macro"] for r in leam], [r["prec_at_8"] for r in leam]
        if scale == "50":
            checks = [("mean micro-F1", statistics.mean(f1), lr["f1_micro"] + 0.10),
                      ("worst micro-F1", min(f1), lr["f1_micro"] + 0.05), ("worst macro-AUC", min(auc),
                                                                           lr["auc_macro"])]
            if d in SPREAD_SETS:   # seeds agree: best - worst <= SPREAD_GOAL, written as worst >= best - goal
                checks.append(("best - worst micro-F1 (as worst vs best - 0.05)", min(f1), max(f1) - SPREAD_GOAL))
        elif scale == "300":
            checks = [("worst micro-F1", min(f1), lr["f1_micro"] + 0.10), ("worst macro-AUC", min(auc),
                                                                           lr["auc_macro"]),
                      ("worst P@8", min(p8), lr["prec_at_8"])]
        else:
            checks = [("worst micro-F1", min(f1), lr["f1_micro"]), ("worst P@8", min(p8), lr["prec_at_8"]),
                      ("worst macro-AUC", min(auc), lr["auc_macro"])]
        parts = [f"{what} {got:.4f} (goal >= {want:.4f}: {'met' if got >= want - 1e-12 else 'NOT met'})"
                 for what, got, want in checks]
        out.append(f"- {d} ({scale} codes), {name}, {len(leam)} seed(s): " + "; ".join(parts))
    return out


EVIDENCE_GOAL = {"hit_at_1": 0.75, "token_f1": 0.55}   # issue 35, bc5cdr top 50
EVIDENCE_SETS = ("bc5cdr-disease-mesh",)


def evidence_rows(results: dict[tuple[str, str], list[dict]], dirs: dict[str, Path]) -> dict[tuple[str, str], list]:
    """Evidence quality (test split, k = 5) of every LEAM run on a set whose notes carry gold mentions: the figures
    `train` saved with the row, else (a row kept from before train saved them) `clinicode.evaluate.evidence_report`
    on the run's checkpoint."""
    from clinicode.evaluate import evidence_report

    out: dict[tuple[str, str], list] = {}
    for (dataset, name), rows in results.items():
        if name == "tfidf-lr":
            continue
        reports = [r.get("evidence") or evidence_report(Path(r["run"]), dirs[dataset], "test", device="cpu")
                   for r in rows]
        if all(rep is not None and rep.get("model") for rep in reports):
            out[(dataset, name)] = reports
    return out


def evidence_table(ev: dict[tuple[str, str], list]) -> list[str]:
    """Hit@1, hit@5, word F1 and words shown per code (mean, worst seed), beside the random and title-word floors."""
    if not ev:
        return []
    head = ("| dataset | model | runs | correct codes with gold mentions | hit@1 (worst) | hit@5 | word P / R | "
            "word F1 (worst) | words per code | random hit@1 / F1 | title words hit@1 / F1 |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (dataset, name), reps in ev.items():
        m = [r["model"] for r in reps]
        first = reps[0]

        def avg(key: str, side: list[dict] = m) -> float:
            return statistics.mean(x[key] for x in side)

        lines.append(
            f"| {dataset} | {name} | {len(reps)} | {statistics.mean(r['n_pairs'] for r in reps):.0f} | "
            f"{avg('hit_at_1'):.3f} ({min(x['hit_at_1'] for x in m):.3f}) | {avg('hit_at_k'):.3f} | "
            f"{avg('token_precision'):.3f} / {avg('token_recall'):.3f} | "
            f"{avg('token_f1'):.3f} ({min(x['token_f1'] for x in m):.3f}) | {avg('words_per_code'):.1f} | "
            f"{first['random']['hit_at_1']:.3f} / {first['random']['token_f1']:.3f} | "
            f"{first['title']['hit_at_1']:.3f} / {first['title']['token_f1']:.3f} |")
    goals = []
    for (dataset, name), reps in ev.items():
        if dataset in EVIDENCE_SETS and name == "leam":
            worst = {k: min(r["model"][k] for r in reps) for k in EVIDENCE_GOAL}
            goals.append(f"- {dataset}, {name}, evidence (worst seed): " + "; ".join(
                f"{k.replace('_at_', '@').replace('token_', 'word ')} {worst[k]:.3f} (goal >= {v}: "
                f"{'met' if worst[k] >= v else 'NOT met'})" for k, v in EVIDENCE_GOAL.items()))
    return ["Evidence against gold mentions (test split; `clinicode evaluate` reports the same figures, "
            "docs/metrics.md defines them): for every code that is gold and predicted and has a gold mention, do "
            "the spans `predict --explain 5` shows for it overlap one (hit@1: its first span; hit@5: any), and how "
            "many of their words are mention words (word precision / recall / F1)? The floors score the same pairs: "
            "random spans of the same lengths, and the code's title words found in the note.", "", *lines, "",
            *goals, ""]


def verdict(gaps: dict[tuple[str, str], dict]) -> list[str]:
    """One line per set and LEAM row: its mean minus tfidf-lr on micro-F1 and macro-AUC, with a paired-bootstrap
    interval."""
    out = []
    for (dataset, name), c in gaps.items():
        parts = []
        for key, metric in (("f1_micro", "micro-F1"), ("auc_macro", "macro-AUC")):
            b = c[key]
            parts.append(f"{metric} {b['diff']:+.4f} [{b['lo']:+.4f}, {b['hi']:+.4f}], "
                         f"below in {100 * b['p_a_below_b']:.0f}% of resamples")
        out.append(f"- {dataset}: {name} − tfidf-lr: " + "; ".join(parts))
    return out


def write_section(text: str, path: Path) -> None:
    doc = path.read_text(encoding="utf-8") if path.is_file() else "# Benchmarks\n"
    block = f"{START}\n{text}\n{END}"
    if START in doc and END in doc:
        pre, rest = doc.split(START, 1)
        post = rest.split(END, 1)[1]
        doc = pre + block + post
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(doc, encoding="utf-8")


def _parse_sets(pairs: list[str]) -> dict:
    """KEY=VALUE pairs as TrainConfig or LEAMConfig fields (training or model options), each value parsed as its
    field's type."""
    from clinicode.config import TrainConfig
    from clinicode.models.leam.options import LEAMConfig

    model_fields = {f.name: f for f in dataclasses.fields(LEAMConfig) if f.name not in ("vocab_size", "n_labels")}
    fields = {**{f.name: f for f in dataclasses.fields(TrainConfig)}, **model_fields}
    out: dict = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in fields or not value:
            sys.exit(f"--set {pair}: expected KEY=VALUE with KEY one of {', '.join(sorted(fields))}.")
        kind = type(fields[key].default)
        if kind is bool:
            out[key] = value.lower() in ("1", "true", "yes")
        else:
            out[key] = value if kind is str or fields[key].default is None else kind(value)
    # range checks now, not after an hour of training
    TrainConfig(**{k: v for k, v in out.items() if k not in model_fields})
    LEAMConfig(vocab_size=3, n_labels=1, **{k: v for k, v in out.items() if k in model_fields})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="LEAM seeds per set (tfidf-lr is deterministic: one run).")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads; results repeat exactly only at the same count "
                         "(default 2, as in BENCHMARKS.md).")
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated folder names under ../shared/data.")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone.")
    ap.add_argument("--rows", default=",".join(ROW_KIND),
                    help=f"model rows beside tfidf-lr, comma-separated, of {', '.join(ROW_KIND)}.")
    ap.add_argument("--reuse-only", action="store_true",
                    help="with --runs: report the rows it holds and train nothing (a row it lacks is left out).")
    ap.add_argument("--no-paper", action="store_true",
                    help="run only the default LEAM beside tfidf-lr, not the paper's model too (half the compute).")
    ap.add_argument("--runs", default=None, metavar="DIR",
                    help="keep run folders and rows in DIR (outside the repo) and reuse the finished ones.")
    ap.add_argument("--embeddings", default=None, metavar="FILE",
                    help="LEAM word vectors from this word2vec/GloVe text file instead of "
                         "word2vec (implies --no-write).")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change one LEAM training or model option (a TrainConfig or LEAMConfig field), e.g. "
                         "lr_schedule=constant or label_reg_weight=0; repeatable; "
                         "implies --no-write.")
    args = ap.parse_args()
    global REUSE_ONLY
    REUSE_ONLY = bool(args.reuse_only)
    options = _parse_sets(args.set)
    if args.embeddings:
        if not Path(args.embeddings).is_file():
            sys.exit(f"--embeddings {args.embeddings}: no such file; give a word2vec/GloVe text file.")
        options["embeddings"] = args.embeddings
    if options:
        args.no_write = True

    import torch

    from clinicode import __version__

    torch.set_num_threads(args.threads)

    datasets = [d for d in args.datasets.split(",") if d]
    missing = [d for d in datasets
               if not (source_dir(d) / "train.jsonl").is_file() and not (DATA / d / "train.parquet").is_file()]
    if missing:
        sys.exit(f"no data for {', '.join(missing)} under {DATA}; expected {{train,dev,test}}.jsonl per set.")
    results: dict[tuple[str, str], list[dict]] = {}
    gaps: dict[tuple[str, str], dict] = {}
    chosen = [r for r in args.rows.split(",") if r]
    unknown = [r for r in chosen if r not in ROW_KIND]
    if unknown:
        sys.exit(f"--rows {args.rows}: unknown row {unknown[0]!r}; expected some of {', '.join(ROW_KIND)}.")
    rows = {r: ({**VARIANTS.get(r, {}), **options}) for r in chosen
            if not (args.no_paper and r == "leam (paper)")}
    t_all = time.perf_counter()
    _commit()  # each row names the code this process trains with, not the tree when the row is written
    if args.runs:
        Path(args.runs).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="clinicode-bench-acc-") as tmp:
        work = Path(args.runs).resolve() if args.runs else Path(tmp)
        dirs = {d: make_proxy(d, work / "data") if d in PROXIES else source_dir(d) for d in datasets}
        top_ks = {d: top_k_for(d, dirs[d]) for d in datasets}
        for dataset in datasets:
            lr = [r for r in [run_one(dataset, dirs[dataset], "tfidf-lr", 1337, top_ks[dataset], work)] if r]
            if not lr:
                continue
            results[(dataset, "tfidf-lr")] = lr
            for name, opts in rows.items():
                cap = FUSED_SEEDS.get(dataset, args.seeds) if name == "fused" else \
                    SEEDS_CAP.get(dataset, {}).get(name, args.seeds)
                n_seeds = min(args.seeds, cap)
                if n_seeds == 0:                                      # a row this machine could not afford
                    continue
                leam = [r for r in (run_one(dataset, dirs[dataset], ROW_KIND[name], 1337 + i, top_ks[dataset], work,
                                            opts, name) for i in range(n_seeds)) if r]
                if not leam:
                    continue
                results[(dataset, name)] = leam
                gaps[(dataset, name)] = gap(dirs[dataset], leam, lr)
        evidence = evidence_rows(results, dirs)
    from clinicode.config import TrainConfig
    from clinicode.models.leam.options import LEAMConfig

    d = TrainConfig()
    text = "\n".join([
        "## accuracy: LEAM (defaults), the paper's LEAM and tfidf-lr "
        "(`benchmarks/bench_accuracy.py`)" if not options else
        f"## accuracy: LEAM (defaults, but {', '.join(f'{k}={v}' for k, v in options.items())}) vs tfidf-lr "
        f"(`benchmarks/bench_accuracy.py`, screening)",
        "",
        "Test-set metrics at the dev-tuned threshold, library defaults for both models, on every note of each split "
        "(notes without a label included, e.g. hoc's abstracts with no hallmark). Flags passed: `--top-k 50` only "
        f"where a set has more than 50 labels (here: {', '.join(d for d in datasets if top_ks[d]) or 'none'}; a "
        "set named NAME-all is the same folder with every code seen in training) and `--descriptions`: for cmc2007 "
        "`../shared/data/caml-mimic-ids/ICD9_descriptions.tsv`, for the MeSH sets their own `descriptions.tsv` "
        "(LEAM's label vectors start from the titles; tfidf-lr ignores them). "
        + ("`leam` is the library's default model: each code's score also counts its best phrase match in the note "
           "(code evidence, max over positions of a local mean of G_lk); `leam (paper)` is Wang et al.'s model exactly "
           "(`train --paper`), same training settings (docs/training.md). "
           if not options else "")
        +
        f"LEAM: mean ± sd over seeds {', '.join(str(1337 + i) for i in range(args.seeds))}"
        + "".join(f" ({d}, {name}: " + (f"the first {n})" if n else "not run)") for d, caps in SEEDS_CAP.items()
                  if d in datasets
                  for name, n in caps.items() if name in rows and n < args.seeds)
        + "; tfidf-lr is deterministic. "
        "P@5 is bounded by the few gold labels per note (1.2-2.1 on average). train s = wall time of `train()` "
        "(word2vec, training with dev evaluation each epoch, final scoring) on a shared 2-core CPU. "
        f"Runs repeat exactly at a fixed thread count (here {torch.get_num_threads()}); another count changes the "
        "floating-point order and moves a single seed's micro-F1 by up to about 0.01, which is as large as some gaps.",
        "",
        table(results),
        "",
        "Gaps: each LEAM row's seed mean minus tfidf-lr on the test notes, then a 95% interval from a "
        f"paired bootstrap ({N_BOOT:,} "
        "resamples of the test notes, both models scored on the same draw, so seed spread and test-sample noise are "
        "both in it) and the share of resamples in which LEAM comes out below. An interval that contains 0 means this "
        "test set cannot tell the two models apart on that metric.",
        "",
        *verdict(gaps),
        "",
        "Worst seed, rare codes and how runs ended. Rare codes: fewer than 20 training notes (frequent: the others); "
        "rare/frequent macro-AUC averages per-code AUC over the codes of the slice with a positive and a negative test "
        "note, macro-F1 averages per-code F1 over the codes of the slice present in test (so single test notes swing "
        "them: read them beside the code count). `mtsamples-rare` and the `mtsamples-keywords` sets (50, 300 and all "
        "keywords as labels) are the rare-code proxies built from mtsamples (see the script's docstring). "
        "'last loss above its lowest': the last epoch's training loss above the run's lowest, the largest over seeds. "
        "Last column, the collapse check of issue 25: the sum of the shared phrase window W1 at the end of each run "
        "(it starts at +1; a window summing to 0 or below turns each code's best-matching phrase into its worst), "
        "and how many seeds ended at or below 0.",
        "",
        robustness_table(results),
        "",
        *evidence_table(evidence),
        "",
        *parts_table(results),
        "Goals of #41 (the fused model, the default; every code against tfidf-lr and the leam row, top 50 against "
        "the leam row):",
        "",
        *issue41_goals(results, evidence),
        "",
        "Goals of the accuracy issue:",
        "",
        *goals(results, datasets),
        "",
        "Goals of the held-out ICD-10 set (issues 25 and 35; here their shape on the coded proxies, each "
        "LEAM row against tfidf-lr; on bc5cdr top 50 also best - worst <= 0.05):",
        "",
        *issue_goals(results),
        "",
        f"LEAM defaults: lr {d.lr} ({d.lr_schedule} schedule: x{d.lr_decay} after every {d.lr_patience} epoch(s) "
        f"without a dev gain), {d.optimizer} weight decay {d.weight_decay} on {d.decay_scope}, weight average (EMA) "
        f"{d.ema_decay}, {LEAMConfig(vocab_size=3, n_labels=1).hidden_dim}-unit head, batch "
        f"{d.batch_size}, up to {d.epochs} "
        f"epochs, patience {d.patience} (never shorter than {d.patience_steps} steps; lr patience never shorter than "
        f"{d.lr_patience_steps}), word2vec passes {'auto' if d.w2v_epochs == 0 else d.w2v_epochs}, "
        f"pos_weight {d.pos_weight}; the phrase window W1 kept >= 0 "
        f"({'on' if LEAMConfig(vocab_size=3, n_labels=1).window_nonneg else 'off'}; the paper's model frees it).",
        "",
        "How these defaults were chosen, the history of the gap, and every setting screened that did not help: "
        "docs/accuracy-tuning.md.",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d}; clinicode {__version__}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {platform.machine()}; total {time.perf_counter() - t_all:.0f} s"
        + (f" ({reused} of {n_runs} runs reused from `--runs`, trained earlier: each row names its commit and "
           "how it was trained; their `train s` were measured then)" if (reused := sum(r.get("reused", False)
                                                                        for rs in results.values() for r in rs))
           and (n_runs := sum(len(rs) for rs in results.values())) else "") + ".",
    ])
    print(text)
    if not args.no_write:
        write_section(text, ROOT / "BENCHMARKS.md")
        print(f"updated {ROOT / 'BENCHMARKS.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
