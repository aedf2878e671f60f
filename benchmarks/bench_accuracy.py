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
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy_report import METRICS, report_text  # noqa: E402
from benchmarks.accuracy_sets import (  # noqa: E402
    DATA,
    DATASETS,
    FUSED_SEEDS,
    MAP_WITHOUT,
    N_BOOT,
    PROXIES,
    ROW_KIND,
    SEEDS_CAP,
    VARIANTS,
    descriptions_for,
    make_proxy,
    source_dir,
    top_k_for,
    unseen_share,
)

RARE_BAND = 10   # #41's rare band: codes with fewer than 10 training notes
START, END = "<!-- bench:accuracy:start -->", "<!-- bench:accuracy:end -->"


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
    """Train one model with default settings (LEAM and fused: optionally with OPTIONS, TrainConfig or model option
    fields, changed) into WORK/DATASET-NAME-SEED (NAME: the row's name, default MODEL); return its test metrics, the
    rare-code slice, how training ended, wall-clock seconds and the run folder. A row kept beside it by an earlier call
    with the same settings is returned as it is (see `--runs`)."""
    import torch

    from clinicode.config import TrainConfig
    from clinicode.constants import CHECKPOINT_DIR, LABELS_FILE
    from clinicode.data.labels import LabelSet
    from clinicode.models import MODEL_KINDS, option_names
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
            if "map" not in row:   # kept from before the shared tasks' metrics: measured on its checkpoint now
                row.update(shared_task_figures(dataset, Path(row["run"]), data_dir))
            return {**row, "reused": True}
    if REUSE_ONLY:   # --reuse-only: report what --runs holds, train nothing
        return None

    # model options: LEAM's and the fused model's own, which a leam run leaves out (they act on the fused model)
    fused_own = set(option_names(MODEL_KINDS["fused"])) - set(option_names(MODEL_KINDS["leam"]))
    model_fields = {f.name for f in dataclasses.fields(LEAMConfig)} | fused_own
    extra = dict(options or {}) if model in ("leam", "fused") else {}
    model_options = {k: extra.pop(k) for k in list(extra) if k in model_fields}
    if model == "leam":
        model_options = {k: v for k, v in model_options.items() if k not in fused_own}
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
    row.update(shared_task_figures(dataset, Path(res["run"]), data_dir))
    print(json.dumps({"dataset": dataset, "model": name or model, "seed": seed, **row}), file=sys.stderr, flush=True)
    row = {**row, "run": res["run"], "key": run_key, "commit": _commit()}
    tmp = kept.with_name(kept.name + ".tmp")
    tmp.write_text(json.dumps(row, indent=1), encoding="utf-8")
    tmp.replace(kept)
    return row


def shared_task_figures(dataset: str, run: Path, data_dir: Path) -> dict:
    """The shared tasks' metrics of a run on the test split, as `clinicode evaluate` reports them: MAP (gold codes
    outside the model never retrieved), MAP without the set's MAP_WITHOUT codes, and the span-and-code P/R/F1 (None
    where the notes carry no evidence spans or the model shows none)."""
    from clinicode.evaluate import evaluate

    m = evaluate(checkpoint=run, data_dir=data_dir, split="test", device="cpu",
                 map_without=MAP_WITHOUT.get(dataset, ()))
    span = m.get("span_code") or {}
    return {"map": m["map"], "map_without": (m.get("map_without") or {}).get("map"),
            "span_precision": span.get("precision"), "span_recall": span.get("recall"), "span_f1": span.get("f1")}


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


def gap(data_dir: Path, leam: list[dict], lr: list[dict]) -> dict:
    """`clinicode compare` of the LEAM seeds (A) against tfidf-lr (B) on the test notes, as a user would run it."""
    from clinicode.evaluate import compare

    dataset = data_dir.name
    c = compare(runs_a=[Path(r["run"]) for r in leam], runs_b=[Path(r["run"]) for r in lr], data_dir=data_dir,
                n_boot=N_BOOT, device="cpu")
    for side, rows in (("metrics_a", leam), ("metrics_b", lr)):
        if any(r["run"] in c["codes_lacking"] for r in rows):
            continue   # scored over codes it lacks (the default model learns dev's), which its own test metrics skip
        if abs(c[side]["f1_micro"] - statistics.mean(r["f1_micro"] for r in rows)) > 1e-9:
            raise RuntimeError(f"{dataset}: compare's scores disagree with train()'s test metrics.")
    return c


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
    """KEY=VALUE pairs as TrainConfig or model option fields (the fused model's: LEAM's and its own), each value
    parsed as its field's type."""
    from clinicode.config import TrainConfig
    from clinicode.models import MODEL_KINDS
    from clinicode.models.leam.options import LEAMConfig

    fused = MODEL_KINDS["fused"].options_type   # LEAM's options and the fused model's own
    leam_fields = {f.name: f for f in dataclasses.fields(LEAMConfig) if f.name not in ("vocab_size", "n_labels")}
    model_fields = {**{f.name: f for f in dataclasses.fields(fused)}, **leam_fields}
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
    LEAMConfig(vocab_size=3, n_labels=1, **{k: v for k, v in out.items() if k in leam_fields})
    fused(**{k: v for k, v in out.items() if k in model_fields and k not in leam_fields})
    return out


