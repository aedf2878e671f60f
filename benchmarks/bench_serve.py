"""`clinicode serve` under load: throughput and p50/p95 latency at 1, 8 and 32 concurrent clients, each sending one
2,500-token note per request, beside whole-process `clinicode predict` on the same notes in the same run.

    python benchmarks/bench_serve.py [--requests 200] [--repeat 3] [--work-dir /tmp/clinicode-bench-serve]

The checkpoint is built here on synthetic notes (random weights: speed does not depend on training), as in
bench_predict.py: a vocabulary of ~50k made-up words, 100-d, 50 codes, r = 10. The server is a real
`clinicode serve` process on a free loopback port; the clients are threads of this process on keep-alive
connections, each POSTing one note (bodies encoded before the clock starts) and waiting for the answer.
`clinicode predict` runs as a whole process on a JSONL file of the same notes, with the same options (top_k 10,
no evidence); "start-up excluded" subtracts the median time of the same command on a one-note file.
Goal: 8 clients x 25 requests with 0 errors, and serve throughput >= 0.8x batch predict (start-up excluded).
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks._common import machine_line, median_time, publish, synthetic_notes
from clinicode.checkpoint import save_checkpoint
from clinicode.config import TrainConfig
from clinicode.data.labels import LabelSet
from clinicode.models.leam.model import LEAM
from clinicode.models.leam.options import LEAMConfig
from clinicode.tokenizer import ClinicalTokenizer

LEVELS = (1, 8, 32)


def build(work: Path, n_notes: int) -> tuple[Path, list[str]]:
    ck_dir = work / "run" / "checkpoint"
    notes = synthetic_notes(n_notes, seed=1)
    if not (ck_dir / "manifest.json").is_file():
        tok = ClinicalTokenizer.fit(synthetic_notes(600, seed=2), min_doc_freq=3)
        torch.manual_seed(0)
        model = LEAM(LEAMConfig(vocab_size=tok.vocab_size, n_labels=50, embed_dim=100, radius=10)).eval()
        labels = LabelSet.from_codes([f"{400 + i}.{i % 10}" for i in range(50)])  # ICD-9-shaped diagnosis codes
        save_checkpoint(ck_dir, kind="leam", model=model, labels=labels, threshold=0.5, train_config=TrainConfig(),
                        tokenizer=tok)
    for name, subset in (("notes.jsonl", notes), ("one.jsonl", notes[:1])):
        with open(work / name, "w") as f:
            for i, t in enumerate(subset):
                f.write(json.dumps({"id": f"n{i}", "text": t}) + "\n")
    return ck_dir, notes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(ck_dir: Path, work: Path) -> tuple[subprocess.Popen, int, float]:
    port = free_port()
    t0 = time.perf_counter()
    log = open(work / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "clinicode", "serve", "--checkpoint", str(ck_dir), "--port",
                             str(port),
                             "--device", "cpu"], stdout=log, stderr=subprocess.STDOUT)
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/ready")  # /health answers while the model still loads
            if c.getresponse().status == 200:
                return proc, port, time.perf_counter() - t0
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"server exited; see {work / 'server.log'}")
        time.sleep(0.1)


def load(port: int, bodies: list[bytes], clients: int, per_client: int) -> dict[str, float]:
    """`clients` threads, each sending `per_client` one-note requests in turn; wall time, latencies, errors."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        start.wait()
        for j in range(per_client):
            body = bodies[(i * per_client + j) % len(bodies)]
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/predict", body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                ok = resp.status == 200 and b'"results"' in resp.read()
            except OSError:
                ok = False
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                errors[0] += not ok

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = sorted(latencies)
    return {"n": len(lat), "wall": wall, "rate": len(lat) / wall, "p50": statistics.median(lat) * 1000,
            "p95": lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))] * 1000, "errors": errors[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level (and notes for predict)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-serve"))
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    ck_dir, notes = build(args.work_dir, args.requests)
    bodies = [json.dumps({"notes": [{"id": f"n{i}", "text": t}]}).encode() for i, t in enumerate(notes)]

    def predict(name: str) -> None:
        subprocess.run([sys.executable, "-m", "clinicode", "predict", "--checkpoint", str(ck_dir), "--input",
                        str(args.work_dir / name), "--output", str(args.work_dir / "out.jsonl"), "--no-progress",
                        "--device", "cpu"], check=True, capture_output=True)

    t_one = median_time(lambda: predict("one.jsonl"), repeat=args.repeat, warmup=1)
    t_all = median_time(lambda: predict("notes.jsonl"), repeat=args.repeat, warmup=0)
    n = len(notes)
    batch_incl, batch_excl = n / t_all, n / max(1e-9, t_all - t_one)
    from clinicode.predict import Predictor

    pred = Predictor.from_checkpoint(ck_dir, device="cpu")
    t_lib = median_time(functools.partial(pred.predict, notes, attention=False), repeat=args.repeat, warmup=1)
    del pred

    proc, port, t_start = start_server(ck_dir, args.work_dir)
    try:
        load(port, bodies[:16], 4, 4)  # warm-up
        rows = {}
        for clients in LEVELS:
            per = max(1, args.requests // clients)
            runs = [load(port, bodies, clients, per) for _ in range(args.repeat)]
            rows[clients] = {k: statistics.median(r[k] for r in runs) for k in ("rate", "p50", "p95")}
            rows[clients].update(n=runs[0]["n"], errors=sum(r["errors"] for r in runs))
    finally:
        proc.terminate()
        proc.wait(30)

    lines = ["## serve under load (`benchmarks/bench_serve.py`)", "",
             f"{n:,} synthetic notes of 2,500 tokens; checkpoint with 50 codes, 100-d, r = 10 (random weights); CPU. "
             "Each client sends one note per request and waits for the answer (keep-alive HTTP/1.1, the clients are "
             "threads of the benchmark process on the same machine); default options (top_k 10, no evidence), "
             f"micro-batches of up to 32 notes, 5 ms wait. Medians of {args.repeat} runs per row; errors summed. "
             f"Server start-up to a ready /ready: {t_start:.1f} s. Ratio = throughput relative to batch "
             "`clinicode predict` on the same notes (start-up excluded) in the same run. Goal: "
             "8 clients x 25 requests, "
             "0 errors, >= 0.8x. The start-up-excluded figure is the difference of two "
             "whole-process times, so it carries "
             "the noise of both. **The machine was shared and noisy** (other jobs ran on its 2 cores): "
             "read the ratios rather than the absolute numbers.", "",
             "| path | requests | notes/s | p50 ms | p95 ms | errors | ratio |", "|---|---|---|---|---|---|---|",
             f"| `clinicode predict`, whole process, start-up included | {n} | {batch_incl:,.0f} | | | 0 | "
             f"{batch_incl / batch_excl:.2f}x |",
             f"| `clinicode predict`, start-up excluded ({t_one:.1f} s for one note subtracted) "
             f"| {n} | {batch_excl:,.0f} "
             "| | | 0 | 1.00x |",
             "| `Predictor.predict` in one process (no start-up, no files; a steadier reference) "
             f"| {n} | {n / t_lib:,.0f} "
             f"| | | 0 | {n / t_lib / batch_excl:.2f}x |"]
    for clients, r in rows.items():
        lines.append(f"| `clinicode serve`, {clients} client{'s' if clients > 1 else ''} x "
                     f"{r['n'] // clients} requests | "
                     f"{r['n']} | {r['rate']:,.0f} | {r['p50']:.0f} | {r['p95']:.0f} | {r['errors']} | "
                     f"{r['rate'] / batch_excl:.2f}x |")
    lines += ["", machine_line()]
    publish("serve", lines, write=not args.no_write)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    main()
