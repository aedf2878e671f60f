"""Label embeddings (LEAM paper, Fig. 3): code vectors against mean note vectors, and a joint 2-D PCA map."""

from __future__ import annotations

from collections import Counter

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st
from sklearn.decomposition import PCA

import state

N_COLOURED = 10  # codes with their own colour in the map; the rest are grey
HEAT_MAX = 60    # codes in the cosine heatmap (the ones with the most test notes)

run = state.current_run()
pred = state.current_predictor()
card = state.read_card(str(run))

st.title("Label embeddings")
if not pred.model_kind.abilities.embed:
    st.info(f"Run **{run.name}** is a {pred.kind} model. Label embeddings exist only for LEAM runs.")
    st.stop()
data_dir = state.test_data_dir(run, card.get("manifest") or {})
if data_dir is None:
    st.info(
        "This page needs the run's test notes, but its prepared-data folder "
        f"(`{(card.get('manifest') or {}).get('data', {}).get('path', '?')}`) no longer exists."
    )
    st.stop()

_, problem = state.test_notes(data_dir)
if problem:
    st.warning(f"This page needs the run's test notes, but {problem}.")
    st.stop()
emb = state.test_embeddings(str(run), str(data_dir))
Z, C, labels = emb["Z"], emb["C"], emb["labels"]      # [N, P], [K, P], N gold-code lists
codes = list(pred.labels.codes)
descs = dict(zip(codes, pred.labels.descriptions))
st.caption(
    f"{len(Z)} test notes" + (f" (a fixed sample of {emb['n_total']})" if emb["n_total"] > len(Z) else "")
    + f", {len(codes)} codes. Note vectors are LEAM's attended document vectors z; code vectors are the learned C."
)

# ---------------------------------------------------------------- cosine heatmap
Y = pred.labels.multi_hot(labels)                      # [N, K]
has = Y.sum(axis=0) > 0                                # codes with at least one test note
means = (Y[:, has].T @ Z) / Y[:, has].sum(axis=0)[:, None]  # [K', P] mean note vector per code
def _unit(a: np.ndarray) -> np.ndarray:
    return a / (np.linalg.norm(a, axis=1, keepdims=True) + 1e-8)
sim = _unit(means) @ _unit(C).T                        # [K', K] cosine
row_codes = [c for c, h in zip(codes, has) if h]
diag_hits = sum(int(np.argmax(sim[i]) == codes.index(c)) for i, c in enumerate(row_codes))

st.subheader("Cosine similarity: mean note vector × code vector")
st.caption(
    f"Row = the mean vector of test notes coded with that code; column = the code's embedding. "
    f"A strong diagonal means notes sit near their codes: for {diag_hits} of {len(row_codes)} codes the most similar "
    "code embedding is the code itself."
)
# Beyond HEAT_MAX codes a cell per code pair is unreadable (and thousands of codes make millions of cells): the
# heatmap shows the HEAT_MAX codes with the most test notes; the diagonal count above covers every code.
shown = codes
if len(codes) > HEAT_MAX:
    keep = set(np.argsort(-Y.sum(axis=0), kind="stable")[:HEAT_MAX].tolist())
    shown = [c for k, c in enumerate(codes) if k in keep]
    st.caption(f"The map shows the {HEAT_MAX} codes with the most test notes, of {len(codes):,}.")
on_map = set(shown)
cols = [(j, c) for j, c in enumerate(codes) if c in on_map]
heat = pd.DataFrame(
    [(r, c, float(sim[i, j])) for i, r in enumerate(row_codes) if r in on_map for j, c in cols],
    columns=["notes_with", "code_embedding", "cosine"],
)
codes_all, codes = codes, shown
size = max(300, min(720, 13 * len(codes)))
hm = alt.Chart(heat).mark_rect().encode(
    x=alt.X("code_embedding:N", sort=codes, title="Code embedding", axis=alt.Axis(labelFontSize=8, labelAngle=-90,
                                                                                  labelOverlap=False)),
    y=alt.Y("notes_with:N", sort=codes, title="Mean of notes with code", axis=alt.Axis(labelFontSize=8,
                                                                                       labelOverlap=False)),
    color=alt.Color("cosine:Q", scale=alt.Scale(scheme="redblue", reverse=True, domainMid=0), title="cosine"),
    tooltip=["notes_with", "code_embedding", alt.Tooltip("cosine:Q", format=".3f")],
).properties(width=size, height=size * heat["notes_with"].nunique() / max(1, len(codes)))
st.altair_chart(hm, width="content")
codes = codes_all

# ---------------------------------------------------------------- joint PCA map
st.subheader("2-D PCA of note and code embeddings")
freq = Counter(c for ls in labels for c in ls if c in descs)
top = [c for c, _ in freq.most_common(N_COLOURED)]
def _primary(ls: list[str]) -> str:
    known = [c for c in ls if c in descs]
    return max(known, key=lambda c: (freq[c], -codes.index(c))) if known else "none"
primary = [_primary(ls) for ls in labels]
# Unit vectors, as in the cosine heatmap: the attended z are averages of word vectors and much shorter than
# the code vectors, so without normalising the map shows vector length rather than direction.
XY = PCA(n_components=2, random_state=0).fit_transform(np.vstack([_unit(Z), _unit(C)]))  # [N + K, 2]
notes = pd.DataFrame({
    "pc1": XY[: len(Z), 0], "pc2": XY[: len(Z), 1], "code": [c if c in top else "other" for c in primary],
    "primary": primary, "kind": "note",
})
code_pts = pd.DataFrame({
    "pc1": XY[len(Z):, 0], "pc2": XY[len(Z):, 1], "code": [c if c in top else "other" for c in codes],
    "primary": codes, "kind": "code",
})
code_pts["description"] = [descs.get(c, "") for c in codes]
domain = top + ["other"]
TABLEAU10 = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
             "#79706e"]
colour = alt.Color(
    "code:N", scale=alt.Scale(domain=domain, range=TABLEAU10[: len(top)] + ["#c8c8c8"]),
    title="Code (notes: most frequent gold code)",
)
pts = alt.Chart(notes).mark_circle(size=28, opacity=0.55).encode(
    x=alt.X("pc1:Q", title="PC 1"), y=alt.Y("pc2:Q", title="PC 2"), color=colour, tooltip=["primary", "kind"],
)
cpts = alt.Chart(code_pts).mark_point(shape="diamond", size=160, filled=True, stroke="black", strokeWidth=0.8).encode(
    x="pc1:Q", y="pc2:Q", color=colour, tooltip=["primary", "description", "kind"],
)
text = alt.Chart(code_pts[code_pts["code"] != "other"]).mark_text(dx=9, dy=-7, fontSize=11, fontWeight="bold").encode(
    x="pc1:Q", y="pc2:Q", text="primary:N",
)
st.altair_chart((pts + cpts + text).properties(height=520).interactive(), width="stretch")
st.caption(
    f"Dots: test notes coloured by their most frequent gold code (the {len(top)} most frequent codes have colours, "
    "others are grey). Diamonds: code embeddings, labelled for the coloured codes. All vectors are scaled to unit "
    "length before the PCA, so the map shows directions (what the cosine compares)."
)
