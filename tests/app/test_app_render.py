"""Pure app helpers (app_streamlit/render.py, batch_files.py, state.list_runs): escaping, highlights, batch I/O."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from clinicode.predict import CodeScore, Prediction, Span

APP_DIR = Path(__file__).resolve().parents[2] / "app_streamlit"
sys.path.insert(0, str(APP_DIR))

import batch_files  # noqa: E402
import render  # noqa: E402
import state  # noqa: E402


# ------------------------------------------------------------------------------------------ highlighting
def test_note_text_is_escaped_marked_or_not():
    note = 'Pt <script>alert("x")</script> & <b>CHF</b>'
    a = note.index("<script>")
    html = render.highlight_html(note, [(a, a + 8, 1.0)])
    assert "<script" not in html and "<b>" not in html
    assert "&lt;script&gt;" in html and "&lt;b&gt;CHF&lt;/b&gt;" in html and "&amp;" in html
    assert render.marked_texts(html) == ["<script>"]


def test_marked_substring_equals_span_exactly():
    note = "History of atrial fibrillation,\nhypertension; diabetes."
    spans = [(note.index("atrial"), note.index("atrial") + len("atrial fibrillation"), 0.5),
             (note.index("diabetes"), note.index("diabetes") + len("diabetes"), 1.0)]
    html = render.highlight_html(note, spans)
    assert render.marked_texts(html) == [note[a:b] for a, b, _ in spans]
    # opacity follows the weight: the strongest span is fully opaque, the other at half
    assert "rgba(255, 179, 0, 1.00)" in html and "rgba(255, 179, 0, 0.50)" in html
    # the unmarked text is all there, in order, line break included
    plain = html.replace("</mark>", "")
    import re
    assert re.sub(r"<[^>]+>", "", plain).replace("&#x27;", "'") == note


def test_overlapping_spans_split_at_boundaries_and_take_max_weight():
    note = "0123456789"
    html = render.highlight_html(note, [(2, 6, 0.5), (4, 8, 1.0)])
    assert render.marked_texts(html) == ["23", "45", "67"]
    assert 'data-start="4" data-end="6"' in html
    # the overlap carries the larger weight (opacity 1.00), the left-only piece 0.50
    pieces = html.split("<mark")[1:]
    assert "0.50)" in pieces[0] and "1.00)" in pieces[1] and "1.00)" in pieces[2]


def test_adjacent_spans_stay_separate_marks():
    note = "abcdef"
    html = render.highlight_html(note, [(0, 3, 1.0), (3, 6, 1.0)])
    assert render.marked_texts(html) == ["abc", "def"]


def test_bad_spans_are_clipped_or_ignored_and_objects_accepted():
    note = "short note"
    spans = [SimpleNamespace(start=6, end=99, weight=1.0), {"start": 3, "end": 3, "weight": 1.0}, (0, 5, 0.0)]
    html = render.highlight_html(note, spans)
    assert render.marked_texts(html) == ["note"]
    assert render.marked_texts(render.highlight_html(note, [])) == []


def test_min_alpha_hides_faint_pieces():
    note = "aa bb cc"
    html = render.highlight_html(note, [(0, 2, 1.0), (3, 5, 0.01)], min_alpha=0.05)
    assert render.marked_texts(html) == ["aa"]


# ------------------------------------------------------------------------------------------ code table
SCORES = {"401.9": 0.9, "428.0": 0.6, "427.31": 0.3, "250.00": 0.05, "584.9": 0.01}
DESCS = {c: f"desc {c}" for c in SCORES}


def test_code_table_tp_fp_fn_including_fn_below_threshold_and_outside_top_k():
    t = render.code_table(SCORES, DESCS, 0.5, gold=["401.9", "427.31", "584.9"], top_k=2)
    assert t["code"].tolist() == ["401.9", "428.0", "427.31", "584.9"]   # top-2 + gold codes, by probability
    assert dict(zip(t["code"], t["outcome"])) == {"401.9": "TP", "428.0": "FP", "427.31": "FN", "584.9": "FN"}
    assert t["above_threshold"].tolist() == [True, True, False, False]
    assert render.outcome_counts(t) == {"TP": 1, "FP": 1, "FN": 2}


def test_code_table_threshold_changes_predicted_set_and_no_gold_columns_without_gold():
    lo = render.code_table(SCORES, DESCS, 0.04, top_k=0)
    hi = render.code_table(SCORES, DESCS, 0.7, top_k=0)
    assert lo["code"].tolist() == ["401.9", "428.0", "427.31", "250.00"]
    assert hi["code"].tolist() == ["401.9"]
    assert "outcome" not in lo.columns and render.outcome_counts(lo) == {}
    # one rule everywhere (clinicode.metrics.predicted_indices): a score equal to the threshold is not predicted,
    # as in CAML's metrics and Predictor.predict
    assert render.code_table(SCORES, DESCS, 0.6, top_k=0)["code"].tolist() == ["401.9"]
    assert render.code_table(SCORES, DESCS, 0.5999, top_k=0)["code"].tolist() == ["401.9", "428.0"]
    # a single-label model predicts its top code whatever the threshold
    one = render.code_table(SCORES, DESCS, 0.0, top_k=3, single_label=True)
    assert one.loc[one["above_threshold"], "code"].tolist() == ["401.9"] and len(one) == 3


def test_every_app_table_breaks_a_single_label_tie_like_predict():
    """Two codes share the top score: the code table, the search and the export all predict the earlier one in label
    order (clinicode.metrics.predicted_codes), not the lower or higher code string."""
    tied = {"V45.81": 0.4, "038.9": 0.4, "401.9": 0.2}                     # label order: V45.81 before 038.9
    descs = {c: f"desc {c}" for c in tied}
    table = render.code_table(tied, descs, 0.5, top_k=3, single_label=True)
    assert table.loc[table["above_threshold"], "code"].tolist() == ["V45.81"]
    assert table["code"].tolist() == ["V45.81", "038.9", "401.9"]
    hits, _ = render.search_codes(tied, descs, "desc", 0.5, single_label=True)
    assert hits.loc[hits["above_threshold"], "code"].tolist() == ["V45.81"]
    only_other, _ = render.search_codes(tied, descs, "038", 0.5, single_label=True)
    assert only_other["code"].tolist() == ["038.9"] and not only_other["above_threshold"].any()
    export = render.prediction_record(Prediction("n", scores=tied, n_tokens=3), threshold=0.5, run="r",
                                      single_label=True)
    assert [p["code"] for p in export["predicted"]] == ["V45.81"]


@pytest.mark.parametrize("pred,gold,want", [(True, True, "TP"), (True, False, "FP"), (False, True, "FN"),
                                            (False, False, "")])
def test_outcome(pred, gold, want):
    assert render.outcome(pred, gold) == want


def _fake_prediction(text_id="n1"):
    cs = [CodeScore("401.9", "HTN", 0.9), CodeScore("428.0", "CHF", 0.4)]  # as predicted at a threshold of 0.3
    return Prediction(
        text_id, predicted=cs, scores={"401.9": 0.9, "428.0": 0.4, "584.9": 0.1}, truncated=False, n_tokens=12,
        evidence=[Span(0, 5, 0.3)], code_phrases={"401.9": [Span(0, 5, 0.8)], "428.0": [Span(6, 9, 0.2)]},
    )


def test_prediction_record_json_follows_threshold_and_holds_no_text():
    rec = render.prediction_record(_fake_prediction(), threshold=0.5, run="demo", gold=["401.9"])
    assert [p["code"] for p in rec["predicted"]] == ["401.9"]
    assert set(rec["evidence"]["codes"]) == {"401.9"}
    assert rec["gold"] == ["401.9"] and rec["threshold"] == 0.5 and rec["run"] == "demo"
    back = json.loads(render.json_bytes(rec))
    assert back == rec and "text" not in back


def test_codes_from_the_terminology_are_marked_in_the_tables_and_the_export_at_any_threshold():
    """A code no training note carried (`Predictor.terminology_codes`) is marked in the code table, a search's hits,
    and the JSON export, also when the app's threshold predicts it and the record, scored at 1.0, did not."""
    from clinicode.predict import TERMINOLOGY

    assert render.TERMINOLOGY == TERMINOLOGY
    scores = {"401.9": 0.9, "428.0": 0.4, "584.9": 0.1}
    table = render.code_table(scores, {}, 0.3, terminology=("584.9", "428.0"))
    assert dict(zip(table["code"], table["source"])) == {"401.9": "", "428.0": "terminology", "584.9": "terminology"}
    assert "source" not in render.code_table(scores, {}, 0.3).columns   # a model without any: no column
    hits, _ = render.search_codes(scores, {"428.0": "Congestive heart failure"}, "heart", 0.3, terminology={"428.0"})
    assert hits["source"].tolist() == ["terminology"]
    unmarked = Prediction("n1", predicted=[], scores=scores)              # as the app scores: at a threshold of 1.0
    rec = render.prediction_record(unmarked, threshold=0.3, run="demo", terminology=("428.0",))
    assert [(p["code"], p.get("source")) for p in rec["predicted"]] == [("401.9", None), ("428.0", "terminology")]


