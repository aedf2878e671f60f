"""End to end: `streamlit run` on a loopback port, driven by Debian Chromium through Playwright (ECOSYSTEM.md §2c)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "app_streamlit"))
from app_server import CHROMIUM_ARGS as ARGS, serve  # noqa: E402

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


@pytest.fixture(scope="module")
def app_url(tiny_run, tmp_path_factory):
    runs = tmp_path_factory.mktemp("e2e_runs")
    shutil.copytree(tiny_run, runs / "tiny", ignore=shutil.ignore_patterns("state"))
    try:
        with serve(runs) as url:
            yield url
    except RuntimeError as err:
        pytest.fail(str(err))


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
