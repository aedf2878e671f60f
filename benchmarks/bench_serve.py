"""`clinicode serve` under load: throughput and p50/p95 latency at 1, 8 and 32 concurrent clients, each sending one
2,500-token note per request, beside whole-process `clinicode predict` on the same notes in the same run; then 8
clients sending 8 notes per request; then, on a shared machine, the ratio measured in one interleaved run (batch
predict and the 8-client load alternated, so both meet the same load), with both HTTP stacks side by side.

    python benchmarks/bench_serve.py [--requests 200] [--repeat 3] [--interleave 3] [--notes-per-request 8]
                                     [--work-dir /tmp/clinicode-bench-serve]

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


def start_server(ck_dir: Path, work: Path, stack: str = "auto") -> tuple[subprocess.Popen, int, float]:
    port = free_port()
    t0 = time.perf_counter()
    log = open(work / f"server-{stack}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "clinicode", "serve", "--checkpoint", str(ck_dir), "--port",
                             str(port), "--http", stack,
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


def load(port: int, bodies: list[bytes], clients: int, per_client: int, notes_per: int = 1) -> dict[str, float]:
    """`clients` threads, each sending `per_client` requests (of `notes_per` notes) in turn; wall time, notes per
    second, request latencies, errors."""
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
    return {"n": len(lat), "wall": wall, "rate": len(lat) * notes_per / wall, "p50": statistics.median(lat) * 1000,
            "p95": lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))] * 1000, "errors": errors[0]}


def _arguments() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level (and notes for predict)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-serve"))
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ap.add_argument("--interleave", type=int, default=3, help="rounds of the interleaved run (0: none)")
    ap.add_argument("--notes-per-request", type=int, default=8, help="notes per request of the multi-note row")
    return ap.parse_args()


def _batch_predict(ck_dir: Path, work: Path, name: str) -> None:
    """Whole-process `clinicode predict` on the notes file WORK/NAME, with the server's options."""
    subprocess.run([sys.executable, "-m", "clinicode", "predict", "--checkpoint", str(ck_dir), "--input",
                    str(work / name), "--output", str(work / "out.jsonl"), "--no-progress",
                    "--device", "cpu"], check=True, capture_output=True)


