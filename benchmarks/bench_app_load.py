"""Load test of the Streamlit app: N concurrent browser sessions coding notes for D seconds.

Starts `streamlit run app_streamlit/main.py` on a free 127.0.0.1 port with CLINICODE_RUNS pointing at a runs
folder, then drives one headless Debian chromium (Playwright, async API) with N browser contexts. Each session
pastes a synthetic note and presses "Predict codes" again and again; the latency is click -> the codes table
and the highlighted note of *that* click are on the page (each click's note carries a unique marker word, and
the highlighted note is drawn after the table in the same script run). Any Streamlit exception element, or a
click that times out, counts as an error; the script exits 1 if there is any.

    python benchmarks/bench_app_load.py [--runs DIR] [--sessions 10] [--duration 60] [--no-write]

Without --runs, a small demo run on synthetic data is built under /tmp/clinicode-bench-app/runs (once).
Only loopback traffic: the server binds 127.0.0.1 and chromium runs with background networking off.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, machine_line, write_section

sys.path.insert(0, str(ROOT / "app_streamlit"))
from app_server import CHROMIUM, CHROMIUM_ARGS as ARGS, serve

DEFAULT_RUNS = Path("/tmp/clinicode-bench-app/runs")
CLICK_TIMEOUT_MS = 60_000

NOTE = (
    "Discharge summary (synthetic). Admission date and service: medicine. History of present illness: elderly patient "
    "with a history of hypertension, congestive heart failure and atrial fibrillation on coumadin, admitted with "
    "shortness of breath and leg swelling. Found to have acute kidney failure and a urinary tract infection. "
    "Hospital course: diuresed with furosemide, rate controlled with metoprolol, antibiotics for the infection. "
    "Creatinine improved. Discharge diagnoses: acute on chronic systolic heart failure, atrial fibrillation, "
    "hypertension, acute kidney injury, hyperlipidemia, anemia. Discharged home in stable condition with follow up. "
)


def build_demo_run(runs: Path) -> None:
    """A small LEAM run on synthetic MIMIC-shaped data (about a minute on two cores)."""
    if (runs / "demo" / "checkpoint" / "manifest.json").is_file():
        return
    from clinicode.config import TrainConfig
    from clinicode.data.prepare import prepare_mimic
    from clinicode.synthetic.mimic3 import write_demo_mimic
    from clinicode.train import train

    base = runs.parent
    print(f"building a demo run under {runs} (synthetic data) ...", flush=True)
    write_demo_mimic(base / "mimic", n_admissions=600, seed=0)
    prepare_mimic(base / "mimic", base / "data")
    cfg = TrainConfig(epochs=5, batch_size=16, lr=2e-2, w2v_epochs=2, patience=3, seed=7, device="cpu")
    train(out_dir=runs / "demo", config=cfg, data_dir=base / "data",
          model_options=dict(embed_dim=32, radius=3, hidden_dim=64, dropout=0.2), progress=False)


async def one_click(page, marker: str) -> float:
    """Paste a note carrying `marker`, press Predict, wait for this click's table and highlight; seconds."""
    await page.get_by_label("Clinical note").fill(f"{NOTE} Marker {marker}.")
    t0 = time.perf_counter()
    await page.get_by_role("button", name="Predict codes").click()
    await page.locator("#note-hl", has_text=marker).wait_for(state="visible", timeout=CLICK_TIMEOUT_MS)
    await page.locator('[data-testid="stDataFrame"]').first.wait_for(state="visible", timeout=CLICK_TIMEOUT_MS)
    return time.perf_counter() - t0


async def session(browser, url: str, sid: int, stop_at: float, lat: list[float], errors: list[str],
                  max_clicks: int | None = None) -> int:
    ctx = await browser.new_context(viewport={"width": 1300, "height": 1000})
    page = await ctx.new_page()
    clicks = 0
    try:
        await page.goto(url, timeout=CLICK_TIMEOUT_MS)
        await page.get_by_label("Clinical note").wait_for(timeout=CLICK_TIMEOUT_MS)
        while time.monotonic() < stop_at and (max_clicks is None or clicks < max_clicks):
            marker = f"zqs{sid}i{clicks}x"
            try:
                lat.append(await one_click(page, marker))
            except Exception as err:  # a timeout or a page error: count it and go on
                errors.append(f"session {sid} click {clicks}: {type(err).__name__}")
            clicks += 1
            n_exc = await page.locator('[data-testid="stException"]').count()
            if n_exc:
                errors.append(f"session {sid} click {clicks}: {n_exc} exception element(s) on the page")
                await page.reload()
                await page.get_by_label("Clinical note").wait_for(timeout=CLICK_TIMEOUT_MS)
    finally:
        await ctx.close()
    return clicks


