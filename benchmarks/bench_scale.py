"""What a user waits for, at 50, 1,000 and 9,000 codes: whole `clinicode train` and `clinicode predict` beside one
training step, each against the straightforward PyTorch LEAM (`LEAM(fast=False)`) measured in the same run.

    python benchmarks/bench_scale.py [--codes 50,1000,9000] [--work-dir /tmp/clinicode-bench-scale] [--no-write]

Data: synthetic notes of 2,500 tokens from a Zipf-like 50,000-word vocabulary (benchmarks/_common.py), each with 15
codes drawn Zipf-like over K codes (so most codes are rare), written as a coded-notes folder (train/dev/test JSONL).
Every measurement runs in its own process; peak RSS is that process's `ru_maxrss` (from `wait4`).

- whole train: `clinicode train --epochs 1` as a user runs it (start-up, reading, vocabulary, one epoch, dev scoring,
  test scoring, the checkpoint), with `--embeddings random` so word2vec (a fixed cost, below) is not in the ratio.
- straightforward train: the inner loop only (AdamW steps of the plain model on pre-tokenised batches): the
  median of a few steps times the epoch's step count.
- whole predict: `clinicode predict` on notes the checkpoint has not seen, start-up and I/O included.
- straightforward predict: tokenise and run the plain model's forward, 64 notes per batch (fewer where its
  [B, L, K] tensors would not fit), no start-up.
- with `--code-evidence`: the same whole train and predict with the option on, beside the runs without it (its
  cost; docs/training.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import OWN_MARK, machine_line, mark_own, publish, remove_own, synthetic_notes  # noqa: E402
from clinicode.config import LEAMConfig  # noqa: E402
from clinicode.memory import plan  # noqa: E402

PLAIN_TRAIN_LIMIT_MB = 8_000  # the machine has 24 GB; the plain model's training batch above this is not attempted

SIZES = {50: dict(train=3000, predict=2000), 1000: dict(train=400, predict=400), 9000: dict(train=300, predict=200)}
B, L = 16, 2500


def code_name(k: int) -> str:
    """ICD-9-shaped names (100.00, 100.01, ...): no ICD-10-CM title lookup, as for real ICD-9 data."""
    return f"{100 + k // 100:03d}.{k % 100:02d}"


def make_data(folder: Path, K: int, n_train: int, n_predict: int) -> None:
    import numpy as np

    if (folder / "DONE").is_file():
        return
    if folder.exists() and not (folder / OWN_MARK).is_file():
        raise SystemExit(f"{folder} exists and was not created by this benchmark (no {OWN_MARK} "
                         "mark); it is left alone. "
                         "Move it away or pass another --work-dir.")
    folder.mkdir(parents=True, exist_ok=True)
    mark_own(folder)
    rng = np.random.default_rng(K)
    p = 1.0 / np.arange(1, K + 1)
    p /= p.sum()
    n_eval = max(100, n_train // 10)
    for split, n, seed in (("train", n_train, 1), ("dev", n_eval, 2), ("test", n_eval, 3)):
        with open(folder / f"{split}.jsonl", "w") as f:
            for i, text in enumerate(synthetic_notes(n, seed=seed + 10 * K)):
                codes = sorted(set(rng.choice(K, size=15, p=p).tolist()))
                f.write(json.dumps({"id": f"{split}{i}", "text": text, "labels": [code_name(c) for c in codes]}) + "\n")
    with open(folder / "notes.jsonl", "w") as f:
        for i, text in enumerate(synthetic_notes(n_predict, seed=4 + 10 * K)):
            f.write(json.dumps({"id": f"n{i}", "text": text}) + "\n")
    (folder / "DONE").write_text("")


def timed(cmd: list[str], **kw) -> tuple[float, float, str]:
    """Run cmd; (wall seconds, peak RSS MB, stdout)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, **kw)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[:4])} failed:\n{err.read()[-3000:]}")
        return wall, usage.ru_maxrss / 1024, out.read()


def child_straightforward(spec: dict) -> dict:
    """In a subprocess: the plain model's training steps, or its forward over the notes file."""
    import statistics

    import torch

    from clinicode.batching import pad_batch
    from clinicode.checkpoint import load_checkpoint
    from clinicode.model import LEAM

    ck = load_checkpoint(Path(spec["checkpoint"]))
    model = LEAM(ck.model.config, fast=False)
    model.load_state_dict(ck.model.state_dict())
    tok = ck.tokenizer
    if spec["what"] == "train":
        notes = [json.loads(line)["text"] for line in open(spec["data"] / Path("train.jsonl"))][:B]
        ids, mask = pad_batch(tok.encode_ids(notes))
        y = (torch.rand(B, ck.model.config.n_labels) < 0.01).float()
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        times = []
        for i in range(spec["steps"] + 1):
            t0 = time.perf_counter()
            loss, _ = model.loss(model(ids, mask).logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if i:  # the first step warms up
                times.append(time.perf_counter() - t0)
        return {"sec_per_step": statistics.median(times)}
    notes = [json.loads(line)["text"] for line in open(spec["notes"])]
    model.eval()
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(notes), spec["batch"]):
            ids, mask = pad_batch(tok.encode_ids(notes[i:i + spec["batch"]]))
            torch.sigmoid(model(ids, mask).logits)
    return {"seconds": time.perf_counter() - t0}


