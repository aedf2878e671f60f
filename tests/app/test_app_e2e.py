"""End to end: `streamlit run` on a loopback port, driven by Debian Chromium through Playwright (ECOSYSTEM.md §2c)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "app_streamlit"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
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
    # the default highlight (#43): each predicted code's own evidence, the code named beside its words
    expect(hl.locator("mark.code-ev").first).to_be_visible(timeout=90_000)
    expect(hl.locator("sup.code-tag").first).to_be_visible()
    assert hl.locator("mark.attn").count() == 0
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


# ------------------------------------------------------------------ every chart of every page at 50, 300, 2,000+ codes
from coded_runs import build_coded_run  # noqa: E402  (tests/app is on sys.path below)

SIZES = (50, 300, 2100)
PAGES = (("performance", "One code", 4), ("embeddings", "Cosine similarity", 2), ("about_model", "Training settings",
                                                                                  1),
         ("batch", "Upload a file", 0))  # page, a text it shows, the charts it draws at least
# What a person sees of one Vega chart (SVG): its box, its bars/lines/points as drawn, and its axis text and whether
# each piece lies inside the chart's element (a clipped title or label is outside it).
CHART_JS = """el => {
  const box = el.getBoundingClientRect();
  const seen = n => n.getAttribute('opacity') !== '0' && getComputedStyle(n).opacity !== '0';
  const size = n => { const r = n.getBoundingClientRect(); return [r.width, r.height]; };
  const q = s => [...el.querySelectorAll(s)].filter(seen);
  const text = q('g.role-axis-label text, g.role-axis-title text, g.role-title-text text').map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, title: !t.closest('g.role-axis-label'), at: [r.left, r.top, r.right, r.bottom],
            inside: r.left >= box.left - 4 && r.right <= box.right + 4
                    && r.top >= box.top - 4 && r.bottom <= box.bottom + 4};
  });
  return {canvas: !!el.querySelector('canvas'), w: box.width, h: box.height,
          box: [box.left, box.top, box.right, box.bottom],
          bars: q('g.mark-rect.role-mark path').map(size),
          lines: q('g.mark-line.role-mark path').map(size), points: q('g.mark-symbol.role-mark path').length,
          ylabels: q('g.role-axis-label text').filter(t => (t.closest('g.role-axis').getAttribute('aria-label') || '')
                                                           .startsWith('Y-axis')).map(t => t.textContent),
          text};
}"""


def _looks_right(c: dict, where: str) -> None:
    """A chart a person can read: a real size, marks that are drawn (bars with height, lines with extent), axis
    labels, and no text cut off at the chart's edge."""
    assert c["w"] >= 200 and c["h"] >= 120, (where, c["w"], c["h"])
    if c["canvas"]:  # Vega draws big charts on a canvas: judge the pixels (axes and grid alone ink about 3%)
        assert c["ink"] >= 0.1, (where, "canvas mostly blank", c["ink"], c["colour"])
        return
    bars = [b for b in c["bars"] if b[0] >= 1]
    lines = [ln for ln in c["lines"] if max(ln) >= 50]
    assert bars or lines or c["points"], (where, "nothing drawn")
    assert all(h >= 4 for _, h in bars), (where, "bars flattened", sorted(h for _, h in bars)[:5])
    labels = [t for t in c["text"] if not t["title"]]
    assert len(labels) >= 2, (where, "no axis labels")
    cut = [t["text"] for t in c["text"] if not t["inside"]]
    assert not cut, (where, "text cut off at the chart's edge", cut, c["box"], c["text"])


def _charts(page) -> list[dict]:
    import io

    from PIL import Image

    charts = page.locator('[data-testid="stVegaLiteChart"]')
    out = []
    for i in range(charts.count()):
        if charts.nth(i).is_visible():
            charts.nth(i).scroll_into_view_if_needed()
            c = charts.nth(i).evaluate(CHART_JS)
            if c["canvas"]:
                im = Image.open(io.BytesIO(charts.nth(i).screenshot())).convert("RGB")
                pix = list(getattr(im, "get_flattened_data", im.getdata)())  # getdata is deprecated in Pillow 12.1+
                c["ink"] = sum(p != (255, 255, 255) for p in pix) / len(pix)
                c["colour"] = sum(max(p) - min(p) > 40 for p in pix) / len(pix)
            out.append(c)
    return out


