"""clinicode app entry: page config, the run picker in the sidebar, and navigation over app_pages/.

Pages load the model through `state.load_predictor` (torch only then); notes stay in memory, never on disk or logs."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # `streamlit run` adds this folder; AppTest does not
    sys.path.insert(0, str(_HERE))

import state  # noqa: E402

st.set_page_config(page_title="clinicode", page_icon=":material/medical_information:", layout="wide")

root = state.runs_root()
runs = state.list_runs(root)
if not runs:
    st.title("clinicode")
    st.info(
        f"No trained run found in `{root}` (a run is a folder holding `checkpoint/manifest.json`).\n\n"
        "Make a demo run with `make demo` (synthetic data, trains on CPU in a few minutes), or train one with "
        f"`clinicode train --mimic-dir MIMIC_DIR --out {root}/NAME`, then reload this page. "
        f"Set `{state.RUNS_ENV}` to use another runs folder."
    )
    st.stop()

problems = {name: state.run_problem(root / name) for name in runs}
with st.sidebar:
    st.markdown("### Model")
    name = st.selectbox("Run", runs, key="run_name", help=f"Run folders under `{root}` holding a checkpoint.",
                        format_func=lambda n: f"{n} (damaged)" if problems.get(n) else n)
    run_dir = state.resolve_run(root, name)
    if run_dir is None:  # vanished or escaped between listing and picking
        st.error(f"Run {name!r} is no longer a valid run folder under `{root}`; pick another.")
        st.stop()
    st.session_state[state.RUN_KEY] = str(run_dir)
    st.caption(f"`{root}/{name}`")
    damaged = sorted(n for n, p in problems.items() if p)
    if damaged:
        st.caption(f"{len(damaged)} damaged run(s): {', '.join(damaged)}")

if problems.get(name):
    st.title("clinicode")
    st.error(f"Run **{name}** is damaged and cannot be used: {problems[name]}")
    st.caption("Restore the run folder from a copy or train it again; pick another run in the sidebar meanwhile.")
    st.stop()

pages = [
    st.Page("app_pages/code_note.py", title="Code a note", icon=":material/edit_note:", default=True),
    st.Page("app_pages/performance.py", title="Model performance", icon=":material/monitoring:"),
    st.Page("app_pages/embeddings.py", title="Label embeddings", icon=":material/scatter_plot:"),
    st.Page("app_pages/batch.py", title="Batch scoring", icon=":material/upload_file:"),
    st.Page("app_pages/review.py", title="Review queue", icon=":material/fact_check:"),
    st.Page("app_pages/about_model.py", title="Model card", icon=":material/badge:"),
]
st.navigation(pages).run()