# ------------------------------------------------------------------------------------------ batch files
def test_parse_csv_with_bad_rows():
    data = b'id,text\na1,"Chest pain, <b>CHF</b>"\na2,\n,"no id here"\n'
    parsed = batch_files.parse_batch(data, "notes.csv")
    assert parsed.error is None
    rows = parsed.rows
    assert rows["id"].tolist() == ["a1", "a2", "row-3"]
    assert rows["text"][0] == "Chest pain, <b>CHF</b>"
    assert rows["error"][0] is None and "empty text" in rows["error"][1] and rows["error"][2] is None


def test_parse_jsonl_with_bad_lines():
    lines = [json.dumps({"id": "x1", "text": "Hypertension"}), "{not json", json.dumps([1, 2]),
             json.dumps({"id": 7, "text": 5}),
             "", json.dumps({"id": "x5"})]
    parsed = batch_files.parse_batch("\n".join(lines).encode(), "notes.jsonl")
    r = parsed.rows
    assert r["id"].tolist() == ["x1", "line-2", "line-3", "7", "x5"]
    errs = r["error"].tolist()
    assert errs[0] is None and "not valid JSON" in errs[1] and "JSON object" in errs[2]
    assert errs[3] == "note '7': 'text' is int, expected a string"
    assert errs[4] == "record 'x5' (line 6): no 'text' field"


