"""App responsiveness with a MIMIC-sized checkpoint: first page ready, and one 2,500-token note coded.

    python benchmarks/bench_app.py [--repeat 3] [--notes 20]

Goals (issue): the first page is ready within 5 s, and a 2,500-token note is coded within 300 ms, on a 2-core CPU.
- first page: from starting `streamlit run` to the "Code a note" page showing its predict button in Chromium
  (server start, Python imports, page render), median of --repeat fresh servers;
- coding: the exact call the app's "Code a note" page makes (`Predictor.predict(..., top_k=None, threshold=0,
  explain=5)`: every code's score plus evidence), median and p95 over --notes different notes, with the
  straightforward PyTorch forward pass on the same notes beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import machine_line, publish  # noqa: E402
from benchmarks.bench_predict import build  # noqa: E402

sys.path.insert(0, str(ROOT / "app_streamlit"))
from app_server import CHROMIUM, CHROMIUM_ARGS, serve  # noqa: E402


def first_page_seconds(runs: Path) -> float:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        try:
            t0 = time.perf_counter()
            with serve(runs) as url:
                page.goto(url)
                page.get_by_role("button", name="Predict codes").wait_for(timeout=60_000)
                return time.perf_counter() - t0
        finally:
            browser.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--notes", type=int, default=20)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/clinicode-bench-predict"))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    ck_dir, notes, _ = build(args.work_dir, max(args.notes, 50))
    notes = notes[: args.notes]

    import torch

    from clinicode.batching import pad_batch
    from clinicode.predict import Predictor

    t0 = time.perf_counter()
    pred = Predictor.from_checkpoint(ck_dir, device="cpu")
    load_s = time.perf_counter() - t0
    pred.predict(notes[:1], top_k=None, threshold=0.0, explain=5)  # warm-up
    lat = []
    for n in notes:
        t = time.perf_counter()
        pred.predict([n], top_k=None, threshold=0.0, explain=5)
        lat.append(time.perf_counter() - t)
    ck = pred.checkpoint
    from clinicode.models.leam.model import LEAM

    plain = LEAM(ck.model.config, fast=False)  # the model's plain PyTorch path: the reference
    plain.load_state_dict(ck.model.state_dict())
    plain.eval()
    naive = []
    with torch.inference_mode():
        for n in notes:
            t = time.perf_counter()
            enc = ck.tokenizer.encode([n], offsets=True)[0]
            ids, mask = pad_batch([enc.ids])
            plain(ids, mask, return_attention=True)
            naive.append(time.perf_counter() - t)
    lat.sort()
    p95 = lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))]
    runs = args.work_dir
    pages = [first_page_seconds(runs) for _ in range(args.repeat)]
    lines = ["## app responsiveness (`benchmarks/bench_app.py`)", "",
             f"MIMIC-sized checkpoint ({ck.tokenizer.vocab_size:,} words, 100-d, 50 codes, r = 10), synthetic notes of "
             f"2,500 tokens, CPU. Goals: first page <= 5 s; one note coded <= 300 ms.", "",
             "| measure | median | p95 / max | goal |", "|---|---|---|---|",
             f"| first page ready (server start to page in Chromium; {args.repeat} fresh servers) | "
             f"{statistics.median(pages):.2f} s | "
             f"{max(pages):.2f} s | <= 5 s |",
             f"| code one 2,500-token note as the app does (all scores + evidence; {len(lat)} notes) | "
             f"{1000 * statistics.median(lat):.0f} ms | {1000 * p95:.0f} ms | <= 300 ms |",
             f"| same note, straightforward PyTorch forward with attention (no table, no evidence) | "
             f"{1000 * statistics.median(naive):.0f} ms | {1000 * max(naive):.0f} ms | (reference) |",
             f"| checkpoint load (hash check, word-code table), once per app process | {load_s:.2f} s | | |",
             "", machine_line()]
    publish("app", lines, write=not args.no_write)


if __name__ == "__main__":
    main()
