"""Code a note: paste, upload or pick a test note -> codes with probabilities, TP/FP/FN marks, highlights."""

from __future__ import annotations

import hashlib

import streamlit as st

import render
import state

EXPLAIN = 5  # evidence spans per code

run = state.current_run()
manifest = state.read_manifest(str(run))
data_dir = state.test_data_dir(run, manifest)

st.title("Code a note")
st.caption(
    f"Model **{run.name}** ({manifest.get('model', '?')}, {manifest.get('n_labels', '?')} codes). "
    "Notes stay in this browser session: nothing is saved or logged."
)

test_df, test_problem = state.test_notes(data_dir) if data_dir is not None else (None, None)
if test_problem:
    st.warning(f"Test-split notes are not available: {test_problem}.")
sources = ["Paste text", "Upload .txt"] + (["Test split note"] if test_df is not None else [])
source = st.radio("Note source", sources, horizontal=True, key="note_source")

text: str | None = None
gold: list[str] | None = None
note_id: str | None = None
if source == "Paste text":
    text = st.text_area(
        "Clinical note", key="note_text", height=220, placeholder="Paste a discharge summary (free text)…"
    )
elif source == "Upload .txt":
    up = st.file_uploader("Note file (.txt, UTF-8)", type=["txt"], key="note_file",
                          max_upload_size=render.MAX_UPLOAD_MB)
    if up is not None:
        if up.size > render.MAX_UPLOAD_MB * 1024 * 1024:
            st.error(f"{up.name} is {up.size / 1e6:.1f} MB; the limit is {render.MAX_UPLOAD_MB} MB.")
            st.stop()
        try:
            text = up.getvalue().decode("utf-8-sig")
        except UnicodeDecodeError:
            st.error(f"{up.name} is not UTF-8 text; save it as UTF-8 and upload it again.")
            st.stop()
else:
    ids = test_df["id"].tolist()
    n_gold = dict(zip(ids, (len(x) for x in test_df["labels"])))
    note_id = st.selectbox(
        f"Test note ({len(ids)} in the test split)", ids, key="test_note_id",
        format_func=lambda i: f"{i}  ·  {n_gold[i]} gold codes",
    )
    row = test_df.loc[test_df["id"] == note_id].iloc[0]
    text = state.test_note_text(data_dir, note_id)  # read for this page only, never cached
    gold = list(row["labels"])

clicked = st.button("Predict codes", key="predict", type="primary")

# The result is kept in session state (memory only), keyed by run and a hash of the note, so moving the
# threshold or the highlight choice never re-scores. One scoring gives every code's probability and the attention;
# a code's phrase evidence is computed when it is first shown or exported (models can have thousands of codes),
# then kept with the result.
key = hashlib.sha256(f"{run}\x00{text or ''}".encode()).hexdigest() if text else None
if clicked:
    if not text or not text.strip():
        st.warning("The note is empty; paste or upload some clinical text first.")
        st.stop()
    pred = state.current_predictor()  # the model (and torch) load on first use, not on the first render
    with st.spinner("Scoring…"):
        (p,) = pred.predict([text], ids=[note_id or "note"], top_k=None, threshold=1.0, explain=EXPLAIN)
    st.session_state["note_result"] = {"key": key, "pred": p}

res = st.session_state.get("note_result")
if res is None or res["key"] != key:
    st.info("Choose a note and press **Predict codes**.")
    st.stop()
p = res["pred"]
pred = state.current_predictor()
if gold is not None:
    gold = [c for c in gold if c in pred.labels]
if p.error:
    st.error(p.error)
    st.stop()

descs = state.code_titles(str(run))
if p.code_phrases is None:
    p.code_phrases = {}


def with_evidence(codes: list[str]) -> None:
    """Compute the phrase evidence of codes not explained yet (a model that shows it: LEAM), into the kept result."""
    missing = [c for c in codes if c not in p.code_phrases]
    if missing and pred.model_kind.abilities.explain:
        p.code_phrases.update(pred.explain_codes(text, missing, EXPLAIN))

tuned = float(pred.threshold)
if pred.single_label:
    thr = tuned
    st.caption("This model gives one code per note (single-label): its prediction is the top-scored code.")