def test_upload_and_cli_read_notes_the_same_way(tmp_path):
    """The app's upload and `clinicode predict --input` go through one reader: same ids, texts and errors."""
    from clinicode.records import read_records

    data = (json.dumps({"id": "a", "text": "chf"}) + "\n{bad\n" + json.dumps({"id": None,
                                                                              "text": "  "}) + "\n").encode()
    (tmp_path / "n.jsonl").write_bytes(data)
    via_app = batch_files.parse_batch(data, "n.jsonl").rows.to_dict("records")
    via_cli = [{"id": r.id, "text": r.text, "error": r.error} for r in read_records(tmp_path / "n.jsonl")]
    assert via_app == via_cli and [r["id"] for r in via_cli] == ["a", "line-2", "line-3"]
    parquet = tmp_path / "n.parquet"
    pd.DataFrame({"id": ["p1"], "text": ["sepsis"]}).to_parquet(parquet)
    assert batch_files.parse_batch(parquet.read_bytes(), "n.parquet").rows["text"].tolist() == ["sepsis"]


@pytest.mark.parametrize(
    "data,name,msg",
    [(b"a,b\n1,2\n", "x.csv", "no 'text' column"), (b"\xff\xfe\x00bad", "x.csv", "not UTF-8"),
     (b"id,text\n", "x.xlsx", "unknown file type"),
     (b"x" * 2048, "x.csv", "over the")],
)
def test_parse_file_level_errors(data, name, msg):
    parsed = batch_files.parse_batch(data, name, max_bytes=1024)
    assert parsed.error is not None and msg in parsed.error and parsed.rows.empty


class _FakePredictor:
    """Scores by keyword through the `prepare`/`finish` halves `score_records` calls; a poisoned note raises."""

    def prepare(self, texts, *, ids, explain):
        return list(zip(ids, texts))

    def finish(self, prepared, *, top_k, threshold, explain, attention):
        from clinicode.predict import CodeScore, Prediction

        if any("POISON" in t for _, t in prepared):
            raise RuntimeError("boom")
        out = []
        for i, t in prepared:
            s = 0.9 if "hypertension" in t.lower() else 0.1
            out.append(Prediction(i, predicted=[CodeScore("401.9", "HTN", s)] if s > threshold else [],
                                  scores={"401.9": s}))
        return out


