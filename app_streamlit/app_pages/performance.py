"""Model performance on the run's test split: headline metrics, per-code bars, F1 vs threshold, ROC/PR."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st
from sklearn.metrics import auc as sk_auc
from sklearn.metrics import precision_recall_curve, roc_curve

import render
import state
from clinicode.metrics import f1_by_threshold

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

# ---------------------------------------------------------------- per-code F1 / AUC with support
per = pd.DataFrame(mt.get("per_code") or [])
if not per.empty:
    st.subheader("Per code")
    sort_by = st.segmented_control(
        "Sort by", ["f1", "auc", "support"], default="f1", key="perf_sort",
        format_func={"f1": "F1", "auc": "AUC", "support": "Support"}.get,
    ) or "f1"
    per["auc"] = pd.to_numeric(per["auc"], errors="coerce")
    order = per.sort_values([sort_by, "code"], ascending=[False, True])["code"].tolist()
    y = alt.Y("code:N", sort=order, title=None, axis=alt.Axis(labelOverlap=False, labelFontSize=10))
    height = max(200, 16 * len(per))
    tip = ["code", "support", alt.Tooltip("precision:Q", format=".3f"), alt.Tooltip("recall:Q", format=".3f"),
           alt.Tooltip("f1:Q", format=".3f"), alt.Tooltip("auc:Q", format=".3f")]
    base = alt.Chart(per).properties(height=height)
    f1_bars = base.mark_bar(color="#4c78a8").properties(width=280).encode(
        y=y, x=alt.X("f1:Q", title="F1", scale=alt.Scale(domain=[0, 1])), tooltip=tip
    )
    auc_bars = base.mark_bar(color="#f58518").properties(width=280).encode(
        y=alt.Y("code:N", sort=order, axis=None), x=alt.X("auc:Q", title="ROC AUC", scale=alt.Scale(domain=[0, 1])), tooltip=tip
    )
    sup_bars = base.mark_bar(color="#9d9d9d").properties(width=180).encode(
        y=alt.Y("code:N", sort=order, axis=None), x=alt.X("support:Q", title="Support (test notes)"), tooltip=tip
    )
    st.altair_chart(alt.hconcat(f1_bars, auc_bars, sup_bars, spacing=10), width="content")
    st.caption(f"F1 at the tuned threshold {tuned:.3f}; AUC is undefined (missing bar) for codes without both classes in test.")

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
curve = f1_by_threshold(y_true, scores, grid)
cdf = pd.DataFrame({"threshold": curve["threshold"], "micro-F1": curve["f1_micro"], "macro-F1": curve["f1_macro"]})
long = cdf.melt("threshold", var_name="metric", value_name="F1")
lines = alt.Chart(long).mark_line().encode(
    x=alt.X("threshold:Q", title="Threshold"), y=alt.Y("F1:Q", scale=alt.Scale(domain=[0, 1])),
    color=alt.Color("metric:N", title=None), tooltip=["metric", alt.Tooltip("threshold:Q", format=".2f"), alt.Tooltip("F1:Q", format=".3f")],
)
rules = alt.Chart(pd.DataFrame({"threshold": [tuned, 0.5], "which": [f"tuned {tuned:.3f}", "0.5"]})).mark_rule(
    strokeDash=[4, 4], color="gray"
).encode(x="threshold:Q", tooltip=["which"])
st.altair_chart((lines + rules).properties(height=300), width="stretch")

st.subheader("One code")
pred = state.current_predictor()
all_codes = list(pred.labels.codes)
valid = [c for i, c in enumerate(all_codes) if 0 < y_true[:, i].sum() < len(y_true)]
if not valid:
    st.info("No code has both positive and negative test notes.")
    st.stop()
descs = dict(zip(pred.labels.codes, pred.labels.descriptions))
c1, c2 = st.columns([3, 2])
code = c1.selectbox("Code", valid, key="perf_code", format_func=lambda c: f"{c} — {descs.get(c, '')}")
kind = c2.radio("Curve", ["ROC", "Precision-recall"], horizontal=True, key="perf_curve")
k = all_codes.index(code)
yk, sk = y_true[:, k], scores[:, k]
if kind == "ROC":
    fpr, tpr, _ = roc_curve(yk, sk)
    df = pd.DataFrame({"x": fpr, "y": tpr})
    xt, yt, area = "False positive rate", "True positive rate", f"AUC {sk_auc(fpr, tpr):.3f}"
    diag = alt.Chart(pd.DataFrame({"x": [0, 1], "y": [0, 1]})).mark_line(strokeDash=[4, 4], color="gray").encode(x="x:Q", y="y:Q")
else:
    prec, rec, _ = precision_recall_curve(yk, sk)
    df = pd.DataFrame({"x": rec, "y": prec})
    xt, yt, area = "Recall", "Precision", f"PR AUC {sk_auc(rec, prec):.3f}"
    diag = None
line = alt.Chart(df).mark_line(interpolate="step-after" if kind != "ROC" else "linear").encode(
    x=alt.X("x:Q", title=xt, scale=alt.Scale(domain=[0, 1])), y=alt.Y("y:Q", title=yt, scale=alt.Scale(domain=[0, 1]))
)
chart = (line + diag) if diag is not None else line
st.altair_chart(chart.properties(height=320, title=f"{code}: {area} · {int(yk.sum())} positive test notes"), width="stretch")