async def drive(url: str, n_sessions: int, duration: float) -> dict:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            # warm-up (not measured): the first prediction loads the model into the server process
            warm: list[float] = []
            warm_errors: list[str] = []
            await session(browser, url, 99, time.monotonic() + 600, warm, warm_errors, max_clicks=1)
            if warm_errors or not warm:
                raise SystemExit(f"error: the warm-up click failed ({warm_errors}); is the run folder valid?")
            lat: list[float] = []
            errors: list[str] = []
            t0 = time.monotonic()
            clicks = await asyncio.gather(*(session(browser, url, i, t0 + duration, lat,
                                                    errors) for i in range(n_sessions)))
            wall = time.monotonic() - t0
        finally:
            await browser.close()
    return {"latencies": lat, "errors": errors, "clicks": sum(clicks), "wall": wall, "warmup": warm[0]}


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = max(0, min(len(xs) - 1, int(round(q / 100 * len(xs) + 0.5)) - 1))  # nearest rank
    return xs[i]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, default=None,
                    help="runs folder holding a trained run (default: build a demo run)")
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"error: {CHROMIUM} not found; install Debian's chromium (apt-get install chromium).", file=sys.stderr)
        return 1
    runs = args.runs
    if runs is None:
        runs = DEFAULT_RUNS
        build_demo_run(runs)
    runs = runs.resolve()
    try:
        with serve(runs) as url:
            res = asyncio.run(drive(url, args.sessions, args.duration))
    except RuntimeError as err:
        raise SystemExit(f"error: {err}") from None
    lat = res["latencies"]
    n, errs = len(lat), res["errors"]
    p50, p95, mx = percentile(lat, 50), percentile(lat, 95), max(lat, default=float("nan"))
    print(f"{args.sessions} sessions x {res['wall']:.0f} s: {n} predictions ({n / res['wall']:.2f}/s), "
          f"p50 {p50:.2f} s, p95 {p95:.2f} s, max {mx:.2f} s, mean "
          f"{statistics.fmean(lat) if lat else float('nan'):.2f} s; "
          f"{len(errs)} errors; warm-up (model load + first prediction) {res['warmup']:.1f} s")
    for e in errs[:20]:
        print("  " + e)
    if not args.no_write:
        import streamlit

        body = "\n".join([
            "## app under load (`benchmarks/bench_app_load.py`)",
            "",
            f"`streamlit run` on 127.0.0.1, one headless chromium with {args.sessions} browser contexts (Playwright), "
            f"{args.duration:.0f} s. Each session pastes a ~{len(NOTE) // 100 * 100}-character "
            "synthetic note and presses "
            "*Predict codes* repeatedly; latency is click → that click's codes table and highlighted note on the page. "
            "Browser, server and model share the machine. Errors: Streamlit exception elements or clicks over "
            f"{CLICK_TIMEOUT_MS // 1000} s.",
            "",
            "| sessions | duration | predictions | per second | p50 | p95 | max | errors |",
            "|---|---|---|---|---|---|---|---|",
            f"| {args.sessions} | {res['wall']:.0f} s | {n:,} | {n / res['wall']:.2f} | {p50:.2f} s | {p95:.2f} s | "
            f"{mx:.2f} s | {len(errs)} |",
            "",
            f"Run: `{Path(runs).name}/` "
            f"({'demo run on synthetic data' if args.runs is None else 'given with --runs'}); "
            f"warm-up (model load + first prediction, not counted) {res['warmup']:.1f} s.",
            f"{machine_line()} streamlit {streamlit.__version__}, {os.cpu_count()} CPUs.",
        ])
        write_section("app-load", body)
        print("wrote the app-load section of BENCHMARKS.md")
    return 1 if errs or not lat else 0


if __name__ == "__main__":
    raise SystemExit(main())