else:
    thr = st.slider(
        "Threshold", 0.0, 1.0, value=round(tuned, 3), step=0.005, format="%.3f", key=f"threshold_{run.name}",
        help=f"Codes with probability above the threshold are predicted. Default: the dev-tuned {tuned:.3f}.",
    )
terms = frozenset(pred.terminology_codes)   # scored from their titles alone: no training note carried them
table = render.code_table(p.scores, descs, thr, gold=gold, top_k=10, single_label=pred.single_label, terminology=terms)
predicted = table.loc[table["above_threshold"], "code"].tolist()
st.session_state["predicted_codes"] = predicted

# The title goes last: long ICD-10 titles then take the room that is left instead of pushing the probability out of
# view.
TABLE_COLUMNS = ("code", "probability", "above_threshold", "outcome", "gold", "source", "description")
SOURCE_COLUMN = st.column_config.TextColumn("Source", width="small",
                                            help="terminology: a code no training note carried (train --terminology), "
                                                 "scored from its title in the note alone; check it before coding.")
left, right = st.columns([7, 5], gap="large")  # ICD-10 titles are long: the code table gets the wider half
with left:
    st.subheader(f"{len(predicted)} predicted code{'s' * (len(predicted) != 1)}")
    if gold is not None:
        cnt = render.outcome_counts(table)
        st.markdown(
            f"Gold codes known: **{len(gold)}** &nbsp; :green-badge[TP {cnt['TP']}] :orange-badge[FP {cnt['FP']}] "
            f":red-badge[FN {cnt['FN']}]"
        )
    if p.truncated:
        st.caption(f"The note was cut to the model's first {pred.max_len} tokens.")
    st.dataframe(
        render.style_outcomes(table), hide_index=True, width="stretch",
        column_order=[c for c in TABLE_COLUMNS if c in table],
        column_config={
            "code": st.column_config.TextColumn("Code", width="small"),
            "description": st.column_config.TextColumn("Description",
                                                       help="The code's title; hover a cell for all of it."),
            "probability": st.column_config.ProgressColumn(
                "Probability", min_value=0.0, max_value=1.0, format="%.3f", width="small"
            ),
            "above_threshold": st.column_config.CheckboxColumn("Predicted", width="small",
                                                               help="Above the threshold (a "
                                                                    "single-label model: its top code)."),
            "gold": st.column_config.CheckboxColumn("Gold", width="small"),
            "outcome": st.column_config.TextColumn("Outcome", width="small"),
            "source": SOURCE_COLUMN,
        },
    )
    if terms & set(predicted):
        st.caption(f"Source **terminology**: {', '.join(c for c in predicted if c in terms)} had no training note; "
                   "scored from the title alone.")
    with_evidence(predicted)                                   # the export holds every predicted code's evidence
    record = render.prediction_record(p, threshold=thr, run=run.name, note_id=note_id, gold=gold,
                                      single_label=pred.single_label, descriptions=descs, terminology=terms)
    suggested = list(p.suggested or [])
    st.subheader(f"{len(suggested)} suggested from the title")
    if pred.suggester is None:
        st.caption("No suggestions: this run's code system ships no titles (ICD-10-CM does). Start the app with "
                   "CLINICODE_TITLES=code<TAB>title file (and CLINICODE_TREE for MeSH) to suggest other codes.")
    elif not suggested:
        st.caption(f"No code outside the model's {len(pred.codes):,} has its title in this note "
                   f"({len(pred.suggester):,} candidates).")
    else:
        st.caption(f"**Not predictions.** Codes the model was not trained on whose title stands in the note "
                   f"(from {len(pred.suggester):,} candidates): check them before coding. Marked with **?** in the "
                   "note.")
        st.dataframe(
            render.suggestion_table(suggested), hide_index=True, width="stretch", key="suggested_table",
            column_config={"code": st.column_config.TextColumn("Code", width="small"),
                           "title": st.column_config.TextColumn("Title"),
                           "why": st.column_config.TextColumn("Why suggested")},
        )
    st.download_button(
        "Download predictions (JSON)", render.json_bytes(record), file_name=f"{note_id or 'note'}_codes.json",
        mime="application/json", key="dl_json", on_click="ignore", icon=":material/download:",
    )

    query = st.text_input(f"Search all {len(descs):,} codes", key="code_search",
                          placeholder="a code (428, 428.0) or words of its title (heart failure)")
    found = []
    if query.strip():
        hits, n_hits = render.search_codes(p.scores, descs, query, thr, gold=gold, single_label=pred.single_label,
                                           terminology=terms)
        found = hits["code"].tolist()
        st.caption(f"{n_hits:,} code{'s' * (n_hits != 1)} match"
                   + (f"; the {len(hits)} most probable are shown" if n_hits > len(hits) else ""))
        if n_hits:
            st.dataframe(
                render.style_outcomes(hits), hide_index=True, width="stretch", key="search_table",
                column_order=[c for c in TABLE_COLUMNS if c in hits],
                column_config={
                    "code": st.column_config.TextColumn("Code", width="small"),
                    "description": st.column_config.TextColumn("Description"),
                    "probability": st.column_config.ProgressColumn("Probability", min_value=0.0, max_value=1.0,
                                                                   format="%.3f", width="small"),
                    "above_threshold": st.column_config.CheckboxColumn("Predicted", width="small"),
                    "gold": st.column_config.CheckboxColumn("Gold", width="small"),
                    "outcome": st.column_config.TextColumn("Outcome", width="small"),
                    "source": SOURCE_COLUMN,
                },
            )

