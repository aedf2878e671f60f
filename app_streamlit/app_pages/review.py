"""Review queue page: notes queued by `clinicode review queue`, one at a time, with the model's codes and evidence.

Every action is `clinicode review decide`'s path; opening a note claims it (docs/review.md). No note text in caches."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

import clinicode.serving as serving
from clinicode.serving import ClinicodeError

import render

OPEN = "review_open"      # session key: the id of the note this session has open
FLASH = "review_flash"    # session key: a message to show after a rerun
CURVES = Path(__file__).resolve().parents[2] / "benchmarks" / "review_learning.json"  # the next-note benchmark's curves


def _until(epoch: float | None) -> str:
    return "" if not epoch else datetime.fromtimestamp(epoch, timezone.utc).strftime("%H:%M UTC")


def _act(fn, *args, **kwargs) -> bool:
    """Run one review call; show its one-line refusal instead of failing the page."""
    try:
        fn(*args, **kwargs)
        return True
    except ClinicodeError as err:
        st.session_state[FLASH] = ("error", str(err))
        return False


def _highlighted(text: str, evidence: list[dict]) -> list[tuple[int, int]]:
    """A suggestion's highlighted words as evidence spans: words next to each other (only spaces between) are one
    phrase, as a coder would mark them (`decide` refuses more than 50 a code, shown as its one line)."""
    out: list[list[int]] = []
    for a, b in sorted((int(e["start"]), int(e["end"])) for e in evidence):
        if not 0 <= a < b <= len(text):
            continue
        if out and not text[out[-1][1]:a].strip():  # touching, overlapping, or only spaces between
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _double_coding(db, reviewer: str | None) -> None:
    """Double coders' agreement (Cohen's kappa per coder and per code) and each coder's time per note; for a named
    REVIEWER, without the notes still blind to them (double coded, not adjudicated), as `review agreement
    --reviewer` leaves them out."""
    a = serving.review_agreement(db, reviewer=reviewer)
    times = pd.DataFrame([t for t in serving.review_work_times(db, reviewer=reviewer)  # an adjudication times a
                          if t["seconds"] is not None and t["role"] != "adjudicator"],  # ruling, not a coding
                         columns=["note", "reviewer", "seconds"])
    st.subheader("Double coding")
    if a.get("blind_notes"):
        st.caption(f"{a['blind_notes']} note(s) {reviewer} double codes are not adjudicated yet: left out here, so "
                   "nothing of the other coder's work shows before adjudication.")
    if not a["notes"]:
        st.caption("No note is double coded and finished by both coders yet (`clinicode review assign --coder A "
                   "--coder B --count N`).")
    else:
        k, kn = a["overall_kappa"], a["overall_kappa_note_codes"]
        st.caption(f"{a['notes']} note(s) both coders finished, {a['adjudicated']} adjudicated; Cohen's kappa over "
                   f"every note and every code named on any of them: {'–' if k is None else f'{k:.2f}'}; over each "
                   f"note and only the codes named on it: {'–' if kn is None else f'{kn:.2f}'} (1: full agreement; "
                   "0: chance).")
        st.dataframe(pd.DataFrame([{"coder": c, **v} for c, v in a["per_coder"].items()],
                                  columns=["coder", "notes", "kappa_with_other", "kappa_with_final"]),
                     hide_index=True, width="stretch", key="review_kappa_coders")
        st.dataframe(pd.DataFrame([{"code": c, **v} for c, v in a["per_code"].items()],
                                  columns=["code", "notes", "first", "second", "agree", "kappa"]),
                     hide_index=True, width="stretch", key="review_kappa_codes")
    if len(times):
        per = times.groupby("reviewer")["seconds"].agg(["count", "median"]).reset_index()
        per.columns = ["reviewer", "notes finished", "median seconds per note"]
        st.dataframe(per, hide_index=True, width="stretch", key="review_times")


def _learning_curves() -> None:
    """What each next-note rule taught a model in the simulated-coder benchmark (benchmarks/review_learning.json)."""
    if not CURVES.exists():
        return
    data = json.loads(CURVES.read_text(encoding="utf-8"))
    rows = [{"data": key, "rule": rule, "notes reviewed": p["reviewed"], "metric": m, "value": p[m], "seed": s}
            for key, e in data.items() for rule, curves in e["curves"].items() for s, c in enumerate(curves)
            for p in c for m in ("micro_f1", "macro_f1")]
    if not rows:
        return
    st.subheader("Which note next: learning curves")
    learners = sorted({e.get("learner", "tfidf-lr") for e in data.values()})
    st.caption("A simulated coder replays gold codes (and evidence spans) in each rule's order; the model "
               f"({', '.join(learners)}) is refitted after each batch (benchmarks/bench_review_learning.py, mean of "
               "the seeds). `teach` is `review next`'s rule.")
    df = pd.DataFrame(rows).groupby(["data", "rule", "notes reviewed", "metric"], as_index=False)["value"].mean()
    key = st.selectbox("Data", sorted(df["data"].unique()), key="review_curve_data")
    st.altair_chart(alt.Chart(df[df["data"] == key]).mark_line(point=True).encode(
        x=alt.X("notes reviewed:Q"), y=alt.Y("value:Q", title=None), color=alt.Color("rule:N"),
        strokeDash=alt.StrokeDash("metric:N")), width="stretch")


st.title("Review queue")
env_db = os.environ.get(serving.REVIEW_DB_ENV, "")
c1, c2 = st.columns([3, 2])
db_path = env_db or c1.text_input(
    "Review database", key="review_db", placeholder="reviews.sqlite",
    help="The SQLite file `clinicode review queue --db FILE` filled (or set CLINICODE_REVIEW_DB "
         "before starting the app).")
if env_db:
    c1.caption(f"Review database `{env_db}` (from {serving.REVIEW_DB_ENV}).")
reviewer = c2.text_input("Reviewer", key="review_reviewer", placeholder="your name",
                         help="Stored with every decision; opening a note claims it under this name.").strip()
if not db_path:
    st.info("Queue notes with `clinicode review queue --checkpoint RUN --input NOTES --db FILE`, then give that file "
            f"here or in {serving.REVIEW_DB_ENV}.")
    st.stop()
try:
    db = serving.open_review_db(db_path, create=False)
except ClinicodeError as err:
    st.error(str(err))
    st.stop()

try:
    flash = st.session_state.pop(FLASH, None)
    if flash:
        getattr(st, flash[0])(flash[1])
    queue_tab, stats_tab = st.tabs(["Queue", "Agreement"])

    # ------------------------------------------------------------------------------------------- the queue
    with queue_tab:
        everything = db.notes()
        counts = {s: sum(n["status"] == s for n in everything) for s in serving.REVIEW_STATUSES}
        m = st.columns(3)
        for col, s in zip(m, serving.REVIEW_STATUSES):
            col.metric(s.capitalize(), counts[s], border=True)
        f1, f2, f3 = st.columns([2, 1, 1])
        status = f1.multiselect("Status", list(serving.REVIEW_STATUSES), default=["pending", "in progress"],
                                key="review_status")
        all_codes = sorted({c for n in everything for c in n["codes"]})
        code = f2.selectbox("Suggested code", ["(any)", *all_codes], key="review_code")
        min_score = f3.slider("Best score at least", 0.0, 1.0, 0.0, 0.05, key="review_min_score")
        shown = db.notes(status=status, code=None if code == "(any)" else code, min_score=min_score or None)
        table = pd.DataFrame([{"id": n["id"], "status": n["status"], "claimed by": n["claimed_by"] or "",
                               "best score": n["top_score"], "suggested codes": " ".join(n["codes"])} for n in shown],
                             columns=["id", "status", "claimed by", "best score", "suggested codes"])
        st.dataframe(table, hide_index=True, width="stretch", key="review_table", column_config={
            "best score": st.column_config.ProgressColumn("best score", min_value=0.0, max_value=1.0, format="%.2f")})
        order = st.radio("Order", list(serving.REVIEW_ORDERS), horizontal=True, key="review_order",
                         index=list(serving.REVIEW_ORDERS).index(serving.DEFAULT_REVIEW_ORDER),
                         help="teach: notes the model is least sure of and notes of rare codes first, alike notes "
                              "spread out (the rule of `clinicode review next`); arrival: queue order.")
        ranked = db.next_notes(len(everything), order=order, reviewer=reviewer or None)
        rank = {i: r for r, i in enumerate(ranked)}
        openable = sorted((n["id"] for n in shown if n["status"] != "done"), key=lambda i: rank.get(i, len(rank)))
        if st.button("Next note", key="review_next_btn", disabled=not (ranked and reviewer),
                     help="Open the note the rule proposes next." if reviewer else "Type your name first."):
            previous = st.session_state.get(OPEN)
            if _act(db.claim, ranked[0], reviewer):
                if previous and previous != ranked[0]:
                    _act(db.release, previous, reviewer)
                st.session_state[OPEN] = ranked[0]
            st.rerun()
        o1, o2 = st.columns([3, 1])
        pick = o1.selectbox("Note to review", openable, key="review_pick", index=0 if openable else None,
                            placeholder="no open note matches the filters")
        if o2.button("Open note", key="review_open_btn", disabled=not (pick and reviewer), type="primary",
                     help=None if reviewer else "Type your name first."):
            previous = st.session_state.get(OPEN)
            if _act(db.claim, pick, reviewer):
                if previous and previous != pick:
                    _act(db.release, previous, reviewer)
                st.session_state[OPEN] = pick
            st.rerun()

        # --------------------------------------------------------------------------------------- one note
        note_id = st.session_state.get(OPEN)
        if note_id:
            try:
                note = db.note(note_id, reviewer=reviewer or None)  # a double-coded note shows your decisions only
            except ClinicodeError as err:
                st.session_state.pop(OPEN, None)
                st.error(str(err))
                st.stop()
            st.divider()
            st.subheader(f"Note {note_id}")
            now = time.time()
            holder = note["claimed_by"] if (note["claim_expires"] or 0) > now else None
            coders = note["assigned"]
            if coders and note["status"] != "done":
                holder = None  # double coded: its two coders work at once, blind to each other
                if reviewer not in coders:
                    holder = " and ".join(sorted(coders))
                st.info(f"Double coded by {' and '.join(sorted(coders))}, blind: you see your own decisions only. "
                        "Once both finish, someone else adjudicates (`clinicode review adjudicate`).")
            if note["status"] == "done":
                st.success("This note is finished; its decisions are final.")
            elif coders and reviewer in coders and coders[reviewer]:
                st.success("You finished this note; it waits for the other coder and adjudication.")
            elif coders and reviewer not in coders:
                st.warning("Only its two coders decide on this note: you can read it, not decide.")
            elif holder and holder != reviewer:
                st.warning(f"Claimed by {holder} until {_until(note['claim_expires'])}: you can read it, not decide.")
            elif holder == reviewer:
                st.caption(f"Claimed by you until {_until(note['claim_expires'])}; every decision renews the claim.")
            else:
                st.caption("Your claim on this note expired; deciding claims it again if nobody else has.")
            sugg = note["suggestions"]
            state = note["state"]
            ev_options = ["all suggestions", *[s["code"] for s in sugg]]
            ev = st.selectbox("Evidence to highlight", ev_options, key="review_ev")
            spans = [e for s in sugg if ev in ("all suggestions", s["code"]) for e in s["evidence"]]
            st.html(render.highlight_html(note["text"], spans, rgb=render.EVIDENCE_RGB, css_class="evidence",
                                          element_id="review-hl"))
            can_decide = (note["status"] != "done" and not (holder and holder != reviewer) and bool(reviewer)
                          and not (coders and coders.get(reviewer)))
            st.markdown("**Suggested codes**" if sugg else "_The model suggested no code for this note._")
            keep = st.checkbox("Keep the highlighted words as evidence", value=False, key="review_keep_ev",
                               disabled=not (sugg and can_decide),
                               help="Accept then stores the code's highlighted words with your decision, and "
                                    "retraining learns them as the code's mention. Model highlights are not gold: "
                                    "tick it only when the words are what justifies the code.")
            label = {"accept": ":green[accepted]", "reject": ":red[rejected]", None: ":gray[undecided]"}
            for s in sugg:
                r1, r2, r3, r4 = st.columns([6, 2, 1, 1])
                if s.get("source") == "title":  # #43: not a prediction, a code the model lacks whose title is here
                    r1.markdown(f":violet-badge[suggested from the title] `{s['code']}` {s['description']}")
                else:   # a code no training note carried is marked: its score comes from its title alone (#50)
                    r1.markdown(f"`{s['code']}` {s['description']} · score {s['score']:.2f}"
                                + (" · :orange-badge[from the terminology]" if s.get("terminology") else ""))
                r2.markdown(label.get(state.get(s["code"]), ""))
                if r3.button("Accept", key=f"review_accept_{s['code']}", disabled=not can_decide):
                    marked = _highlighted(note["text"], s["evidence"]) if keep else []
                    _act(db.decide, note_id, reviewer, accept=[s["code"]],
                         evidence={s["code"]: marked} if marked else None)
                    st.rerun()
                if r4.button("Reject", key=f"review_reject_{s['code']}", disabled=not can_decide):
                    _act(db.decide, note_id, reviewer, reject=[s["code"]])
                    st.rerun()
            suggested = {s["code"] for s in sugg}
            added = [c for c, a in state.items() if a == "add" and c not in suggested]
            titles = dict(db.model_codes(note_id))
            if added:
                st.markdown("**Codes you added**")
                for c in added:
                    a1, a2 = st.columns([8, 2])
                    a1.markdown(f"`{c}` {titles.get(c, '')}")
                    if a2.button("Remove", key=f"review_remove_{c}", disabled=not can_decide):
                        _act(db.decide, note_id, reviewer, reject=[c])
                        st.rerun()
            s1, s2, s3 = st.columns([3, 4, 1])
            query = s1.text_input("Add a code: search codes or titles", key="review_search",
                                  placeholder="e.g. 584 or kidney failure", disabled=not can_decide)
            found = [f for f in serving.search_review_codes(query, db.model_codes(note_id))
                     if f[0] not in suggested and f[0] not in added] if query else []
            if st.session_state.get("review_last_search") != query:  # new matches: preselect the best one
                st.session_state["review_last_search"] = query
                st.session_state.pop("review_add_pick", None)
            choice = s2.selectbox("Matches", [f"{c} — {t} ({src})" for c, t, src in found], key="review_add_pick",
                                  index=0 if found else None, disabled=not found, placeholder="type to search")
            s3.markdown("&nbsp;")
            if s3.button("Add", key="review_add", disabled=not (choice and can_decide)):
                _act(db.decide, note_id, reviewer, add=[choice.split(" — ")[0]])
                st.rerun()
            undecided = [s["code"] for s in sugg if state.get(s["code"]) not in ("accept", "reject")]
            b1, b2, _ = st.columns([2, 2, 4])
            if b1.button("Finish note", key="review_finish", type="primary", disabled=not can_decide or bool(undecided),
                         help=f"Decide {len(undecided)} more suggestion(s) first." if undecided else None):
                if _act(db.finish, note_id, reviewer):
                    st.session_state[FLASH] = ("success", f"Note {note_id} finished.")
                    st.session_state.pop(OPEN, None)
                st.rerun()
            if b2.button("Close without finishing", key="review_close"):
                _act(db.release, note_id, reviewer)
                st.session_state.pop(OPEN, None)
                st.rerun()

    # ------------------------------------------------------------------------------------------- agreement
    with stats_tab:
        by = st.radio("Over time by", ["day", "week"], horizontal=True, key="review_by")
        try:
            # the integrity check runs first: a damaged file is one line, not partial counts; a named reviewer sees
            # nothing of another coder's work on notes still blind to them
            stats = db.stats(by=by, reviewer=reviewer or None)
        except ClinicodeError as err:
            st.error(str(err))
            st.stop()
        o = stats["overall"]
        st.caption(f"{o['notes']} finished note(s). Accepted: suggested and kept; rejected: suggested and removed; "
                   "added: coded but not suggested (the model's misses). Precision = accepted / (accepted + rejected); "
                   "recall = accepted / (accepted + added).")
        cols = st.columns(5)
        for col, (k, lab) in zip(cols, (("accepted", "Accepted"), ("rejected", "Rejected"),
                                        ("added", "Added (misses)"))):
            col.metric(lab, o[k], border=True)
        for col, k in zip(cols[3:], ("precision", "recall")):
            col.metric(k.capitalize(), "–" if o[k] is None else f"{o[k]:.1%}", border=True)
        rows = [{"code": c, **v} for c, v in stats["per_code"].items()]
        per_code = pd.DataFrame(rows, columns=["code", "accepted", "rejected", "added", "precision", "recall"])
        st.dataframe(per_code, hide_index=True, width="stretch", key="review_per_code", column_config={
            "precision": st.column_config.NumberColumn(format="percent"),
            "recall": st.column_config.NumberColumn(format="percent")})
        _double_coding(db, reviewer or None)
        _learning_curves()
        trend = pd.DataFrame([{"period": p, "metric": k, "value": v[k]} for p, v in stats["over_time"].items()
                              for k in ("precision", "recall") if v[k] is not None])
        if len(trend):
            st.altair_chart(alt.Chart(trend).mark_line(point=True).encode(
                x=alt.X("period:N", title=by), y=alt.Y("value:Q", title=None, scale=alt.Scale(domain=[0, 1])),
                color=alt.Color("metric:N", title=None)), width="stretch")
finally:
    db.close()
