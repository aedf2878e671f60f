"""What a user waits for, at 50, 1,000 and 9,000 codes: the default model (code evidence) beside the paper's model
(`--paper`) and the straightforward PyTorch LEAM (`LEAM(fast=False)`), whole command and inner step, in one run.

    python benchmarks/bench_scale.py [--codes 50,1000,9000] [--scale 1.0] [--epochs-50 5] [--no-w2v]
                                     [--work-dir /tmp/clinicode-bench-scale] [--no-write]

Data: synthetic notes of 2,500 tokens from a Zipf-like 50,000-word vocabulary (benchmarks/_common.py), each with 15
codes drawn Zipf-like over K codes (so most codes are rare), written as a coded-notes folder (train/dev/test JSONL).
Every measurement runs in its own process; peak RSS is that process's `ru_maxrss` (from `wait4`).

- whole train: `clinicode train` as a user runs it (start-up, reading, vocabulary, the epochs, dev scoring, test
  scoring, the checkpoint), with `--embeddings random` so word2vec (a fixed cost) is not in the ratio; 5 epochs over
  3,000 notes at K = 50 (the issue's goal), 1 epoch elsewhere. Once with the default model, once with `--paper`.
- straightforward train: the inner loop only (AdamW steps of the plain paper's model on real batches): the median of
  a few steps times the steps of all epochs.
- whole predict: `clinicode predict` on notes the checkpoint has not seen, start-up and I/O included, both models.
- straightforward predict: tokenise and run the plain model's forward, 64 notes per batch (8 at 9,000 codes, where
  its [B, L, K] tensors would not fit), no start-up.
- one step: bench_train.py's child (B = 16, L = 2,500, random ids), the three implementations.
- with --w2v (default): the K = 1,000 train once more exactly as a user runs it (default word2vec), for its peak RSS.

Sizes: --scale 1 (the default) is the issue's sizes; on an otherwise idle 2-core machine `--codes 50` took about 3 min
and `--codes 1000,9000` about 7 min; beside other jobs (load 6-12) it takes hours. --scale F multiplies every note
count (at least 40 training and 20 predicted notes);
--epochs-50 sets the K = 50 train's epochs (the goal's 5 by default).
Small runs make start-up a larger share of the whole command, so their whole-process ratios are lower than a full
run's; the section says which sizes were run.
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
from clinicode.models.leam.memory import plan  # noqa: E402
from clinicode.models.leam.options import LEAMConfig  # noqa: E402

PLAIN_TRAIN_LIMIT_MB = 8_000  # the machine has 24 GB; the plain model's training batch above this is not attempted

SIZES = {50: dict(train=3000, predict=3000, epochs=5), 1000: dict(train=400, predict=400, epochs=1),
         9000: dict(train=300, predict=200, epochs=1)}
B, L = 16, 2500
GOALS = {"k50_train": 3.0, "k50_predict": 3.0, "k1000_train": 6.0, "k1000_predict": 10.0, "k1000_train_rss": 1000,
         "k9000_rss": 2000, "evidence_adds": 0.15}


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
    from clinicode.models.leam.model import LEAM

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


def one_step(K: int, impl: str, evidence: bool = False) -> tuple[float, float]:
    """bench_train's one-step measurement (random ids, 50,000 words) at K codes: (s/step, peak RSS MB)."""
    spec = dict(batch=B, length=L, dim=100, labels=K, radius=10, steps=3, impl=impl, evidence=evidence)
    _, peak, out = timed([sys.executable, str(ROOT / "benchmarks" / "bench_train.py"), "--child", json.dumps(spec)])
    return json.loads(out.strip().splitlines()[-1])["sec_per_step"], peak


def verdict(ok: bool) -> str:
    return "met" if ok else "not met"