def _loads(args: argparse.Namespace, ck_dir: Path, bodies: list[bytes], multi: list[bytes],
           k: int) -> tuple[dict[int, dict], dict, float]:
    """One server (the default HTTP parser): each level of LEVELS clients, then 8 clients sending K notes a request;
    medians over --repeat runs, errors summed; and the server's start-up time."""
    proc, port, t_start = start_server(ck_dir, args.work_dir)
    try:
        load(port, bodies[:16], 4, 4)  # warm-up
        rows = {}
        for clients in LEVELS:
            per = max(1, args.requests // clients)
            runs = [load(port, bodies, clients, per) for _ in range(args.repeat)]
            rows[clients] = {k: statistics.median(r[k] for r in runs) for k in ("rate", "p50", "p95")}
            rows[clients].update(n=runs[0]["n"], errors=sum(r["errors"] for r in runs))
        per = max(1, len(multi) // 8)
        runs = [load(port, multi, 8, per, k) for _ in range(args.repeat)]
        multi_row = {key: statistics.median(r[key] for r in runs) for key in ("rate", "p50", "p95")}
        multi_row.update(n=runs[0]["n"], errors=sum(r["errors"] for r in runs))
    finally:
        proc.terminate()
        proc.wait(30)
    return rows, multi_row, t_start


def _section(args: argparse.Namespace, k: int, batch: dict, rows: dict[int, dict], multi_row: dict,
             interleaved: list) -> list[str]:
    """The section of BENCHMARKS.md: the batch references, each load's row, the interleaved run, the machine."""
    n, t_one, batch_incl, batch_excl, t_lib = batch["n"], batch["t_one"], batch["incl"], batch["excl"], batch["t_lib"]
    lines = ["## serve under load (`benchmarks/bench_serve.py`)", "",
             f"{n:,} synthetic notes of 2,500 tokens; checkpoint with 50 codes, 100-d, r = 10 (random weights); CPU. "
             "Each client sends one note per request and waits for the answer (keep-alive HTTP/1.1, the clients are "
             "threads of the benchmark process on the same machine; the last row: 8 notes per request); default "
             "options (top_k 10, no evidence), server on its default HTTP parser (httptools), "
             f"micro-batches of up to 32 notes, 5 ms wait. Medians of {args.repeat} runs per row; errors summed. "
             f"Server start-up to a ready /ready: {batch['t_start']:.1f} s. Ratio = throughput relative to batch "
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
    lines.append(f"| `clinicode serve`, 8 clients x {multi_row['n'] // 8} requests of {k} notes | "
                 f"{multi_row['n']} | {multi_row['rate']:,.0f} | {multi_row['p50']:.0f} | {multi_row['p95']:.0f} | "
                 f"{multi_row['errors']} | {multi_row['rate'] / batch_excl:.2f}x |")
    if interleaved:
        lines += _interleaved_lines(args, k, interleaved)
    return lines + ["", machine_line()]


def _interleaved_lines(args: argparse.Namespace, k: int, interleaved: list) -> list[str]:
    """The interleaved run's table: per server, each ratio's median over the rounds and each round's in brackets."""
    lines = ["", f"**One interleaved run** ({args.interleave} rounds; each round runs whole-process `clinicode "
             "predict` on the one-note and the 200-note files, then the 8-client loads against each server, so "
             "all meet the same load). Throughput ratio: serve notes/s over that round's batch predict, "
             "start-up excluded (rounds where the subtraction was not positive left out). CPU ratio: batch "
             "predict's CPU a note (start-up excluded) over the server process's CPU a note, which other jobs "
             "disturb less than wall time. Medians over the rounds, each round's in brackets:", "",
             "| server | 8 clients x 1 note: ratio | CPU ratio | p95 ms | 8 clients x "
             f"{k} notes: ratio | CPU ratio | p95 ms |", "|---|---|---|---|---|---|---|"]

    def each(xs: list[float]) -> str:
        return ", ".join(f"{x:.2f}" for x in xs)

    for name, r in interleaved:
        lines.append(f"| {name} | {r['one']:.2f}x ({each(r['ones'])}) | {r['cpu1']:.2f}x ({each(r['cpu1s'])}) | "
                     f"{r['one_p95']:.0f} | {r['multi']:.2f}x ({each(r['multis'])}) | "
                     f"{r['cpuk']:.2f}x ({each(r['cpuks'])}) | {r['multi_p95']:.0f} |")
    return lines


def main() -> None:
    args = _arguments()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    ck_dir, notes = build(args.work_dir, args.requests)
    bodies = [json.dumps({"notes": [{"id": f"n{i}", "text": t}]}).encode() for i, t in enumerate(notes)]
    k = args.notes_per_request
    multi = [json.dumps({"notes": [{"id": f"n{i + j}", "text": notes[(i + j) % len(notes)]}
                                   for j in range(k)]}).encode() for i in range(0, len(notes), k)]
    predict = functools.partial(_batch_predict, ck_dir, args.work_dir)

    t_one = median_time(lambda: predict("one.jsonl"), repeat=args.repeat, warmup=1)
    t_all = median_time(lambda: predict("notes.jsonl"), repeat=args.repeat, warmup=0)
    n = len(notes)
    batch_incl, batch_excl = n / t_all, n / max(1e-9, t_all - t_one)
    from clinicode.predict import Predictor

    pred = Predictor.from_checkpoint(ck_dir, device="cpu")
    t_lib = median_time(functools.partial(pred.predict, notes, attention=False), repeat=args.repeat, warmup=1)
    del pred

    rows, multi_row, t_start = _loads(args, ck_dir, bodies, multi, k)
    interleaved = interleave(args, ck_dir, bodies, multi, predict, n) if args.interleave else []
    batch = {"n": n, "t_one": t_one, "incl": batch_incl, "excl": batch_excl, "t_lib": t_lib, "t_start": t_start}
    publish("serve", _section(args, k, batch, rows, multi_row, interleaved), write=not args.no_write)


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) process PID has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def interleave(args: argparse.Namespace, ck_dir: Path, bodies: list[bytes], multi: list[bytes], predict, n: int):
    """Rounds of: batch predict (one-note file, then all notes), then the 8-client loads (one note, then
    --notes-per-request notes a request) against a server of each HTTP parser. Per round: the throughput ratio (a
    round whose start-up-excluded predict time is not positive is left out) and the CPU ratio (batch predict's CPU a
    note, start-up excluded, over the server process's CPU a note), which a loaded machine disturbs less."""
    k = args.notes_per_request
    servers = [("h11 (`--http h11`, before)", *start_server(ck_dir, args.work_dir, "h11")[:2]),
               ("httptools (`--http auto`, the default)", *start_server(ck_dir, args.work_dir, "auto")[:2])]
    keys = ("ones", "multis", "p95", "mp95", "cpu1", "cpuk")
    out: dict[str, dict[str, list[float]]] = {name: {key: [] for key in keys} for name, _, _ in servers}
    try:
        for _, _, port in servers:
            load(port, bodies[:16], 4, 4)  # warm-up
        for _ in range(args.interleave):
            c0, t0 = _children_cpu(), time.perf_counter()
            predict("one.jsonl")
            c1, t1 = _children_cpu(), time.perf_counter()
            predict("notes.jsonl")
            c2, t2 = _children_cpu(), time.perf_counter()
            wall = (t2 - t1) - (t1 - t0)
            batch = n / wall if wall > 0 else None
            batch_cpu = ((c2 - c1) - (c1 - c0)) / n
            for name, proc, port in servers:
                r = out[name]
                for rows, per, notes_per, rate, p95, cpu in ((bodies, len(bodies) // 8, 1, "ones", "p95", "cpu1"),
                                                             (multi, len(multi) // 8, k, "multis", "mp95", "cpuk")):
                    before = _cpu(proc.pid)
                    got = load(port, rows, 8, max(1, per), notes_per)
                    used = (_cpu(proc.pid) - before) / (got["n"] * notes_per)
                    if batch is not None:
                        r[rate].append(got["rate"] / batch)
                    r[p95].append(got["p95"])
                    r[cpu].append(batch_cpu / used if used > 0 else float("nan"))
    finally:
        for _, proc, _ in servers:
            proc.terminate()
            proc.wait(30)

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    return [(name, {"one": med(r["ones"]), "ones": r["ones"], "one_p95": med(r["p95"]), "cpu1": med(r["cpu1"]),
                    "cpu1s": r["cpu1"], "multi": med(r["multis"]), "multis": r["multis"], "multi_p95": med(r["mp95"]),
                    "cpuk": med(r["cpuk"]), "cpuks": r["cpuk"]}) for name, r in out.items()]

if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    main()
