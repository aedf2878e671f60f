"""Training throughput and peak memory: clinicode's LEAM vs a straightforward PyTorch LEAM, and how cost grows.

    python benchmarks/bench_train.py [--steps 5] [--quick]

Each configuration runs in a fresh subprocess (so peak RSS is its own): one Adam step on a batch of random token
ids (forward, both losses, backward, update), median over --steps after 2 warm-up steps. The reference row is the
paper's model written the obvious way (einsum G, a 1-channel convolution over [B*K, 1, L], dense Adam); clinicode
runs the same mathematics. tfidf-lr's fit is timed on synthetic notes for scale.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import machine_line, write_section  # noqa: E402

VOCAB = 50_000


def _child(spec: dict) -> dict:
    """Runs in the subprocess: time one configuration."""
    import statistics
    import time

    import torch
    import torch.nn.functional as F

    from clinicode.config import LEAMConfig
    from clinicode.model import LEAM

    torch.manual_seed(0)
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    B, L, P, K, r = spec["batch"], spec["length"], spec["dim"], spec["labels"], spec["radius"]
    cfg = LEAMConfig(vocab_size=VOCAB, n_labels=K, embed_dim=P, radius=r)

    class Straightforward(LEAM):
        """The paper's equations, written the obvious way."""

        def attend(self, words, mask):
            words_n = words / (words.norm(dim=-1, keepdim=True) + 1e-8)
            labels_n = self.label_emb / (self.label_emb.norm(dim=-1, keepdim=True) + 1e-8)
            G = torch.einsum("blp,kp->bkl", words_n, labels_n) * mask.unsqueeze(1)
            Bn, Kn, Ln = G.shape
            u = F.conv1d(G.reshape(Bn * Kn, 1, Ln), self.phrase_w.view(1, 1, -1), padding=self.config.radius)
            u = F.relu(u.view(Bn, Kn, Ln) + self.phrase_b.view(1, Kn, 1))
            beta = torch.softmax(u.amax(dim=1).masked_fill(~mask, float("-inf")), dim=-1)
            z = torch.einsum("bl,blp->bp", beta, words)
            return beta, z, u

    if spec["impl"] == "straightforward":
        model = Straightforward(cfg)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        from clinicode.config import TrainConfig
        from clinicode.train import make_optimizer

        model = LEAM(cfg)
        opt = make_optimizer(model, TrainConfig(lr=1e-3))
    ids = torch.randint(2, VOCAB, (B, L))
    mask = torch.ones(B, L, dtype=torch.bool)
    y = (torch.rand(B, K) < 0.05).float()

    def step():
        loss, _ = model.loss(model(ids, mask).logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    times = []
    for _ in range(spec["steps"]):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    return {"sec_per_step": t, "notes_per_s": B / t, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run(spec: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, check=True)
    return {**spec, **json.loads(out.stdout.strip().splitlines()[-1])}


def tfidf_fit_rate(n: int = 400) -> float:
    import time

    import numpy as np

    from benchmarks._common import synthetic_notes
    from clinicode.baseline import TfidfLR, TfidfLRConfig

    notes = synthetic_notes(n, seed=3)
    y = (np.random.default_rng(0).random((n, 50)) < 0.1).astype(np.float32)
    t0 = time.perf_counter()
    TfidfLR(TfidfLRConfig(), n_labels=50).fit(notes, y)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="headline rows only")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return
    base = dict(batch=16, length=2500, dim=100, labels=50, radius=10, steps=args.steps)
    rows = [run({**base, "impl": "straightforward"}), run({**base, "impl": "clinicode"})]
    ref = rows[0]["sec_per_step"]
    lines = ["## train throughput (`benchmarks/bench_train.py`)", "",
             "One Adam step (forward, task + label-regulariser loss, backward, update) on random ids; 50,000-word "
             f"vocabulary; median of {args.steps} steps after 2 warm-up steps; each row in its own process. "
             "Goal: >= 300 notes/s at B = 16, L = 2,500, P = 100, r = 10, K = 50 (the straightforward model does ~75).", "",
             "| implementation | B | L | P | K | r | s/step | notes/s | ratio | peak RSS MB |", "|---|---|---|---|---|---|---|---|---|---|"]

    def fmt(r: dict) -> str:
        return (f"| {r['impl']} | {r['batch']} | {r['length']} | {r['dim']} | {r['labels']} | {r['radius']} | "
                f"{r['sec_per_step']:.3f} | {r['notes_per_s']:.0f} | {ref / r['sec_per_step']:.2f}x | {r['peak_mb']:.0f} |")

    lines += [fmt(r) for r in rows]
    if not args.quick:
        scaling = []
        for key, values in (("length", (500, 1000, 2500, 4000)), ("labels", (10, 50, 200)), ("dim", (50, 100, 300))):
            for v in values:
                if v == base[key]:
                    continue
                for impl in ("straightforward", "clinicode"):
                    scaling.append(run({**base, key: v, "impl": impl}))
        lines += ["", "How cost grows (one parameter changed from the headline row; ratio vs the headline straightforward step):", "",
                  "| implementation | B | L | P | K | r | s/step | notes/s | ratio | peak RSS MB |", "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [fmt(r) for r in scaling]
    lines += ["", f"tfidf-lr fit on 400 synthetic notes of 2,500 tokens, 50 labels: {tfidf_fit_rate():.0f} notes/s (for scale).",
              "", machine_line()]
    table = "\n".join(lines)
    print(table)
    if not args.no_write:
        write_section("train", table)


if __name__ == "__main__":
    main()
