"""Inference throughput: clinicode's Predictor vs a straightforward PyTorch LEAM forward vs tfidf-lr.

    python benchmarks/bench_predict.py [--notes 2000] [--repeat 3] [--work-dir /tmp/clinicode-bench-predict]

A MIMIC-sized checkpoint (vocabulary ~50k words, 100-d, 50 codes, r = 10) is built on synthetic notes of
2,500 tokens (random weights: throughput does not depend on training). Every row includes tokenisation.
The whole-process row times `clinicode predict` as a user runs it (start-up, reading, writing included).
Medians of --repeat runs; ratios against the straightforward forward pass measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from benchmarks._common import machine_line, median_time, publish, synthetic_notes
from clinicode.batching import pad_batch
from clinicode.checkpoint import load_checkpoint, save_checkpoint
from clinicode.config import TrainConfig
from clinicode.data.labels import LabelSet
from clinicode.models.leam.model import LEAM
from clinicode.models.leam.options import LEAMConfig
from clinicode.predict import Predictor
from clinicode.tokenizer import ClinicalTokenizer


def build(work: Path, n_notes: int) -> tuple[Path, list[str], Path]:
    ck_dir, notes_file = work / "run" / "checkpoint", work / "notes.jsonl"
    notes = synthetic_notes(n_notes, seed=1)
    if not (ck_dir / "manifest.json").is_file():
        tok = ClinicalTokenizer.fit(synthetic_notes(1500, seed=2), min_doc_freq=3)
        torch.manual_seed(0)
        model = LEAM(LEAMConfig(vocab_size=tok.vocab_size, n_labels=50, embed_dim=100, radius=10)).eval()
        labels = LabelSet.from_codes([f"C{i:02d}" for i in range(50)])
        save_checkpoint(ck_dir, kind="leam", model=model, labels=labels, threshold=0.5, train_config=TrainConfig(),
                        tokenizer=tok)
    if not notes_file.is_file():
        with open(notes_file, "w") as f:
            for i, t in enumerate(notes):
                f.write(json.dumps({"id": f"n{i}", "text": t}) + "\n")
    return ck_dir, notes, notes_file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-predict"))
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    ck_dir, notes, notes_file = build(args.work_dir, args.notes)
    ck = load_checkpoint(ck_dir)
    pred = Predictor(ck)
    tok = ck.tokenizer
    model = LEAM(ck.model.config, fast=False)  # the model's plain PyTorch path: the reference
    model.load_state_dict(ck.model.state_dict())
    model.eval()
    n = len(notes)
    lengths = [len(e.ids) for e in tok.encode(notes[:50])]

    def naive() -> None:  # the paper's equations written plainly, fixed batches of 64, no table, no bucketing
        with torch.inference_mode():
            for i in range(0, n, 64):
                ids, mask = pad_batch(tok.encode_ids(notes[i:i + 64]))
                torch.sigmoid(model(ids, mask).logits)

    from clinicode.models.tfidf_lr.baseline import TfidfLR, TfidfLRConfig

    rng = np.random.default_rng(0)
    n_fit = min(400, n)
    lr = TfidfLR(TfidfLRConfig(), n_labels=50).fit(notes[:n_fit], (rng.random((n_fit, 50)) < 0.1).astype(np.float32))

    rows = []
    t_naive = median_time(naive, repeat=args.repeat)
    rows.append(("straightforward PyTorch LEAM forward (baseline)", t_naive))
    rows.append(("tokenizer alone (Rust, no offsets)", median_time(lambda: tok.encode(notes), repeat=args.repeat)))
    rows.append(("clinicode Predictor.score", median_time(lambda: pred.score(notes), repeat=args.repeat)))
    rows.append(("clinicode Predictor.predict(explain=5) (offsets + evidence)",
                 median_time(lambda: pred.predict(notes, explain=5), repeat=max(1, args.repeat - 1), warmup=0)))
    rows.append(("tfidf-lr predict_proba", median_time(lambda: lr.predict_proba(notes), repeat=args.repeat)))

    def whole() -> None:
        out = args.work_dir / "out.jsonl"
        subprocess.run([sys.executable, "-m", "clinicode", "predict", "--checkpoint", str(ck_dir), "--input",
                        str(notes_file),
                        "--output", str(out), "--no-progress", "--device", "cpu"], check=True, capture_output=True)

    rows.append(("whole process: `clinicode predict` (start-up and I/O included)",
                 median_time(whole, repeat=args.repeat, warmup=0)))

    lines = ["## predict throughput (`benchmarks/bench_predict.py`)", "",
             f"{n:,} synthetic notes of {int(np.median(lengths)):,} tokens; checkpoint with {tok.vocab_size:,} words, "
             f"100-d, 50 codes, r = 10; CPU, {torch.get_num_threads()} threads. Medians of {args.repeat} runs; ratio = "
             "speed relative to the straightforward forward pass in the same run. Goal: >= 600 notes/s whole process.",
             "",
             "| path | seconds | notes/s | ratio |", "|---|---|---|---|"]
    for name, t in rows:
        lines.append(f"| {name} | {t:.2f} | {n / t:,.0f} | {t_naive / t:.2f}x |")
    lines += ["", machine_line()]
    publish("predict", lines, write=not args.no_write)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    main()
