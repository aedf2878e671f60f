"""Batch scoring: upload CSV or JSONL (id, text) -> scored table with per-row errors -> the CLI's CSV / JSONL
records."""

from __future__ import annotations

import hashlib

import streamlit as st

import batch_files
import render
import state

pred = state.current_predictor()
run = state.current_run()

st.title("Batch scoring")
st.caption(
    f"Model **{run.name}**. Upload a CSV with columns `id,text` or a JSONL file with one "
    f"`{{\"id\", \"text\"}}` object per "
    f"line (at most {render.MAX_UPLOAD_MB} MB). Files are read in memory and never saved."
)

up = st.file_uploader(
    "Notes file", type=["csv", "jsonl"], key="batch_file", max_upload_size=render.MAX_UPLOAD_MB,
)
tuned = float(pred.threshold)
thr = st.number_input(
    "Threshold", 0.0, 1.0, value=round(tuned, 3), step=0.01, format="%.3f", key=f"batch_threshold_{run.name}",
    help=f"Codes with probability above the threshold are predicted (a single-label model predicts its top code). "
         f"Default: the dev-tuned {tuned:.3f}.",
)
if up is None:
    st.info("Upload a file to score it.")
    st.stop()
if up.size > render.MAX_UPLOAD_MB * 1024 * 1024:
    st.error(f"{up.name} is {up.size / 1e6:.1f} MB; the limit is {render.MAX_UPLOAD_MB} MB. Split the file.")
    st.stop()

data = up.getvalue()
key = hashlib.sha256(data).hexdigest() + f"|{run}|{thr:.6f}"
res = st.session_state.get("batch_result")
if res is None or res["key"] != key:
    parsed = batch_files.parse_batch(data, up.name)
    if parsed.error:
        st.error(parsed.error)
        st.stop()
    bar = st.progress(0.0, text=f"Scoring {len(parsed.rows)} notes…")
    records = batch_files.score_batch(
        pred, parsed.rows, threshold=thr,
        on_progress=lambda done, total: bar.progress(done / max(total, 1), text=f"Scored {done} of {total} notes"),
    )
    bar.empty()
    res = {"key": key, "records": records}
    st.session_state["batch_result"] = res
records = res["records"]
results = batch_files.batch_table(records)

n_err = int(results["error"].notna().sum())
c1, c2, c3 = st.columns(3)
c1.metric("Notes", len(results), border=True)
c2.metric("Scored", len(results) - n_err, border=True)
c3.metric("Errors", n_err, border=True)
if n_err:
    st.warning(f"{n_err} row{'s' * (n_err != 1)} could not be scored; see the error column.")
st.dataframe(
    results, hide_index=True, width="stretch",
    # the terminology's column only for a model that predicted a code from it
    column_order=[c for c in results.columns if c != "from_terminology" or results[c].astype(bool).any()],
    column_config={
        "id": st.column_config.TextColumn("id"),
        "codes": st.column_config.TextColumn("Predicted codes"),
        "n_codes": st.column_config.NumberColumn("# codes"),
        "top_code": st.column_config.TextColumn("Top code"),
        "top_score": st.column_config.ProgressColumn("Top probability", min_value=0.0, max_value=1.0, format="%.3f"),
        "scores": st.column_config.TextColumn("Scores of predicted codes"),
        "from_terminology": st.column_config.TextColumn("From the terminology",
                                                        help="Predicted codes no training note carried, scored from "
                                                             "their title alone (train --terminology)."),
        "error": st.column_config.TextColumn("Error"),
    },
)
stem = up.name.rsplit(".", 1)[0]
offered = batch_files.download_formats()  # the output formats offered to the app (`Writer.app`), in registry order
for col, w in zip(st.columns([1] * len(offered) + [3]), offered):
    col.download_button(
        f"Download {w.name.upper()}", batch_files.batch_bytes(records, w.name),
        file_name=f"{stem}_codes{w.suffixes[0]}",
        mime=w.media_type, key=f"dl_batch_{w.name}", on_click="ignore", icon=":material/download:",
    )
