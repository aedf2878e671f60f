"""Model performance on the run's test split: headline metrics, evidence quality (test notes with gold mentions), per
code (bars for a few codes; for thousands, groups by training frequency and ICD chapter, best and worst codes, a
searchable table), F1 vs threshold, ROC/PR."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st
from sklearn.metrics import auc as sk_auc, precision_recall_curve, roc_curve

import render
import state

BARS_UP_TO = 60   # codes drawn as one bar each; beyond, groups, best/worst and the searchable table carry the page
RANKED, MIN_SUPPORT = 15, 5

run = state.current_run()
card = state.read_card(str(run))
mt = card.get("metrics_test")
tuned = float(card["threshold"])

st.title("Model performance")
if not mt:
    st.info(f"Run **{run.name}** has no test metrics (it was trained without a test split).")
    st.stop()

st.caption(f"Test split of run **{run.name}**: {mt.get('n_docs', '?')} notes, {mt.get('n_labels', '?')} codes.")

for title, m in ((f"At the dev-tuned threshold {tuned:.3f}", mt), ("At threshold 0.5", mt.get("threshold_0.5"))):
    if not m:
        continue
    st.markdown(f"**{title}**")
    cols = st.columns(len(render.HEADLINE))
    for col, (label, value) in zip(cols, render.headline_metrics(m).items()):
        col.metric(label, "—" if value is None else f"{value:.3f}", border=True)

evidence = render.evidence_table(mt.get("evidence"))
if evidence is not None:
    ev = mt["evidence"]
    st.subheader("Evidence quality")
    st.caption(f"Do the highlighted words point at the code? Over the {ev['n_pairs']:,} correctly predicted codes "
               f"whose test note marks where it is mentioned: hit@1, the code's first span is on a mention; "
               f"hit@{ev['k']}, one of its {ev['k']} spans is; word precision, recall and F1 of the highlighted "
               "words against the mentioned ones (docs/metrics.md).")
    st.dataframe(evidence, hide_index=True, width="stretch", key="perf_evidence",
                 column_config={c: st.column_config.NumberColumn(c, format="%.1f" if c == "words per code" else "%.3f")
                                for c in evidence.columns if c != "spans"})
    span = ev.get("span_code") or {}
    if span.get("f1") is not None:
        st.caption(f"Span-and-code F1 {span['f1']:.3f} (precision {span['precision']:.3f}, "
                   f"recall {span['recall']:.3f}): "
                   f"a predicted code counts only when one of its {ev['k']} spans holds a coder's mention of it, "
                   f"{span['slack']} characters of slack each side, over every predicted code (CodiEsp-X's metric; "
                   "docs/metrics.md).")

# ---------------------------------------------------------------- per code: groups, best and worst, search
pred = state.current_predictor()
descs = state.code_titles(str(run))
per = render.per_code_frame(mt.get("per_code") or [], descs, group=pred.code_system.group)
if not per.empty:
    st.subheader("Per code")
    n_codes = len(per)
    tip = ["code", "description", "support", alt.Tooltip("precision:Q", format=".3f"),
           alt.Tooltip("recall:Q", format=".3f"), alt.Tooltip("f1:Q", format=".3f"), alt.Tooltip("auc:Q", format=".3f")]
    if n_codes <= BARS_UP_TO:  # one bar per code still reads well
        sort_by = st.segmented_control(
            "Sort by", ["f1", "auc", "support"], default="f1", key="perf_sort",
            format_func={"f1": "F1", "auc": "AUC", "support": "Support"}.get,
        ) or "f1"
        order = per.sort_values([sort_by, "code"], ascending=[False, True])["code"].tolist()
        y = alt.Y("code:N", sort=order, title=None, axis=alt.Axis(labelOverlap=False, labelFontSize=10))
        base = alt.Chart(per).properties(height=max(200, 16 * n_codes))
        f1_bars = base.mark_bar(color="#4c78a8").properties(width=280).encode(
            y=y, x=alt.X("f1:Q", title="F1", scale=alt.Scale(domain=[0, 1])), tooltip=tip
        )
        auc_bars = base.mark_bar(color="#f58518").properties(width=280).encode(
            y=alt.Y("code:N", sort=order, axis=None), x=alt.X("auc:Q", title="ROC AUC", scale=alt.Scale(domain=[0, 1])),
                                                                               tooltip=tip
        )
        sup_bars = base.mark_bar(color="#9d9d9d").properties(width=180).encode(
            y=alt.Y("code:N", sort=order, axis=None), x=alt.X("support:Q", title="Support (test notes)"), tooltip=tip
        )
        st.altair_chart(alt.hconcat(f1_bars, auc_bars, sup_bars, spacing=10), width="content")
        st.caption(f"F1 at the tuned threshold {tuned:.3f}; AUC is undefined (missing bar) for codes "
                   "without both classes in test.")
    else:
        st.caption(f"{n_codes:,} codes: grouped below, with the best and worst codes and a searchable table of all of "
                   f"them. F1 at the tuned threshold {tuned:.3f}; AUC only where a code has "
                   "positive and negative test notes.")

    group_tabs = st.tabs(["By frequency band", "By ICD chapter"])
    for tab, by, title in ((group_tabs[0], "band", f"Codes seen in this many {per.attrs['band_source']}"),
                           (group_tabs[1], "chapter", "ICD chapter")):
        g = render.group_summary(per, by)
        # Two plain bar charts side by side (mean F1, mean AUC), one row per group at a fixed step: grouped bars
        # with yOffset in a fixed-height chart collapsed to a flat line once the groups did not fit (issue #27).
        order = g[by].tolist() if by == "band" else g.sort_values(["mean_f1", by], ascending=[False, True])[by].tolist()
        tab.markdown(f"**{title}**")
        tab.altair_chart(render.group_bars(g, by, order), width="content")
        tab.dataframe(g, hide_index=True, width="stretch", column_config={
            by: st.column_config.TextColumn(title), "codes": st.column_config.NumberColumn("Codes"),
            "mean_f1": st.column_config.NumberColumn("Mean F1", format="%.3f"),
            "mean_auc": st.column_config.NumberColumn("Mean AUC", format="%.3f"),
            "test_notes": st.column_config.NumberColumn("Test notes (sum of code supports)")})

    code_cols = {"code": st.column_config.TextColumn("Code", width="small"),
                 "description": st.column_config.TextColumn("Description", width="large"),
                 "support": st.column_config.NumberColumn("Test notes"),
                 "precision": st.column_config.NumberColumn("Precision", format="%.3f"),
                 "recall": st.column_config.NumberColumn("Recall", format="%.3f"),
                 "f1": st.column_config.NumberColumn("F1", format="%.3f"),
                 "auc": st.column_config.NumberColumn("AUC", format="%.3f"),
                 "band": st.column_config.TextColumn("Frequency band"),
                 "chapter": st.column_config.TextColumn("Chapter")}
    shown = [c for c in ("code", "description", "support", "precision", "recall", "f1", "auc", "band",
                         "chapter") if c in per]
    if n_codes > BARS_UP_TO:
        best_col, worst_col = st.columns(2)
        for col, best, label in ((best_col, True, "Best"), (worst_col, False, "Worst")):
            col.markdown(f"**{label} {RANKED} codes** (F1, then AUC; codes with at least {MIN_SUPPORT} test notes)")
            col.dataframe(render.rank_codes(per, best=best, n=RANKED, min_support=MIN_SUPPORT), hide_index=True,
                          width="stretch", column_order=["code", "description", "support", "f1", "auc"],
                          column_config=code_cols, key=f"rank_{label}")
    query = st.text_input(f"Search the {n_codes:,} codes", key="perf_search",
                          placeholder="a code (428, 428.0), words of its title, or a chapter")
    table = render.filter_codes(per, query).sort_values(["support", "code"], ascending=[False, True])
    st.caption(f"{len(table):,} of {n_codes:,} codes" + (f" match {query.strip()!r}" if query.strip() else "")
               + "; click a column to sort.")
    st.dataframe(table, hide_index=True, width="stretch", column_order=shown, column_config=code_cols, key="perf_table")

# ---------------------------------------------------------------- curves from scores_test.npz
sc = state.read_scores_test(str(run))
if not sc:
    st.info("This run has no `scores_test.npz`, so the threshold and ROC curves are not available.")
    st.stop()
if "error" in sc:
    st.warning(f"The threshold and ROC curves are not available: {sc['error']}.")
    st.stop()
y_true, scores = sc["y_true"], sc["scores"]

st.subheader("F1 against threshold")
grid = np.round(np.linspace(0.0, 1.0, 101), 4)
curve = state.threshold_curve(str(run), tuple(grid.tolist()))
cdf = pd.DataFrame({"threshold": curve["threshold"], "micro-F1": curve["f1_micro"], "macro-F1": curve["f1_macro"]})
long = cdf.melt("threshold", var_name="metric", value_name="F1")
lines = alt.Chart(long).mark_line().encode(
    x=alt.X("threshold:Q", title="Threshold"), y=alt.Y("F1:Q", scale=alt.Scale(domain=[0, 1])),
    color=alt.Color("metric:N", title=None), tooltip=["metric", alt.Tooltip("threshold:Q", format=".2f"),
                                                      alt.Tooltip("F1:Q", format=".3f")],
)
rules = alt.Chart(pd.DataFrame({"threshold": [tuned, 0.5], "which": [f"tuned {tuned:.3f}", "0.5"]})).mark_rule(
    strokeDash=[4, 4], color="gray"
).encode(x="threshold:Q", tooltip=["which"])
st.altair_chart((lines + rules).properties(height=300), width="stretch")

st.subheader("One code")
all_codes = list(pred.labels.codes)
n_pos = y_true.sum(axis=0)
valid = [all_codes[i] for i in np.argsort(-n_pos, kind="stable") if 0 < n_pos[i] < len(y_true)]  # most test notes first
if not valid:
    st.info("No code has both positive and negative test notes.")
    st.stop()
c1, c2 = st.columns([3, 2])
code = c1.selectbox("Code", valid, key="perf_code", format_func=lambda c: f"{c} — {descs.get(c, '')}")
kind = c2.radio("Curve", ["ROC", "Precision-recall"], horizontal=True, key="perf_curve")
k = all_codes.index(code)
yk, sk = y_true[:, k], scores[:, k]
if kind == "ROC":
    fpr, tpr, _ = roc_curve(yk, sk)
    df = pd.DataFrame({"x": fpr, "y": tpr})
    xt, yt, area = "False positive rate", "True positive rate", f"AUC {sk_auc(fpr, tpr):.3f}"
    diag = alt.Chart(pd.DataFrame({"x": [0, 1], "y": [0, 1]})).mark_line(strokeDash=[4, 4],
                                                                         color="gray").encode(x="x:Q", y="y:Q")
else:
    prec, rec, _ = precision_recall_curve(yk, sk)
    df = pd.DataFrame({"x": rec, "y": prec})
    xt, yt, area = "Recall", "Precision", f"PR AUC {sk_auc(rec, prec):.3f}"
    diag = None
line = alt.Chart(df).mark_line(interpolate="step-after" if kind != "ROC" else "linear").encode(
    x=alt.X("x:Q", title=xt, scale=alt.Scale(domain=[0, 1])), y=alt.Y("y:Q", title=yt, scale=alt.Scale(domain=[0, 1]))
)
chart = (line + diag) if diag is not None else line
st.altair_chart(chart.properties(height=320, title=f"{code}: {area} · {int(yk.sum())} positive test notes"),
                width="stretch")