def test_score_batch_writes_the_clis_records_keeps_errors_and_reports_progress():
    from clinicode.predict_io import CSV_HEADER, record_line

    rows = pd.DataFrame([
        {"id": "a", "text": "Hypertension", "error": None},
        {"id": "b", "text": None, "error": "record 'b': missing text"},
        {"id": "c", "text": "fracture", "error": None},
        {"id": "d", "text": "POISON", "error": None},
    ])
    seen = []
    recs = batch_files.score_batch(_FakePredictor(), rows, threshold=0.5, chunk=3, on_progress=lambda d,
                              n: seen.append((d, n)))
    assert [r["id"] for r in recs] == ["a", "b", "c", "d"] and seen == [(3, 4), (4, 4)]
    assert recs[0] == {"id": "a", "predicted": [{"code": "401.9", "description": "HTN", "score": 0.9}],
                       "scores": {"401.9": 0.9},
                       "truncated": False}                  # Prediction.to_dict(), the CLI's record
    assert recs[1] == {"id": "b", "error": "record 'b': missing text"} and recs[2]["predicted"] == []
    assert recs[3] == {"id": "d", "error": "could not score (RuntimeError)"}
    table = batch_files.batch_table(recs)
    assert table["codes"].tolist() == ["401.9", "", "",
                                       ""] and table["top_code"].isna().tolist() == [False, True, False, True]
    assert table["error"][0] is None and "missing text" in table["error"][1] and table["error"][2] is None
    jl = batch_files.batch_bytes(recs, "jsonl").decode()
    assert jl == "".join(record_line(r) for r in recs)
    csv_back = pd.read_csv(pd.io.common.BytesIO(batch_files.batch_bytes(recs, "csv")), dtype=str, keep_default_na=False)
    assert tuple(csv_back.columns) == CSV_HEADER and csv_back["id"].tolist() == ["a", "b", "c", "d"]
    assert csv_back["predicted"][0] == "401.9" and csv_back["error"][1].startswith("record 'b'")
    marked = {"id": "e", "scores": {"C6": 0.8}, "truncated": False,
              "predicted": [{"code": "C6", "description": "", "score": 0.8, "source": "terminology"}]}
    assert batch_files.batch_table([*recs, marked])["from_terminology"].tolist() == ["", "", "", "", "C6"]


def test_headline_metrics_handles_missing_and_nan():
    h = render.headline_metrics({"auc_macro": 0.91, "f1_micro": float("nan")})
    assert h["Macro AUC"] == 0.91 and h["Micro F1"] is None and h["P@8"] is None


# ------------------------------------------------------------------------------------------ run discovery
def _fake_run(folder: Path) -> Path:
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "checkpoint" / "manifest.json").write_text("{}")
    return folder


