"""The Review page through AppTest: queue, filters, claim, accept / reject / add / finish, two sessions, agreement."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from clinicode import review

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app_streamlit" / "main.py"
PAGE = "app_pages/review.py"
NOTE = "Pt with <b>hypertension</b> & congestive heart failure; acute kidney failure. <script>alert(1)</script>"


@pytest.fixture(scope="module")
def runs_dir(tiny_run, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("review_runs")
    shutil.copytree(tiny_run, root / "tiny", ignore=shutil.ignore_patterns("state"))
    return root


@pytest.fixture
def queued(runs_dir, tmp_path, monkeypatch) -> Path:
    """A review database with three notes scored by the tiny run (at threshold 0 every code would be suggested,
    so the suggestions are the tiny model's own)."""
    from clinicode.predict import Predictor

    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"id": f"r{i}", "text": NOTE + f" Visit {i}."}) + "\n" for i in range(3)))
    db = tmp_path / "review.sqlite"
    with review.open_db(db) as rdb:
        counts = review.queue(rdb, Predictor.from_checkpoint(runs_dir / "tiny", device="cpu"), notes)
    assert counts == {"queued": 3, "already": 0, "errors": 0}
    monkeypatch.setenv("CLINICODE_RUNS", str(runs_dir))
    monkeypatch.setenv(review.DB_ENV, str(db))
    return db


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _page(name: str | None = "ann") -> AppTest:
    at = _ok(AppTest.from_file(str(APP), default_timeout=90).run())
    _ok(at.switch_page(PAGE).run())
    if name:
        _ok(at.text_input(key="review_reviewer").input(name).run())
    return at


def test_accept_reject_add_and_finish_a_note(queued):
    at = _page()
    assert [m.value for m in at.metric][:3] == ["3", "0", "0"]  # pending, in progress, done
    _ok(at.selectbox(key="review_pick").set_value("r0").run())
    _ok(at.button(key="review_open_btn").click().run())
    (hl,) = [h.value for h in at.html if 'id="review-hl"' in h.value]
    assert '<mark class="evidence"' in hl and "<script" not in hl and "<b>" not in hl
    text_only = re.sub(r"<mark[^>]*>|</mark>", "", hl)  # the note between the marks is intact, and escaped
    assert "&lt;b&gt;hypertension&lt;/b&gt; &amp; congestive" in text_only and "&lt;script&gt;alert(1)" in text_only
    with review.open_db(queued) as rdb:
        sugg = [s["code"] for s in rdb.note("r0")["suggestions"]]
        assert rdb.note("r0")["claimed_by"] == "ann"
    assert len(sugg) >= 2, "the tiny model suggests at least two codes for this note"
    _ok(at.button(key=f"review_accept_{sugg[0]}").click().run())
    for c in sugg[1:]:
        _ok(at.button(key=f"review_reject_{c}").click().run())
    _ok(at.text_input(key="review_search").input("kidney failure").run())
    options = at.selectbox(key="review_add_pick").options
    assert options and all("kidney" in o.lower() for o in options[:3]), options[:5]
    assert not [o for o in options if "(ICD-10-CM)" in o]  # an ICD-9 model's note is offered no ICD-10-CM code
    pick = next(o for o in options if "(model)" in o)
    _ok(at.selectbox(key="review_add_pick").set_value(pick).run())
    _ok(at.button(key="review_add").click().run())
    added = pick.split(" — ")[0]
    _ok(at.button(key="review_finish").click().run())
    assert any("finished" in s.value for s in at.success)
    with review.open_db(queued) as rdb:
        note = rdb.note("r0")
        assert note["status"] == "done"
        assert [(r["code"], r["action"], r["reviewer"]) for r in note["log"]] == \
            [(sugg[0], "accept", "ann"), *[(c, "reject", "ann") for c in sugg[1:]], (added, "add", "ann"),
             (None, "done", "ann")]
    assert [m.value for m in at.metric][:3] == ["2", "0", "1"]
    # the agreement tab counts the finished note
    assert [m.value for m in at.metric][3:6] == ["1", str(len(sugg) - 1), "1"]
    per_code = [d.value for d in at.dataframe if "precision" in d.value.columns][0]
    assert set(per_code["code"]) == set(sugg) | {added}


def test_a_suggestion_scored_from_the_terminology_is_marked(queued):
    """A suggested code no training note carried (`train --terminology`; stored as `suggestions.terminology`) carries
    a "from the terminology" badge; the others none."""
    with review.open_db(queued) as rdb:
        first, *rest = [s["code"] for s in rdb.note("r0")["suggestions"]]
        rdb.con.execute("UPDATE suggestions SET terminology = 1 WHERE note = 'r0' AND code = ?", (first,))
    at = _page()
    _ok(at.selectbox(key="review_pick").set_value("r0").run())
    _ok(at.button(key="review_open_btn").click().run())
    rows = {m.value.split("`")[1]: m.value for m in at.markdown if m.value.startswith("`")}
    assert "from the terminology" in rows[first] and not any("terminology" in rows[c] for c in rest), rows


