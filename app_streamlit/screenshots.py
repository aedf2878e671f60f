"""Take the README screenshots: start the app on a runs folder, drive each page in Chromium, save one PNG per page.

`python app_streamlit/screenshots.py --runs runs --out docs/screenshots`; what it needs: docs/app.md."""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
MAX_PNG_BYTES = 400_000

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_server import CHROMIUM_ARGS as ARGS, serve  # noqa: E402


def pick_test_note(run: Path) -> str | None:
    """A test note worth showing: several gold codes, mostly found at the tuned threshold, one miss or false alarm."""
    import json

    from clinicode.serving import CHECKPOINT_DIR, SCORES_TEST_FILE, THRESHOLD_FILE, binarize

    npz = run / SCORES_TEST_FILE
    if not npz.is_file():
        return None
    z = np.load(npz, allow_pickle=False)
    t = json.loads((run / CHECKPOINT_DIR / THRESHOLD_FILE).read_text())["threshold"]
    y, p = z["y_true"] > 0, binarize(z["scores"], t)
    tp, fp, fn = (y & p).sum(1), (~y & p).sum(1), (y & ~p).sum(1)
    score = tp * 2 - fp - fn * 0.5 + ((fp + fn) > 0) * 1.0 - (y.sum(1) > 6) * 5
    return str(z["ids"][int(np.argmax(score))])


def _settle(page, extra_ms: int = 1200) -> None:
    page.wait_for_timeout(400)
    try:
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=120_000)
    except Exception:  # the widget may never have appeared
        pass
    page.wait_for_timeout(extra_ms)


def _save(page, path: Path, *, full_page: bool = True) -> None:
    """Screenshot; re-encode as a palette PNG when over MAX_PNG_BYTES (Pillow ships with Streamlit).

    Streamlit scrolls inside its main container, not the document, so a "full page" grows the viewport to
    the container's height first.
    """
    size = page.viewport_size
    if full_page:
        h = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]')?.scrollHeight || 0")
        page.set_viewport_size({"width": size["width"], "height": int(min(max(h, size["height"]), 4200))})
        _settle(page, 1500)
    png = page.screenshot()
    page.set_viewport_size(size)
    if len(png) > MAX_PNG_BYTES:
        from PIL import Image

        img = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT)
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=True)
        png = buf.getvalue()
    path.write_bytes(png)
    print(f"{path}  {len(png) / 1000:.0f} KB")


def _batch_csv(run: Path) -> bytes:
    import json

    from clinicode.serving import CHECKPOINT_DIR, MANIFEST_FILE, read_split_codes, read_split_texts, test_data_dir

    data = test_data_dir(run, json.loads((run / CHECKPOINT_DIR / MANIFEST_FILE).read_text()))
    ids = read_split_codes(data, "test")["id"].head(24).tolist()
    df = pd.DataFrame({"id": ids, "text": read_split_texts(data, "test", ids)})
    df = pd.concat([df.iloc[:2], pd.DataFrame([{"id": "empty-note", "text": ""}]), df.iloc[2:]], ignore_index=True)
    return df.to_csv(index=False).encode()


def take(runs: Path, run_name: str, out: Path) -> None:
    """One PNG per page into `out` (code_note, performance, embeddings, batch, model_card)."""
    from playwright.sync_api import expect, sync_playwright

    run = runs / run_name
    out.mkdir(parents=True, exist_ok=True)
    note_id = pick_test_note(run)
    with serve(runs) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1250}, device_scale_factor=1)
            page.goto(url)
            _settle(page)
            page.get_by_text("Test split note").click()
            _settle(page)
            if note_id is not None:
                page.locator('[data-testid="stSelectbox"]').filter(has_text="Test note").click()
                page.keyboard.type(note_id)
                page.keyboard.press("Enter")
                _settle(page)
            page.get_by_role("button", name="Predict codes").click()
            expect(page.locator("#note-hl mark").first).to_be_visible(timeout=120_000)
            _settle(page, 1500)
            _save(page, out / "code_note.png", full_page=False)

            for path, name, wait_for in (("performance", "performance", 3), ("embeddings", "embeddings", 2),
                                         ("about_model", "model_card", 1)):
                page.goto(f"{url}/{path}")
                expect(page.locator('[data-testid="stVegaLiteChart"]').nth(wait_for - 1)).to_be_visible(timeout=180_000)
                _settle(page, 2500)
                _save(page, out / f"{name}.png")

            page.goto(f"{url}/batch")
            _settle(page)
            page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(
                files=[{"name": "notes.csv", "mimeType": "text/csv", "buffer": _batch_csv(run)}]
            )
            expect(page.get_by_text("Download CSV")).to_be_visible(timeout=120_000)
            _settle(page, 1500)
            _save(page, out / "batch.png", full_page=False)
        finally:
            browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=Path(os.environ.get("CLINICODE_RUNS", "runs")))
    ap.add_argument("--run", default=None, help="run folder name under --runs (default: the first)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    a = ap.parse_args()
    from clinicode.serving import CHECKPOINT_DIR, MANIFEST_FILE

    names = sorted(d.name for d in a.runs.iterdir() if (d / CHECKPOINT_DIR / MANIFEST_FILE).is_file())
    if not names:
        sys.exit(f"no run under {a.runs}; train one first (make demo-train)")
    take(a.runs, a.run or names[0], a.out)


if __name__ == "__main__":
    main()