def _arguments() -> argparse.Namespace:
    """The command line (see the module docstring)."""
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
                    help="change one training or model option (a TrainConfig field, or the fused model's options: "
                         "LEAM's and fused_epochs, mentions, fit_on, terminology), e.g. "
                         "lr_schedule=constant or label_reg_weight=0; repeatable; "
                         "implies --no-write.")
    return ap.parse_args()


def _options(args: argparse.Namespace) -> dict:
    """The options changed by --set and --embeddings (either implies --no-write); notes --reuse-only for `run_one`."""
    global REUSE_ONLY
    REUSE_ONLY = bool(args.reuse_only)
    options = _parse_sets(args.set)
    if args.embeddings:
        if not Path(args.embeddings).is_file():
            sys.exit(f"--embeddings {args.embeddings}: no such file; give a word2vec/GloVe text file.")
        options["embeddings"] = args.embeddings
    if options:
        args.no_write = True
    return options


def _chosen(args: argparse.Namespace, options: dict) -> tuple[list[str], dict[str, dict]]:
    """The sets to run (each must have its data) and the model rows beside tfidf-lr, each with its options."""
    datasets = [d for d in args.datasets.split(",") if d]
    missing = [d for d in datasets
               if not (source_dir(d) / "train.jsonl").is_file() and not (DATA / d / "train.parquet").is_file()]
    if missing:
        sys.exit(f"no data for {', '.join(missing)} under {DATA}; expected {{train,dev,test}}.jsonl per set.")
    chosen = [r for r in args.rows.split(",") if r]
    unknown = [r for r in chosen if r not in ROW_KIND]
    if unknown:
        sys.exit(f"--rows {args.rows}: unknown row {unknown[0]!r}; expected some of {', '.join(ROW_KIND)}.")
    rows = {r: ({**VARIANTS.get(r, {}), **options}) for r in chosen
            if not (args.no_paper and r == "leam (paper)")}
    return datasets, rows


def _n_seeds(dataset: str, name: str, seeds: int) -> int:
    """Seeds of row NAME on DATASET: --seeds, capped where this machine could not afford more (0: not run)."""
    cap = FUSED_SEEDS.get(dataset, seeds) if name == "fused" else \
        SEEDS_CAP.get(dataset, {}).get(name, seeds)
    return min(seeds, cap)


def _run_set(dataset: str, data_dir: Path, top_k: int | None, rows: dict[str, dict], seeds: int, work: Path,
             results: dict[tuple[str, str], list[dict]], gaps: dict[tuple[str, str], dict]) -> None:
    """tfidf-lr and every model row on one set, into RESULTS (their rows) and GAPS (each row against tfidf-lr)."""
    lr = [r for r in [run_one(dataset, data_dir, "tfidf-lr", 1337, top_k, work)] if r]
    if not lr:
        return
    results[(dataset, "tfidf-lr")] = lr
    for name, opts in rows.items():
        n_seeds = _n_seeds(dataset, name, seeds)
        if n_seeds == 0:                                      # a row this machine could not afford
            continue
        leam = [r for r in (run_one(dataset, data_dir, ROW_KIND[name], 1337 + i, top_k, work, opts, name)
                            for i in range(n_seeds)) if r]
        if not leam:
            continue
        results[(dataset, name)] = leam
        gaps[(dataset, name)] = gap(data_dir, leam, lr)


def _run_sets(datasets: list[str], rows: dict[str, dict], seeds: int,
              runs: str | None) -> tuple[dict, dict, dict, dict]:
    """Every set (proxies built first) in the --runs folder or a temporary one: results, gaps, top-k per set and the
    evidence figures."""
    results: dict[tuple[str, str], list[dict]] = {}
    gaps: dict[tuple[str, str], dict] = {}
    if runs:
        Path(runs).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="clinicode-bench-acc-") as tmp:
        work = Path(runs).resolve() if runs else Path(tmp)
        dirs = {d: make_proxy(d, work / "data") if d in PROXIES else source_dir(d) for d in datasets}
        top_ks = {d: top_k_for(d, dirs[d]) for d in datasets}
        for dataset in datasets:
            _run_set(dataset, dirs[dataset], top_ks[dataset], rows, seeds, work, results, gaps)
        evidence = evidence_rows(results, dirs)
    return results, gaps, top_ks, evidence


def main() -> None:
    args = _arguments()
    options = _options(args)

    import torch

    torch.set_num_threads(args.threads)

    datasets, rows = _chosen(args, options)
    t_all = time.perf_counter()
    _commit()  # each row names the code this process trains with, not the tree when the row is written
    results, gaps, top_ks, evidence = _run_sets(datasets, rows, args.seeds, args.runs)
    text = report_text(results, gaps, evidence, datasets=datasets, top_ks=top_ks, rows=rows, seeds=args.seeds,
                       options=options, t_all=t_all)
    print(text)
    if not args.no_write:
        write_section(text, ROOT / "BENCHMARKS.md")
        print(f"updated {ROOT / 'BENCHMARKS.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