@pytest.fixture(scope="module")
def sized_runs(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("sized")
    return {n: build_coded_run(root, n) for n in SIZES}


@pytest.mark.parametrize("n_codes", SIZES)
def test_every_chart_of_every_page_is_readable_at_this_many_codes(sized_runs, browser, n_codes, tmp_path):
    expect = sync_api.expect
    shots = tmp_path / "shots"
    shots.mkdir()
    with serve(sized_runs[n_codes]) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        seen = 0
        for path, marker, n_charts in PAGES:
            page.goto(f"{url}/{path}")
            expect(page.get_by_text(marker).first).to_be_visible(timeout=120_000)
            page.wait_for_function(
                "n => [...document.querySelectorAll('[data-testid=\"stVegaLiteChart\"]')].filter(e => e.querySelector("
                "'svg.marks, canvas')).length >= n", arg=n_charts, timeout=120_000)
            page.wait_for_timeout(1500)
            assert page.locator('[data-testid="stException"]').count() == 0, path
            charts = _charts(page)
            if path == "performance":
                tabs = page.get_by_role("tab")
                band = charts[1 if n_codes <= 60 else 0]
                bands = page.locator('[data-testid="stVegaLiteChart"]').filter(has=page.locator("svg")).nth(
                    1 if n_codes <= 60 else 0)
                bands.screenshot(path=str(shots / f"{path}-bands.png"))
                # one bar row per frequency band, every band named: the chart is not a collapsed line
                assert len(band["ylabels"]) >= 3 and len(set(band["ylabels"])) == len(band["ylabels"]), band["ylabels"]
                assert len([b for b in band["bars"] if b[1] >= 10]) >= 2 * len(band["ylabels"]) - 1
                tabs.filter(has_text="By ICD chapter").first.click()
                chapter = []
                for _ in range(120):   # a loaded machine draws late: wait for the chart, not for a fixed time
                    page.wait_for_timeout(500)
                    chapter = [c for c in _charts(page) if c not in charts]
                    if chapter:
                        break
                assert chapter, "the chapter chart is not drawn"
                assert len(chapter[0]["ylabels"]) >= 5 and all(b[1] >= 10 for b in chapter[0]["bars"])
                charts += chapter
                if n_codes <= 60:  # one bar per code: 50 codes, 3 charts side by side
                    assert len([b for b in charts[0]["bars"] if b[1] >= 4]) >= n_codes
                assert len(charts) >= 4 + (n_codes <= 60)
            for i, c in enumerate(charts):
                _looks_right(c, f"{path} chart {i} at {n_codes} codes")
            seen += len(charts)
            page.screenshot(path=str(shots / f"{path}.png"))
        assert seen >= 7

        # Code a note: with ICD-10 titles the probability column stays in view (its red bars are drawn on screen)
        page.goto(url)
        page.get_by_label("Clinical note").fill("Abdominal ultrasound and cystoscopy; acute "
                                                "kidney failure, pneumonia. " * 4)
        page.get_by_role("button", name="Predict codes").click()
        expect(page.locator("#note-hl mark").first).to_be_visible(timeout=120_000)
        table = page.locator('[data-testid="stDataFrame"]').first
        table.scroll_into_view_if_needed()
        page.wait_for_timeout(800)
        table.screenshot(path=str(shots / "codes-table.png"))
        box = table.bounding_box()
        assert box["x"] + box["width"] <= 1400
        from PIL import Image

        im = Image.open(shots / "codes-table.png").convert("RGB")
        px = im.load()
        red = [x for x in range(im.width) for y in range(im.height)
               if px[x, y][0] > 170 and px[x, y][1] < 110 and px[x, y][2] < 120]
        assert len(red) >= 30, "no probability bars on screen"
        headers = [h.inner_text() for h in table.locator('[role="columnheader"]').all()]
        assert headers.index("Probability") < headers.index("Description"), headers
        page.close()
