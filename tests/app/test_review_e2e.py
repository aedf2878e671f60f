"""End to end: the Review page in Debian Chromium (Playwright): open a note, accept, reject, add a code, finish."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "app_streamlit"))
from clinicode import review  # noqa: E402

from app_server import CHROMIUM_ARGS as ARGS, serve  # noqa: E402

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium"),
]
sync_api = pytest.importorskip("playwright.sync_api")

NOTE = ("Discharge summary. <script>window.__pwned=1</script>\n"
        "History of hypertension and congestive heart failure; atrial fibrillation on coumadin.\n"
        "Admitted with acute kidney failure and pneumonia.")
SHOTS = Path(os.environ.get("CLINICODE_SCREENSHOTS", "")) if os.environ.get("CLINICODE_SCREENSHOTS") else None


@pytest.fixture(scope="module")
def served(tiny_run, tmp_path_factory):
    from clinicode.predict import Predictor

    base = tmp_path_factory.mktemp("review_e2e")
    shutil.copytree(tiny_run, base / "runs" / "tiny", ignore=shutil.ignore_patterns("state"))
    notes = base / "notes.jsonl"
    notes.write_text("".join(json.dumps({"id": f"e{i}", "text": NOTE}) + "\n" for i in range(2)))
    db = base / "review.sqlite"
    with review.open_db(db) as rdb:
        review.queue(rdb, Predictor.from_checkpoint(tiny_run, device="cpu"), notes)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(review.DB_ENV, str(db))
        try:
            with serve(base / "runs") as url:
                yield url, db
        except RuntimeError as err:
            pytest.fail(str(err))


def test_review_a_note_in_a_real_browser(served, tmp_path):
    expect = sync_api.expect
    url, db = served
    with review.open_db(db) as rdb:
        first = rdb.next_notes(1, reviewer="ann")[0]   # what the page's default order offers first
        sugg = [s["code"] for s in rdb.note(first)["suggestions"]]
    assert first == "e0"   # the two notes are alike: a near tie goes to arrival order on every CPU (teach.NOISE)
    assert len(sugg) >= 2
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 2200})
        page.goto(f"{url}/review")
        reviewer = page.get_by_label("Reviewer", exact=True)
        expect(reviewer).to_be_visible(timeout=90_000)
        reviewer.fill("ann")
        reviewer.press("Enter")
        page.get_by_role("button", name="Open note").click()
        # drive the note the page opened, whichever it is, and check it is the one the rule offered
        heading = page.get_by_role("heading", name=re.compile(r"^Note e\d$"))
        expect(heading).to_be_visible(timeout=60_000)
        opened = heading.inner_text().split()[-1]
        assert opened == first
        hl = page.locator("#review-hl")
        expect(hl.locator("mark.evidence").first).to_be_visible(timeout=60_000)
        expect(hl).to_contain_text("<script>window.__pwned=1</script>")
        assert page.evaluate("() => typeof window.__pwned") == "undefined"
        # accept the first suggestion, reject the others (each click reruns the page)
        page.get_by_role("button", name="Accept", exact=True).first.click()
        expect(page.locator("[data-testid=stMarkdownContainer]").get_by_text("accepted", exact=True)
               ).to_have_count(1, timeout=30_000)
        for n in range(1, len(sugg)):
            page.get_by_role("button", name="Reject", exact=True).nth(n).click()
            expect(page.locator("[data-testid=stMarkdownContainer]").get_by_text("rejected", exact=True)
                   ).to_have_count(n, timeout=30_000)
        search = page.get_by_label("Add a code: search codes or titles", exact=True)
        search.fill("kidney failure")
        search.press("Enter")
        add = page.get_by_role("button", name="Add", exact=True)
        expect(add).to_be_enabled(timeout=30_000)
        add.click()
        expect(page.get_by_text("Codes you added")).to_be_visible(timeout=30_000)
        finish = page.get_by_role("button", name="Finish note")
        expect(finish).to_be_enabled(timeout=30_000)  # the rerun after Add has drawn the whole page
        page.wait_for_timeout(500)
        shot = (SHOTS or tmp_path) / "review_page.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        finish.click()
        expect(page.get_by_text(f"Note {opened} finished.")).to_be_visible(timeout=30_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
    with review.open_db(db) as rdb:
        note = rdb.note(opened)
        other = rdb.note("e1" if opened == "e0" else "e0")
        actions = [(r["action"], r["reviewer"]) for r in note["log"]]
        added_title = dict(rdb.model_codes())[note["log"][-2]["code"]]
    assert note["status"] == "done"
    assert other["status"] == "pending" and other["log"] == []   # the other note was left as it was
    assert actions == [("accept", "ann")] + [("reject", "ann")] * (len(sugg) - 1) + [("add", "ann"), ("done", "ann")]
    assert "kidney" in added_title.lower()  # the first match of "kidney failure" was added