def straightforward(spec: dict) -> tuple[dict, float]:
    spec = {k: str(v) if isinstance(v, Path) else v for k, v in spec.items()}
    _, peak, out = timed([sys.executable, __file__, "--child", json.dumps(spec)])
    return json.loads(out.strip().splitlines()[-1]), peak


def one_step(K: int, impl: str) -> tuple[float, float]:
    """bench_train's one-step measurement (random ids, 50,000 words) at K codes: (s/step, peak RSS MB)."""
    spec = dict(batch=B, length=L, dim=100, labels=K, radius=10, steps=3, impl=impl)
    _, peak, out = timed([sys.executable, str(ROOT / "benchmarks" / "bench_train.py"), "--child", json.dumps(spec)])
    return json.loads(out.strip().splitlines()[-1])["sec_per_step"], peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child")
    ap.add_argument("--codes", default="50,1000,9000")
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-scale"))
    ap.add_argument("--w2v", action=argparse.BooleanOptionalAction, default=True, help="also time word2vec at K = 50")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child_straightforward(json.loads(args.child))))
        return
    py = [sys.executable, "-m", "clinicode"]
    rows = []
    notes_line = []
    for K in (int(k) for k in args.codes.split(",")):
        size = SIZES.get(K, SIZES[1000])
        data = args.work_dir / f"k{K}"
        make_data(data, K, size["train"], size["predict"])
        run = args.work_dir / f"run-k{K}"
        remove_own(run)  # never what this script did not create
        n_train = size["train"]
        steps = -(-n_train // B)
        t_train, rss_train, _ = timed([*py, "train", "--data", str(data), "--out", str(run), "--epochs", "1",
                                       "--embeddings", "random", "--no-progress", "--device", "cpu"])
        mark_own(run)
        out = args.work_dir / f"pred-k{K}.jsonl"
        remove_own(out)
        t_pred, rss_pred, _ = timed([*py, "predict", "--checkpoint", str(run), "--input", str(data / "notes.jsonl"),
                                     "--output", str(out), "--no-progress", "--device", "cpu"])
        mark_own(out)
        step_fast, rss_step_fast = one_step(K, "clinicode")
        plain_batch = 64 if K <= 1000 else 8
        n_pred = size["predict"]
        # The plain model stores G, the window and u ([B, L, K] each) with their gradients: too big at 9,000 codes.
        plain_mb = plan(LEAMConfig(vocab_size=50_002, n_labels=K), batch_size=B, max_len=L, budget_mb=10**9,
                        training=True, fast=False).batch_mb
        if plain_mb < PLAIN_TRAIN_LIMIT_MB:
            ref_step, ref_step_rss = one_step(K, "straightforward")
            ref_train, ref_train_rss = straightforward(dict(what="train", checkpoint=run / "checkpoint",
                                                            data=data, steps=3))
            t_ref_epoch = ref_train["sec_per_step"] * steps
        ref_pred, ref_pred_rss = straightforward(dict(what="predict", checkpoint=run / "checkpoint",
                                                      notes=data / "notes.jsonl", batch=plain_batch))

        def rate(n: int, t: float) -> str:
            return f"{n / t:,.1f}" if n / t < 10 else f"{n / t:,.0f}"

        skip = f"not run: a batch needs ~{plain_mb / 1024:,.0f} GB | - |"
        rows.append(f"| {K:,} | train: one step, B = {B}, L = {L:,} (random ids) | {rate(B, step_fast)} | "
                    + (f"{rate(B, ref_step)} | {ref_step / step_fast:.1f}x | "
                       f"{rss_step_fast:,.0f} | {ref_step_rss:,.0f} |"
                       if plain_mb < PLAIN_TRAIN_LIMIT_MB else f"{skip} {rss_step_fast:,.0f} | - |"))
        rows.append(f"| {K:,} | train: whole `clinicode train`, 1 epoch over {n_train:,} notes ({t_train:,.1f} s)"
                    + (f" vs the plain inner loop ({t_ref_epoch:,.1f} s) | {rate(n_train, t_train)} | "
                       f"{rate(n_train, t_ref_epoch)} | {t_ref_epoch / t_train:.1f}x | "
                       f"{rss_train:,.0f} | {ref_train_rss:,.0f} |"
                       if plain_mb < PLAIN_TRAIN_LIMIT_MB else f" | {rate(n_train, t_train)} | "
                                                               f"{skip} {rss_train:,.0f} | - |"))
        rows.append(f"| {K:,} | predict: whole `clinicode predict`, {n_pred:,} notes ({t_pred:,.1f} s) vs tokenise + "
                    f"plain forward, batches of {plain_batch} ({ref_pred['seconds']:,.1f} s) | "
                    f"{rate(n_pred, t_pred)} | "
                    f"{rate(n_pred, ref_pred['seconds'])} | {ref_pred['seconds'] / t_pred:.1f}x | {rss_pred:,.0f} | "
                    f"{ref_pred_rss:,.0f} |")
        run_ev, out_ev = args.work_dir / f"run-ev-k{K}", args.work_dir / f"pred-ev-k{K}.jsonl"
        remove_own(run_ev)
        remove_own(out_ev)
        t_ev, rss_ev, _ = timed([*py, "train", "--data", str(data), "--out", str(run_ev), "--epochs", "1",
                                 "--code-evidence",
                                 "--embeddings", "random", "--no-progress", "--device", "cpu"])
        mark_own(run_ev)
        t_pev, rss_pev, _ = timed([*py, "predict", "--checkpoint", str(run_ev), "--input", str(data / "notes.jsonl"),
                                   "--output", str(out_ev), "--no-progress", "--device", "cpu"])
        mark_own(out_ev)
        rows.append(f"| {K:,} | train with `--code-evidence` ({t_ev:,.1f} s) vs without it ({t_train:,.1f} s) | "
                    f"{rate(n_train, t_ev)} | {rate(n_train, t_train)} (without) | "
                    f"{t_train / t_ev:.2f}x | {rss_ev:,.0f} | "
                    f"{rss_train:,.0f} (without) |")
        rows.append(f"| {K:,} | predict with `--code-evidence` ({t_pev:,.1f} s) vs without it ({t_pred:,.1f} s) | "
                    f"{rate(n_pred, t_pev)} | {rate(n_pred, t_pred)} (without) | "
                    f"{t_pred / t_pev:.2f}x | {rss_pev:,.0f} | "
                    f"{rss_pred:,.0f} (without) |")
        print("\n".join(rows[-5:]), flush=True)
        if K == 50 and args.w2v:
            run2 = args.work_dir / "run-k50-w2v"
            remove_own(run2)
            t_w2v, rss_w2v, _ = timed([*py, "train", "--data", str(data), "--out", str(run2), "--epochs", "1",
                                       "--no-progress", "--device", "cpu"])
            mark_own(run2)
            notes_line.append(f"With the default `--embeddings w2v` the same K = 50 run takes {t_w2v:,.1f} s "
                              f"(peak RSS {rss_w2v:,.0f} MB): word2vec's passes over the training notes (gensim, one "
                              f"thread so a seed repeats exactly) cost {t_w2v - t_train:,.1f} s more.")
    lines = ["## whole process at 50, 1,000 and 9,000 codes (`benchmarks/bench_scale.py`)", "",
             "notes/s as a user waits for them, clinicode beside the straightforward PyTorch LEAM (`LEAM(fast=False)`: "
             "G, the window and u stored as [B, L, K] tensors) in the same run; ratio = clinicode's speed over the "
             "straightforward one. Synthetic notes of 2,500 tokens, 15 codes each drawn Zipf-like over K; P = 100, "
             "r = 10, B = 16. Whole train = `clinicode train --epochs 1 --embeddings random` (start-up, reading, "
             "vocabulary, the epoch, dev and test scoring, the checkpoint) against the plain model's inner loop only "
             "(median step x steps). Whole predict = `clinicode predict` (start-up and I/O included) against "
             "tokenising and the plain forward. Peak RSS per process. Goals: K = 50 whole train and predict >= 4x; "
             "K = 1,000 train >= 6x, predict >= 10x, train peak RSS < 1 GB; K = 9,000 predict < 4 GB, train completes. "
             "The `--code-evidence` rows compare clinicode with itself: the option on against off, same data and "
             "command (ratio below 1 = slower with it).",
             "", "| K | what | clinicode notes/s | straightforward notes/s | ratio | clinicode peak RSS MB | "
             "straightforward peak RSS MB |", "|---|---|---|---|---|---|---|", *rows, "", *notes_line,
             "", machine_line()]
    publish("scale", lines, write=not args.no_write)


if __name__ == "__main__":
    main()