def _arguments() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child")
    ap.add_argument("--codes", default="50,1000,9000")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every note count (default 1: the issue's sizes)")
    ap.add_argument("--epochs-50", type=int, default=5, help="epochs of the K = 50 train (the issue's goal: 5)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps of the straightforward inner loop")
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-scale"))
    ap.add_argument("--w2v", action=argparse.BooleanOptionalAction, default=True,
                    help="also run the K = 1,000 train with the default word2vec, for its peak RSS")
    ap.add_argument("--no-write", action="store_true")
    return ap.parse_args()


def _measure(K: int, data: Path, n_train: int, epochs: int,
             args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float], float, bool, int]:
    """Every process at K codes: (seconds, peak RSS MB) by measurement, the straightforward model's training batch in
    MB, whether that fits (so it was trained) and its predict batch."""
    py = [sys.executable, "-m", "clinicode"]
    cpu = ["--no-progress", "--device", "cpu"]
    steps = -(-n_train // B) * epochs
    t: dict[str, float] = {}
    m: dict[str, float] = {}
    for model, extra in (("default", []), ("paper", ["--paper"])):
        run = args.work_dir / f"run-{model}-k{K}"
        remove_own(run)  # never what this script did not create
        t[f"train_{model}"], m[f"train_{model}"], _ = timed(
            [*py, "train", "--data", str(data), "--out", str(run), "--epochs", str(epochs), *extra,
             "--embeddings", "random", *cpu])
        mark_own(run)
        out = args.work_dir / f"pred-{model}-k{K}.jsonl"
        remove_own(out)
        t[f"predict_{model}"], m[f"predict_{model}"], _ = timed(
            [*py, "predict", "--checkpoint", str(run), "--input", str(data / "notes.jsonl"), "--output", str(out),
             *cpu])
        mark_own(out)
    t["step_default"], m["step_default"] = one_step(K, "clinicode", evidence=True)
    t["step_paper"], m["step_paper"] = one_step(K, "clinicode")
    # The plain model stores G, the window and u ([B, L, K] each) with their gradients: too big at 9,000 codes.
    plain_mb = plan(LEAMConfig(vocab_size=50_002, n_labels=K, code_evidence=False), batch_size=B, max_len=L,
                    budget_mb=10**9, training=True, fast=False).batch_mb
    plain_train = plain_mb < PLAIN_TRAIN_LIMIT_MB
    paper_ck = args.work_dir / f"run-paper-k{K}" / "checkpoint"
    if plain_train:
        t["step_plain"], m["step_plain"] = one_step(K, "straightforward")
        ref, m["train_plain"] = straightforward(dict(what="train", checkpoint=paper_ck, data=data,
                                                     steps=args.steps))
        t["train_plain"] = ref["sec_per_step"] * steps
    plain_batch = 64 if K <= 1000 else 8
    ref, m["predict_plain"] = straightforward(dict(what="predict", checkpoint=paper_ck,
                                                   notes=data / "notes.jsonl", batch=plain_batch))
    t["predict_plain"] = ref["seconds"]
    if K == 1000 and args.w2v:
        run = args.work_dir / "run-default-w2v-k1000"
        remove_own(run)
        t["train_default_w2v"], m["train_default_w2v"], _ = timed(
            [*py, "train", "--data", str(data), "--out", str(run), "--epochs", "1", *cpu])
        mark_own(run)
    return t, m, plain_mb, plain_train, plain_batch


def _table_rows(K: int, t: dict[str, float], m: dict[str, float], *, epochs: int, n_train: int, n_pred: int,
                plain_mb: float, plain_train: bool, plain_batch: int) -> list[str]:
    """The table's rows at K codes: one step, whole train, whole predict (and the word2vec train's peak RSS)."""
    def ratio(kind: str, model: str) -> str:
        key = f"{kind}_plain"
        return f"{t[key] / t[f'{kind}_{model}']:.1f}x" if key in t else "-"

    def adds(kind: str) -> str:
        return f"{100 * (t[f'{kind}_default'] / t[f'{kind}_paper'] - 1):+.0f}%"

    def rss(kind: str) -> str:
        return " / ".join(f"{m[f'{kind}_{x}']:,.0f}" if f"{kind}_{x}" in m else "-"
                          for x in ("default", "paper", "plain"))

    skip = f" (the straightforward model's training batch needs ~{plain_mb / 1024:,.0f} GB: not run)"
    rows = [f"| {K:,} | one training step, B = {B}, L = {L:,} (random ids){'' if plain_train else skip} | "
            f"{ratio('step', 'default')} | {ratio('step', 'paper')} | {adds('step')} | {rss('step')} |",
            f"| {K:,} | whole `clinicode train`, {epochs} epoch{'s' * (epochs > 1)} over {n_train:,} notes, "
            f"vs the plain inner loop{'' if plain_train else skip} | {ratio('train', 'default')} | "
            f"{ratio('train', 'paper')} | {adds('train')} | {rss('train')} |",
            f"| {K:,} | whole `clinicode predict`, {n_pred:,} notes, vs tokenise + plain forward "
            f"(batches of {plain_batch}) | {ratio('predict', 'default')} | {ratio('predict', 'paper')} | "
            f"{adds('predict')} | {rss('predict')} |"]
    if "train_default_w2v" in t:
        rows.append(f"| {K:,} | whole `clinicode train`, default word2vec (exactly as a user runs it), 1 epoch "
                    f"over {n_train:,} notes: peak RSS | - | - | - | {m['train_default_w2v']:,.0f} / - / - |")
    return rows


def _goals(K: int, t: dict[str, float], m: dict[str, float], epochs: int, plain_train: bool) -> list[str]:
    """The issue's goals at K codes, each with its number and whether it is met."""
    goals: list[str] = []

    def check(name: str, value: float, goal: float, *, low: bool = False, unit: str = "x") -> None:
        ok = value < goal if low else value >= goal
        shown = f"{value:,.0f} MB" if unit == "MB" else f"{value:.1f}x"
        bound = f"< {goal:,} MB" if unit == "MB" else f">= {goal:g}x"
        goals.append(f"- K = {K:,}, {name} {bound}: {shown}, {verdict(ok)}")

    if K == 50:
        check(f"{epochs}-epoch whole train vs straightforward", t["train_plain"] / t["train_default"],
              GOALS["k50_train"])
        check("one-pass whole predict vs straightforward", t["predict_plain"] / t["predict_default"],
              GOALS["k50_predict"])
    if K == 1000:
        if plain_train:
            check("whole train vs straightforward", t["train_plain"] / t["train_default"], GOALS["k1000_train"])
        check("whole predict vs straightforward", t["predict_plain"] / t["predict_default"],
              GOALS["k1000_predict"])
        rss_key = "train_default_w2v" if "train_default_w2v" in m else "train_default"
        check("whole train peak RSS" + (" (default word2vec)" if rss_key.endswith("w2v") else " (random vectors)"),
              m[rss_key], GOALS["k1000_train_rss"], low=True, unit="MB")
    if K == 9000:
        check("whole train peak RSS", m["train_default"], GOALS["k9000_rss"], low=True, unit="MB")
        check("whole predict peak RSS", m["predict_default"], GOALS["k9000_rss"], low=True, unit="MB")
    for kind in ("train", "predict"):
        extra_cost = t[f"{kind}_default"] / t[f"{kind}_paper"] - 1
        goals.append(f"- K = {K:,}, code evidence adds <= 15% to the paper's model's whole {kind}: "
                     f"{100 * extra_cost:+.0f}%, {verdict(extra_cost <= GOALS['evidence_adds'])}")
    return goals


def _section(args: argparse.Namespace, sizes_run: list[str], rows: list[str], goals: list[str], load_start: float,
             load_end: float) -> list[str]:
    """The section of BENCHMARKS.md: what was measured, the sizes, the machine's load, the table and the goals."""
    return ["## whole process at 50, 1,000 and 9,000 codes (`benchmarks/bench_scale.py`)", "",
            "The default model (code evidence) and the paper's model (`--paper`), each against the straightforward "
            "PyTorch LEAM (`LEAM(fast=False)`: the paper's model with G, the window and u stored as [B, L, K] "
            "tensors), measured in the same run; ratio = the straightforward one's time over clinicode's (higher is "
            "faster). Synthetic notes of 2,500 tokens, 15 codes each drawn Zipf-like over K; P = 100, r = 10, "
            "B = 16. Whole train = `clinicode train --embeddings random` (start-up, reading, vocabulary, the epochs, "
            "dev and test scoring, the checkpoint) against the plain model's inner loop only (median step x steps). "
            "Whole predict = `clinicode predict` (start-up and I/O included) against tokenising and the plain "
            "forward. \"evidence adds\" = the default model's time over the paper's model's, same command. Peak "
            "RSS per process (`ru_maxrss`).", "",
            f"Sizes of this run (`--scale {args.scale:g} --epochs-50 {args.epochs_50}`): " + "; ".join(sizes_run)
            + ".", "",
            f"The machine was shared (2 cores; a long accuracy benchmark and other engineers' jobs ran throughout; "
            f"load average {load_start:.1f} at the start, {load_end:.1f} at the end): absolute times are inflated "
            "and noisy, so only ratios measured side by side are reported (the seconds are in the run's "
            "bench_scale.json); peak RSS is not affected by the load.", "",
            "| K | what | default vs straightforward | paper's vs straightforward | evidence adds | peak RSS MB "
            "(default / paper's / straightforward) |", "|---|---|---|---|---|---|", *rows, "",
            "Goals (the issue's; whole processes, the default model):", "", *goals, "", machine_line()]


def main() -> None:
    args = _arguments()
    if args.child:
        print(json.dumps(child_straightforward(json.loads(args.child))))
        return
    rows: list[str] = []
    goals: list[str] = []
    raw: dict[str, dict] = {}
    load_start = os.getloadavg()[0]
    sizes_run = []
    for K in (int(k) for k in args.codes.split(",")):
        size = dict(SIZES.get(K, SIZES[1000]))
        n_train = max(40, round(size["train"] * args.scale))
        n_pred = max(20, round(size["predict"] * args.scale))
        epochs = args.epochs_50 if K == 50 else size["epochs"]
        sizes_run.append(f"K = {K:,}: {n_train:,} training notes x {epochs} epoch{'s' * (epochs > 1)}, "
                         f"{n_pred:,} notes predicted")
        data = args.work_dir / f"k{K}-n{n_train}-p{n_pred}"
        make_data(data, K, n_train, n_pred)
        t, m, plain_mb, plain_train, plain_batch = _measure(K, data, n_train, epochs, args)
        raw[str(K)] = {"seconds": t, "peak_rss_mb": m, "n_train": n_train, "n_predict": n_pred, "epochs": epochs}
        rows += _table_rows(K, t, m, epochs=epochs, n_train=n_train, n_pred=n_pred, plain_mb=plain_mb,
                            plain_train=plain_train, plain_batch=plain_batch)
        print("\n".join(rows[-4:]), flush=True)
        goals += _goals(K, t, m, epochs, plain_train)
    (args.work_dir / "bench_scale.json").write_text(json.dumps(raw, indent=1))
    load_end = os.getloadavg()[0]
    publish("scale", _section(args, sizes_run, rows, goals, load_start, load_end), write=not args.no_write)


if __name__ == "__main__":
    main()
