"""End to end: `streamlit run` on a loopback port, driven by Debian Chromium through Playwright (ECOSYSTEM.md §2c)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-dev-shm-usage", "--disable-sync"]

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium"),
]
sync_api = pytest.importorskip("playwright.sync_api")

NOTE = (
    "Discharge summary. <script>window.__pwned=1</script>\n"
    "History of hypertension and congestive heart failure; atrial fibrillation on coumadin.\n"
    "Admitted with acute kidney failure and pneumonia."
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url(tiny_run, tmp_path_factory):
    runs = tmp_path_factory.mktemp("e2e_runs")
    shutil.copytree(tiny_run, runs / "tiny", ignore=shutil.ignore_patterns("state"))
    port = _free_port()
    env = {**os.environ, "CLINICODE_RUNS": str(runs)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app_streamlit/main.py", "--server.headless=true",
         "--server.address=127.0.0.1", f"--server.port={port}", "--browser.gatherUsageStats=false",
         "--server.fileWatcherType=none"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not become healthy (exit code {proc.poll()})")
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield b
        finally:
            b.close()


def test_code_a_pasted_note_in_a_real_browser(app_url, browser, tmp_path):
    expect = sync_api.expect
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(app_url)
    page.get_by_label("Clinical note").fill(NOTE)
    page.get_by_role("button", name="Predict codes").click()
    hl = page.locator("#note-hl")
    expect(hl.locator("mark.attn").first).to_be_visible(timeout=90_000)
    assert hl.locator("mark.attn").count() > 5
    expect(page.get_by_text("predicted code", exact=False).first).to_be_visible()
    expect(page.locator('[data-testid="stDataFrame"]').first).to_be_visible()
    # the note's <script> is text, never code
    expect(hl).to_contain_text("<script>window.__pwned=1</script>")
    assert page.evaluate("() => typeof window.__pwned") == "undefined"
    assert hl.locator("script").count() == 0
    page.screenshot(path=str(tmp_path / "code_note.png"), full_page=True)
    assert (tmp_path / "code_note.png").stat().st_size > 10_000
    page.close()


@pytest.mark.parametrize("path,marker", [("performance", "Per code"), ("embeddings", "Cosine similarity"),
                                         ("batch", "Upload a file"), ("about_model", "Training settings")])
def test_other_pages_render_in_a_real_browser(app_url, browser, path, marker):
    expect = sync_api.expect
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.goto(f"{app_url}/{path}")
    expect(page.get_by_text(marker).first).to_be_visible(timeout=90_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()