with right:
    st.subheader("Evidence")
    each = "Each shown code's own evidence"
    attn = "Attention β (shared by all codes)"
    choices = [each, attn] + predicted
    if gold is not None:  # missed gold codes can be inspected too
        choices += [c for c in gold if c not in predicted]
    choices += [c for c in found if c not in choices]           # and any code found by the search
    titles_of = {x.code: x.title for x in suggested}
    pick = st.selectbox(
        "Highlight", choices, key="hl_code",
        format_func=lambda c: c if c in (each, attn) else (f"{c} — {descs.get(c, titles_of.get(c, ''))}"
                                                           + (render.FROM_TERMINOLOGY if c in terms else "")),
    )
    if pick == each:
        # the default: what evaluate measures (each code's own spans), one colour and the code's name per code
        with_evidence(predicted)
        # suggestions first: where a predicted code's words overlap a title, the dashed mark shows, both are named
        spans = {x.code: list(x.spans) for x in suggested}
        spans.update({c: p.code_phrases.get(c, []) for c in predicted if p.code_phrases.get(c)})
        if spans:
            st.caption(
                "Each predicted code's own evidence (the words closest to the code: what `evaluate` measures) and "
                "each suggested code's title in the note: one colour per code, the code named after its words; a "
                "suggestion's name ends in **?** and its words are underlined dashed."
                + ("" if pred.model_kind.abilities.explain else f" A {pred.kind} model shows no words for its "
                   "predicted codes.")
            )
        else:
            st.caption("No code is shown with evidence at this threshold; lower it, pick a code, or choose the "
                       "shared attention.")
        body = render.codes_html(text, spans, suggested=[x.code for x in suggested])
    elif not pred.model_kind.abilities.explain:
        st.caption(f"A {pred.kind} model has no attention or phrase evidence; the note is shown as text.")
        body = render.highlight_html(text, [])
    elif pick == attn:
        st.caption(
            "Amber: LEAM's attention β over tokens (one distribution for the whole note). Opacity rises with β from "
            "the note's lowest to its highest weight; the faintest tokens are left plain."
        )
        body = render.highlight_html(
            text, p.attention or [], rgb=render.ATTENTION_RGB, css_class="attn", min_alpha=0.15, scale="range"
        )
    else:
        with_evidence([pick])
        from clinicode.serving import WORD_BAR  # the model is loaded by now: importing predict costs nothing more

        st.caption(
            f"Green: the words that justify **{pick}** ({pred.span_weight}; words at least {WORD_BAR:g} of the "
            f"best in this note, neighbouring words joined, at most {EXPLAIN} spans); opacity rises with the weight."
        )
        body = render.highlight_html(text, p.code_phrases[pick], rgb=render.EVIDENCE_RGB, css_class="evidence")
    st.html(body)