def test_list_runs_only_valid_runs_inside_root(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    _fake_run(root / "b_run")
    _fake_run(root / "a_run")
    (root / "not_a_run").mkdir()
    (root / "file.txt").write_text("x")
    outside = _fake_run(tmp_path / "elsewhere")
    os.symlink(outside, root / "escape", target_is_directory=True)              # a symlinked run leaving the root
    half = root / "half"
    half.mkdir()
    os.symlink(outside / "checkpoint", half / "checkpoint", target_is_directory=True)  # checkpoint escaping
    os.symlink(root / "a_run", root / "alias", target_is_directory=True)          # a symlink staying inside is fine
    assert state.list_runs(root) == ["a_run", "alias", "b_run"]
    assert state.resolve_run(root, "escape") is None and state.resolve_run(root, "../elsewhere") is None
    assert state.resolve_run(root, "a_run") == (root / "a_run").resolve()
    assert state.list_runs(tmp_path / "missing") == []


def test_range_scale_spreads_near_uniform_weights_and_rejects_unknown_scale():
    note = "aa bb cc"
    spans = [(0, 2, 0.010), (3, 5, 0.011), (6, 8, 0.012)]
    html = render.highlight_html(note, spans, scale="range", min_alpha=0.1)
    assert render.marked_texts(html) == ["bb", "cc"]           # the lowest weight maps to 0 and is left plain
    assert "0.50)" in html and "1.00)" in html
    with pytest.raises(ValueError, match="scale"):
        render.highlight_html(note, spans, scale="log")


def test_style_outcomes_colours_only_outcome_cells():
    t = render.code_table(SCORES, DESCS, 0.5, gold=["401.9", "427.31"], top_k=0)
    styled = render.style_outcomes(t).to_html()
    assert render.OUTCOME_COLOURS["TP"] in styled and render.OUTCOME_COLOURS["FN"] in styled
    plain = render.code_table(SCORES, DESCS, 0.5, top_k=0)
    assert render.style_outcomes(plain) is plain


# ------------------------------------------------------------------------------------------ many codes
def test_search_codes_by_code_prefix_or_every_title_word():
    scores = {"428.0": 0.9, "428.1": 0.2, "402.91": 0.6, "I50.9": 0.7, "96.04": 0.1}
    descs = {"428.0": "Congestive heart failure, unspecified", "428.1": "Left heart failure",
             "402.91": "Hypertensive heart disease with heart failure", "I50.9": "Heart failure, unspecified",
             "96.04": "Insertion of endotracheal tube"}
    table, n = render.search_codes(scores, descs, "heart FAIL", 0.5, gold=["428.1"])
    assert n == 4 and table["code"].tolist() == ["428.0", "I50.9", "402.91", "428.1"]   # most probable first
    assert table["outcome"].tolist() == ["FP", "FP", "FP", "FN"]
    assert render.search_codes(scores, descs, "428", 0.5)[0]["code"].tolist() == ["428.0", "428.1"]
    assert render.search_codes(scores, descs, "9604", 0.5)[0]["code"].tolist() == ["96.04"]  # the dot is optional
    limited, n_all = render.search_codes(scores, descs, "heart", 0.5, limit=2)
    assert n_all == 4 and len(limited) == 2
    assert render.search_codes(scores, descs, "   ", 0.5)[1] == 0


def test_frequency_bands_cover_every_count():
    assert [render.frequency_band(n) for n in (0, 1, 9, 10, 49, 50, 99, 100, 499, 500, 10**6)] == [
        "never in training", "1-9", "1-9", "10-49", "10-49", "50-99", "50-99", "100-499", "100-499", "500+", "500+"]


def _per_code(n=120):
    import numpy as np

    rng = np.random.default_rng(0)
    codes = ([f"{400 + k // 10}.{k % 10}" for k in range(n // 2)]
             + [f"I{10 + k:02d}.{k % 10}" for k in range(n - n // 2)])
    return [{"code": c, "support": int(rng.integers(0, 30)), "precision": float(rng.random()),
             "recall": float(rng.random()),
             "f1": float(rng.random()), "auc": None if k % 7 == 0 else float(rng.random()),
             "train_count": int(rng.integers(0, 900))}
            for k, c in enumerate(codes)]


def test_per_code_frame_groups_by_band_and_chapter():
    rows = _per_code()
    descs = {r["code"]: f"title {r['code']}" for r in rows}
    df = render.per_code_frame(rows, descs)
    assert df.attrs["band_source"] == "training notes"
    assert set(df["chapter"]) == {"ICD-9 dx: Circulatory system", "ICD-10-CM: Circulatory system"}
    bands = render.group_summary(df, "band")
    assert bands["codes"].sum() == len(rows)
    order = [name for _, name in render.FREQUENCY_BANDS]
    assert bands["band"].tolist() == [b for b in order if b in set(df["band"])]   # in band order, not alphabetical
    one = bands.iloc[0]
    members = df[df["band"] == one["band"]]
    assert one["mean_f1"] == pytest.approx(members["f1"].mean()) and one["test_notes"] == members["support"].sum()
    assert one["mean_auc"] == pytest.approx(members["auc"].mean())              # codes without an AUC are left out
    no_train = render.per_code_frame([{k: v for k, v in r.items() if k != "train_count"} for r in rows], descs)
    assert no_train.attrs["band_source"] == "test notes"


def test_per_code_frame_groups_by_the_checkpoints_code_system():
    """V58.61 is an ICD-9 V code and an ICD-10-CM external cause: the code system, not the shape, picks its group."""
    from clinicode.codes.systems import ICD10, MESH_OMIM

    rows = [{"code": c, "f1": 0.5, "auc": 0.9, "support": 3, "train_count": 4} for c in ("V58.61", "J18.9")]
    assert render.per_code_frame(rows, {})["chapter"][0].startswith("ICD-9 dx: Supplementary V codes")
    assert list(render.per_code_frame(rows, {}, group=ICD10.group)["chapter"]) == [
        "ICD-10-CM: External causes of morbidity", "ICD-10-CM: Respiratory system"]
    mesh = [{**rows[0], "code": "D009369"}]
    assert list(render.per_code_frame(mesh, {}, group=MESH_OMIM.group)["chapter"]) == ["MeSH: descriptors"]


def test_best_and_worst_codes_need_support_and_the_table_filters():
    df = render.per_code_frame(_per_code(), {})
    best, worst = render.rank_codes(df, best=True, n=5,
                                    min_support=10), render.rank_codes(df, best=False, n=5, min_support=10)
    assert (best["support"] >= 10).all() and (worst["support"] >= 10).all()
    assert best["f1"].is_monotonic_decreasing and worst["f1"].is_monotonic_increasing
    assert best["f1"].min() >= df[df["support"] >= 10]["f1"].nlargest(5).min()
    assert set(render.filter_codes(df, "40")["code"]) == {c for c in df["code"] if c.startswith("40")}
    assert set(render.filter_codes(df, "icd-10-cm circulatory")["code"]) == {c for c in df["code"] if c.startswith("I")}
    assert len(render.filter_codes(df, "")) == len(df)


def test_seed_spread_and_slice_table():
    runs = [{"f1_micro": 0.5, "auc_macro": 0.9, "slices": {"rare": {"auc_macro": 0.8, "f1_macro": None}}},
            {"f1_micro": 0.6, "auc_macro": float("nan"), "slices": {"rare": {"auc_macro": 0.7, "f1_macro": None}}},
            {"f1_micro": 0.7}]
    df = render.seed_spread(runs).set_index("metric")
    assert df.loc["Micro F1", "runs"] == 3 and df.loc["Micro F1", "worst"] == 0.5
    assert df.loc["Micro F1", "mean"] == pytest.approx(0.6) and df.loc["Micro F1", "sd"] == pytest.approx(0.1)
    assert df.loc["Micro F1", "worst below mean"] == pytest.approx(0.1)
    assert df.loc["Macro AUC", "runs"] == 1 and pd.isna(df.loc["Macro AUC", "sd"])     # NaN is not a value
    assert df.loc["Rare codes: macro AUC", "worst"] == 0.7
    assert "Rare codes: macro F1" not in df.index and "P@5" not in df.index           # no run has them
    assert render.slice_table({"f1_micro": 0.5}) is None
    t = render.slice_table({"slices": {"rare_below": 20, "rare": {"n_codes": 3, "n_present": 2, "auc_macro": 0.8,
                                                                  "f1_macro": 0.4},
                                       "frequent": {"n_codes": 1, "n_present": 1, "auc_macro": 0.9, "f1_macro": 0.7}}})
    assert list(t["codes"]) == ["rare (< 20 training notes)", "frequent (>= 20)"] and list(t["macro F1"]) == [0.4, 0.7]


def test_the_model_card_names_which_model_a_run_is():
    default = {"model": "leam", "model_config": {"code_evidence": True, "window_nonneg": True}}
    paper = {"model": "leam", "model_config": {"code_evidence": False, "window_nonneg": False}}
    variant = {"model": "leam", "model_config": {"code_evidence": False, "window_nonneg": True}}
    assert [render.model_name(c) for c in (default, paper, variant, {"model": "tfidf-lr"})] == \
        ["LEAM + evidence", "LEAM (paper)", "LEAM (variant)", "tfidf-lr"]
    assert "Wang et al." in render.model_caption(paper) and "Not the paper's" not in render.model_caption(paper)
    caption = render.model_caption(default)
    assert caption.startswith("Not the paper's LEAM") and "`train --paper`" in caption
    assert "best phrase match" not in render.model_caption(variant) and "non-negative" in render.model_caption(variant)


def test_the_model_card_asks_the_one_paper_model_rule(monkeypatch):
    """The app names a run "LEAM (paper)" by `clinicode.models.leam.options.is_paper_model`, not a copy of its
    rule: were the paper's options to grow, the card follows."""
    from clinicode.models.leam import options

    monkeypatch.setattr(options, "PAPER_MODEL", {**options.PAPER_MODEL, "compat": "cosine"})
    linear = {"model": "leam", "model_config": {"code_evidence": False, "window_nonneg": False, "compat": "linear"}}
    assert render.model_name(linear) == "LEAM (variant)"
    assert render.model_name({"model": "leam", "model_config": {"compat": "cosine"}}) == "LEAM (paper)"
