"""Model card: where the run came from (data, label set), how it was trained, and its test metrics."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

import render
import state

run = state.current_run()
card = state.read_card(str(run))
pred = state.current_predictor()
manifest = card.get("manifest") or {}
data = manifest.get("data") or {}

st.title(f"Model card: {run.name}")
c = st.columns([2, 1, 1, 1])  # room for the model's name ("LEAM + evidence"); the caption below spells it out
c[0].metric("Model", render.model_name(card), border=True)
c[1].metric("Codes", card.get("n_labels", len(pred.labels)), border=True)
c[2].metric("Tuned threshold", f"{float(card['threshold']):.3f}", border=True)
c[3].metric("Max tokens", pred.max_len, border=True)
if render.model_caption(card):
    st.caption(render.model_caption(card))
st.caption(
    f"clinicode {manifest.get('clinicode_version', '?')} · created {manifest.get('created', '?')} · "
    f"best epoch {manifest.get('epoch', '?')} · seed {manifest.get('seed', '?')}"
)

st.subheader("Data")
if data:
    present = state.test_data_dir(run, manifest) is not None
    st.markdown(
        f"Prepared dataset `{data.get('path', '?')}` "
        f"({'still present' if present else 'no longer on disk'}): "
        f"**{data.get('n_train', '?')}** train · **{data.get('n_dev', '?')}** dev · "
        f"**{data.get('n_test', '?')}** test notes"
        + (f" · label set `{data['label_set']}`" if data.get("label_set") else "")
    )
else:
    st.caption("The manifest records no data folder.")

mt = card.get("metrics_test") or {}
st.subheader("Test metrics")
if mt:
    rows = []
    for name, m in ((f"tuned ({float(mt.get('threshold', card['threshold'])):.3f})", mt),
                    ("0.5", mt.get("threshold_0.5") or {})):
        rows.append({"threshold": name, **{k: v for k, v in render.headline_metrics(m).items()}})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                 column_config={k: st.column_config.NumberColumn(format="%.3f") for k, _ in render.HEADLINE})
else:
    st.caption("No test metrics (trained without a test split).")

st.subheader("Rare codes and seeds")
slices = render.slice_table(mt) if mt else None
if slices is not None:
    st.dataframe(slices, hide_index=True, width="stretch",
                 column_config={k: st.column_config.NumberColumn(format="%.3f") for k in ("macro AUC", "macro F1")})
    st.caption("Test metrics by how many training notes a code had. Rare codes are where a model is weakest and "
               "where a coder's completeness is decided; a slice with few codes present in test moves a lot with "
               "single notes.")
elif mt:
    st.caption("This run did not record its codes' training counts (trained with an older clinicode).")
root = state.runs_root()
siblings = state.seed_siblings(str(root), str(run), tuple(state.list_runs(root)))
if len(siblings) > 1:
    spread = render.seed_spread([s["metrics"] for s in siblings])
    st.dataframe(spread, hide_index=True, width="stretch",
                 column_config={k: st.column_config.NumberColumn(format="%.4f")
                                for k in ("mean", "sd", "worst", "best", "worst below mean")})
    st.caption(f"{len(siblings)} runs in the runs folder were trained like this one, on the same data, with seeds "
               f"{', '.join(str(s['seed']) for s in siblings)}: what a retraining can move (test metrics).")
else:
    st.caption("No other seed of this training is in the runs folder. Train the same command with other `--seed` "
               "values into sibling run folders to see how much a retraining moves these numbers "
               "(docs/training.md, \"Seeds\").")

hist = state.read_history(str(run))
if not hist.empty and "epoch" in hist:
    st.subheader("Training history")
    cols = [c for c in ("train_loss", "dev_f1_micro", "dev_f1_macro", "dev_auc_macro", "dev_prec_at_5") if c in hist]
    long = hist.melt("epoch", value_vars=cols, var_name="series", value_name="value")
    chart = alt.Chart(long).mark_line(point=True).encode(
        x=alt.X("epoch:Q", axis=alt.Axis(tickMinStep=1)), y="value:Q", color=alt.Color("series:N", title=None),
        tooltip=["epoch", "series", alt.Tooltip("value:Q", format=".4f")],
    ).properties(height=260)
    st.altair_chart(chart, width="stretch")

left, right = st.columns(2)
with left:
    st.subheader("Training settings")
    settings = render.flat_items({"train": card.get("train_config") or {}, "model": card.get("model_config") or {}})
    st.dataframe(pd.DataFrame(settings, columns=["setting", "value"]), hide_index=True, width="stretch", height=420)
with right:
    st.subheader("Label set")
    st.caption(f"Code system: {pred.code_system.name}")
    per = {r["code"]: r for r in mt.get("per_code") or []}
    labels = pd.DataFrame({
        "code": list(pred.labels.codes),
        "description": list(pred.labels.descriptions),
        "test support": [per.get(c, {}).get("support") for c in pred.labels.codes],
        "test F1": [per.get(c, {}).get("f1") for c in pred.labels.codes],
    })
    st.dataframe(labels, hide_index=True, width="stretch", height=420,
                 column_config={"test F1": st.column_config.NumberColumn(format="%.3f")})