def test_accept_keeps_the_highlighted_words_only_when_the_coder_ticks_the_box(queued):
    """Model highlights are not gold: an accept stores no evidence unless 'keep the highlighted words' is ticked;
    then the suggestion's highlighted words are the decision's spans (touching words as one phrase)."""
    at = _page()
    _ok(at.selectbox(key="review_pick").set_value("r1").run())
    _ok(at.button(key="review_open_btn").click().run())
    assert at.checkbox(key="review_keep_ev").value is False
    with review.open_db(queued) as rdb:
        sugg = rdb.note("r1")["suggestions"]
    _ok(at.button(key=f"review_accept_{sugg[0]['code']}").click().run())
    _ok(at.checkbox(key="review_keep_ev").check().run())
    _ok(at.button(key=f"review_accept_{sugg[1]['code']}").click().run())
    with review.open_db(queued) as rdb:
        note = rdb.note("r1")
    assert [(r["code"], r["spans"]) for r in note["log"]][0] == (sugg[0]["code"], None)
    code, spans = note["log"][1]["code"], note["log"][1]["spans"]
    marked = sorted((e["start"], e["end"]) for e in sugg[1]["evidence"])
    assert code == sugg[1]["code"] and spans and marked
    text = note["text"]
    covered = {i for a, b in spans for i in range(a, b)}
    assert all(set(range(a, b)) <= covered for a, b in marked)          # every highlighted word is kept
    assert all(text[a:b].strip() == text[a:b] for a, b in spans)                   # whole words, no spaces around
    assert all(text[spans[k][1]:spans[k + 1][0]].strip() for k in range(len(spans) - 1))  # touching words joined


def test_a_second_session_sees_the_claim_and_cannot_decide(queued):
    ann = _page("ann")
    ann.selectbox(key="review_pick").set_value("r1").run()
    _ok(ann.button(key="review_open_btn").click().run())
    bob = _page("bob")
    table = [d.value for d in bob.dataframe if "claimed by" in d.value.columns][0]
    assert table.set_index("id").loc["r1", "claimed by"] == "ann"
    assert table.set_index("id").loc["r1", "status"] == "in progress"
    bob.selectbox(key="review_pick").set_value("r1").run()
    _ok(bob.button(key="review_open_btn").click().run())
    assert any("being reviewed by ann" in e.value for e in bob.error)
    with review.open_db(queued) as rdb:
        assert rdb.note("r1")["claimed_by"] == "ann"


def test_filters_and_a_missing_database(queued, tmp_path, monkeypatch):
    at = _page()
    with review.open_db(queued) as rdb:
        code = rdb.note("r2")["suggestions"][0]["code"]
    _ok(at.selectbox(key="review_code").set_value(code).run())
    table = [d.value for d in at.dataframe if "claimed by" in d.value.columns][0]
    assert len(table) == 3 and all(code in c.split() for c in table["suggested codes"])
    _ok(at.slider(key="review_min_score").set_value(1.0).run())
    table = [d.value for d in at.dataframe if "claimed by" in d.value.columns][0]
    assert len(table) == 0
    monkeypatch.setenv(review.DB_ENV, str(tmp_path / "missing.sqlite"))
    at = _page(None)
    assert any("no review database at" in e.value for e in at.error)
    assert not (tmp_path / "missing.sqlite").exists()


def test_next_note_opens_what_the_rule_proposes(queued):
    with review.open_db(queued) as rdb:
        rdb.con.execute("UPDATE note_signals SET uncertainty = 9, rarity = 9 WHERE note = 'r2'")  # r2: most to teach
        assert rdb.next_notes(1) == ["r2"] and rdb.next_notes(1, order="arrival") == ["r0"]
    at = _page()
    assert at.selectbox(key="review_pick").options[0] == "r2"   # the list follows the rule too
    _ok(at.button(key="review_next_btn").click().run())
    with review.open_db(queued) as rdb:
        assert rdb.note("r2")["claimed_by"] == "ann"
    assert any("Note r2" in h.value for h in at.subheader)
    _ok(at.radio(key="review_order").set_value("arrival").run())
    assert at.selectbox(key="review_pick").options[0] == "r0"


def test_double_coding_is_blind_and_its_agreement_and_times_are_shown(queued):
    """A double coder sees nothing of the other's work on a note until it is adjudicated: not their decisions, not
    their time, not the kappa the two make; the Agreement tab leaves that note out for them and says so. After
    adjudication the agreement and both coders' times are shown."""
    from clinicode.review.audit import adjudicate, assign

    with review.open_db(queued) as rdb:
        assign(rdb, ["r0"], ["ann", "bob"])
        sugg = [s["code"] for s in rdb.note("r0")["suggestions"]]
        rdb.decide("r0", "bob", accept=sugg, done=True)
    ann = _page("ann")
    _ok(ann.selectbox(key="review_pick").set_value("r0").run())
    _ok(ann.button(key="review_open_btn").click().run())
    assert any("Double coded by ann and bob" in i.value for i in ann.info)
    assert not any("accepted" in m.value for m in ann.markdown if ":green[" in m.value)  # bob's decisions hidden
    for c in sugg:
        _ok(ann.button(key=f"review_reject_{c}").click().run())
    _ok(ann.button(key="review_finish").click().run())
    # both finished, not adjudicated: still blind to ann
    assert any("1 note(s) ann double codes are not adjudicated yet: left out" in c.value for c in ann.caption)
    assert not [d.value for d in ann.dataframe if "kappa" in d.value.columns and len(d.value)]
    shown = [d.value for d in ann.dataframe if "median seconds per note" in d.value.columns]
    assert not shown or "bob" not in set(shown[0]["reviewer"])
    with review.open_db(queued) as rdb:
        adjudicate(rdb, "r0", "carol", sugg[:1])
    ann = _page("ann")
    kappa_codes = [d.value for d in ann.dataframe if "kappa" in d.value.columns][0]
    assert set(kappa_codes["code"]) >= set(sugg) and (kappa_codes["agree"] == 0).loc[
        kappa_codes["code"].isin(sugg)].all()
    times = [d.value for d in ann.dataframe if "median seconds per note" in d.value.columns][0]
    assert set(times["reviewer"]) == {"ann", "bob"}
    assert any("learning curves" in h.value for h in ann.subheader)   # benchmarks/review_learning.json, plotted
