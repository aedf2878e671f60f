"""The Streamlit app through AppTest on a copy of the tiny run: pages, coding a note, threshold, gold marks, batch."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app_streamlit" / "main.py"
PAGES = ["code_note", "performance", "embeddings", "batch", "about_model"]
NOTE = ("Patient with hypertension and congestive heart failure, atrial fibrillation. <script>alert(1)</script> "
        "on coumadin.")


@pytest.fixture(scope="module")
def runs_dir(tiny_run, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("app_runs")
    shutil.copytree(tiny_run, root / "tiny", ignore=shutil.ignore_patterns("state"))
    return root


@pytest.fixture
def app_env(runs_dir, monkeypatch):
    monkeypatch.setenv("CLINICODE_RUNS", str(runs_dir))
    return runs_dir


def _app() -> AppTest:
    return AppTest.from_file(str(APP), default_timeout=90)


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _predicted(at: AppTest) -> list[str]:
    return list(at.session_state["predicted_codes"])


def render_mod():
    sys.path.insert(0, str(ROOT / "app_streamlit"))
    import render

    return render


def _code_table(at: AppTest):
    (df,) = [d.value for d in at.dataframe if "probability" in d.value.columns]
    return df


def test_no_run_shows_how_to_make_one(tmp_path, monkeypatch):
    monkeypatch.setenv("CLINICODE_RUNS", str(tmp_path / "empty"))
    at = _ok(_app().run())
    assert any("make demo" in i.value for i in at.info)
    assert not at.button  # st.stop(): no page ran


def test_every_page_renders(app_env):
    at = _ok(_app().run())
    assert at.sidebar.selectbox(key="run_name").value == "tiny"
    for page in PAGES:
        _ok(at.switch_page(f"app_pages/{page}.py").run())
        assert at.title, page
    # the performance page drew its charts and six headline metrics at two thresholds
    at.switch_page("app_pages/performance.py").run()
    assert len(at.metric) == 12 and len(at.get("vega_lite_chart")) >= 3
    at.radio(key="perf_curve").set_value("Precision-recall").run()
    _ok(at)
    at.switch_page("app_pages/embeddings.py").run()
    charts = at.get("vega_lite_chart")
    assert len(charts) == 2
    spec = json.loads(charts[0].proto.spec)
    assert spec["mark"]["type"] == "rect"


def test_pasted_note_gets_codes_highlights_and_escaping(app_env):
    at = _ok(_app().run())
    at.text_area(key="note_text").input(NOTE).run()
    _ok(at.button(key="predict").click().run())
    df = _code_table(at)
    assert len(df) >= 10 and set(df.columns) >= {"code", "description", "probability", "above_threshold"}
    assert "outcome" not in df.columns  # no gold for a pasted note
    assert df["probability"].is_monotonic_decreasing
    (hl,) = [h.value for h in at.html if 'id="note-hl"' in h.value]
    # the default highlight (#43): each predicted code's own evidence, the code named beside its words
    assert at.selectbox(key="hl_code").value == "Each shown code's own evidence"
    assert '<mark class="attn"' not in hl
    tags = render_mod().code_tags(hl)
    assert tags and {c for c, _ in tags} <= set(_predicted(at))
    assert all(f'<sup class="code-tag" data-code="{c}"' in hl for c, _ in tags)
    assert "<script" not in hl and "&lt;" in hl
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in re.sub(r"<mark[^>]*>|</mark>|<sup[^>]*>[^<]*</sup>", "", hl)
    # the shared attention is one choice away
    at.selectbox(key="hl_code").set_value("Attention β (shared by all codes)").run()
    (hl,) = [h.value for h in at.html if 'id="note-hl"' in h.value]
    assert '<mark class="attn"' in hl and "code-tag" not in hl
    text_only = re.sub(r"<mark[^>]*>|</mark>", "", hl)   # tokens are marked one by one; the text between is intact
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text_only
    assert at.download_button(key="dl_json").label.startswith("Download predictions")
    # one predicted code's own evidence replaces the attention view
    at.slider(key="threshold_tiny").set_value(0.0).run()
    code = at.selectbox(key="hl_code").options[2]
    at.selectbox(key="hl_code").set_value(code.split(" — ")[0]).run()
    _ok(at)
    (hl,) = [h.value for h in at.html if 'id="note-hl"' in h.value]
    assert '<mark class="evidence"' in hl and '<mark class="attn"' not in hl
    assert any("Green: the words that justify" in c.value and "(cosine with the code's vector;" in c.value
               for c in at.caption)                                  # LEAM's spans are its cosines, and it says so


def test_threshold_slider_changes_predicted_set(app_env):
    at = _ok(_app().run())
    at.text_area(key="note_text").input(NOTE).run()
    at.button(key="predict").click().run()
    slider = at.slider(key="threshold_tiny")
    tuned = slider.value
    default_set = _predicted(at)
    _ok(slider.set_value(0.0).run())
    everything = _predicted(at)
    assert len(everything) == 50 and set(default_set) <= set(everything)
    _ok(at.slider(key="threshold_tiny").set_value(1.0).run())
    assert _predicted(at) == []
    assert 0.0 < tuned < 1.0


def test_codes_from_the_terminology_are_marked_where_the_coder_looks(app_env, monkeypatch):
    """A code the model scores from a terminology's title alone (`train --terminology`, a fused run: here the tiny
    run's last two codes, as its Predictor would say) is marked in the code table and the highlight choice."""
    from clinicode.predict import Predictor

    monkeypatch.setattr(Predictor, "terminology_codes", property(lambda self: self.codes[-2:]))
    at = _ok(_app().run())
    at.text_area(key="note_text").input(NOTE).run()
    _ok(at.button(key="predict").click().run())
    _ok(at.slider(key="threshold_tiny").set_value(0.0).run())
    from clinicode.data.labels import LabelSet

    terms = set(LabelSet.load(app_env / "tiny" / "checkpoint" / "labels.json").codes[-2:])
    df = _code_table(at)
    assert len(df) == 50 and set(df.loc[df["source"] == "terminology", "code"]) == terms, df
    assert (df.loc[~df["code"].isin(terms), "source"] == "").all()
    marked = [o for o in at.selectbox(key="hl_code").options if o.endswith(" (from the terminology)")]
    assert sorted(o.split(" — ")[0] for o in marked) == sorted(terms)


def test_gold_marks_on_a_test_split_note(app_env):
    at = _ok(_app().run())
    at.radio(key="note_source").set_value("Test split note").run()
    note_id = at.selectbox(key="test_note_id").options[0]
    _ok(at.button(key="predict").click().run())
    df = _code_table(at)
    gold = set(df.loc[df["gold"], "code"])
    assert gold, f"test note {note_id} has no gold codes in the label set"
    # at threshold 1 every gold code is a missed code (FN), shown even below the threshold
    at.slider(key="threshold_tiny").set_value(1.0).run()
    df = _code_table(at)
    assert set(df.loc[df["outcome"].str.contains("FN"), "code"]) == gold
    assert not df["outcome"].str.contains("TP|FP").any()
    # at threshold 0 every gold code is a hit and every other code a false positive
    at.slider(key="threshold_tiny").set_value(0.0).run()
    df = _code_table(at)
    assert set(df.loc[df["outcome"].str.contains("TP"), "code"]) == gold
    assert df["outcome"].str.contains("FP").sum() == len(df) - len(gold)
    assert any("TP" in m.value and "FN" in m.value for m in at.markdown)


def test_batch_page_scores_an_uploaded_csv(app_env, tmp_path):
    at = _ok(_app().run())
    at.switch_page("app_pages/batch.py").run()
    csv = b'id,text\nn1,"Hypertension and atrial fibrillation, <b>bold</b>"\nn2,\nn3,"Sepsis, acute kidney failure"\n'
    at.file_uploader(key="batch_file").set_value(("notes.csv", csv, "text/csv")).run()
    _ok(at)
    (res,) = [d.value for d in at.dataframe]
    assert res["id"].tolist() == ["n1", "n2", "n3"]
    assert res["error"].isna().tolist() == [True, False, True]
    assert "empty text" in res["error"][1]
    assert "text" not in res.columns  # results never carry the notes
    assert at.download_button(key="dl_batch_csv").label == "Download CSV"
    assert [m.value for m in at.metric] == ["3", "2", "1"]
    # one record format: the page's records are, line for line, what `clinicode predict` writes for the same file
    from clinicode.predict import Predictor
    from clinicode.predict_io import predict_file

    (tmp_path / "notes.csv").write_bytes(csv)
    out = tmp_path / "codes.jsonl"
    predict_file(Predictor.from_checkpoint(app_env / "tiny", device="cpu"), input=tmp_path / "notes.csv", output=out,
                 threshold=float(at.session_state["batch_result"]["key"].rsplit("|", 1)[1]), explain=0, progress=False)
    cli = [json.loads(line) for line in out.read_text().splitlines()]
    assert at.session_state["batch_result"]["records"] == cli


def test_batch_page_reports_a_bad_file_without_crashing(app_env):
    at = _ok(_app().run())
    at.switch_page("app_pages/batch.py").run()
    at.file_uploader(key="batch_file").set_value(("notes.csv", b"a,b\n1,2\n", "text/csv")).run()
    _ok(at)
    assert any("no 'text' column" in e.value for e in at.error)


# ------------------------------------------------------------------------------------------ import boundary
def _clinicode_imports(folder: Path) -> list[tuple[str, str]]:
    """(file, module) of every import of clinicode under FOLDER, at any depth of the code (lazy imports included)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            found += [(path.name, n) for n in names if n == "clinicode" or n.startswith("clinicode.")]
    return found


@pytest.mark.parametrize("folder, surface", [("app_streamlit", "clinicode.serving"), ("pipelines", "clinicode.api")])
def test_app_and_pipelines_import_clinicode_only_through_its_public_surface(folder, surface):
    """The app imports only the serving surface, whose import contract (pyproject.toml) says it never reaches
    training, word vectors, evaluation or MIMIC preparation: what the app may do is read from its imports (#53)."""
    found = _clinicode_imports(ROOT / folder)
    assert found, f"{folder} imports nothing of clinicode: the check would pass vacuously"
    assert [(f, m) for f, m in found if m != surface] == []


def test_the_import_check_sees_a_lazy_import_of_an_internal_module(tmp_path):
    """Not vacuous: an import inside a function, of anything but clinicode.api, is found."""
    page = "import clinicode.api as api\n\ndef f():\n    from clinicode.train import train\n"
    (tmp_path / "page.py").write_text(page)
    assert _clinicode_imports(tmp_path) == [("page.py", "clinicode.api"), ("page.py", "clinicode.train")]


def _surface(module: str) -> tuple[list[str], list[str], list[str], list[str]]:
    """(what importing MODULE alone loads of clinicode, torch and pandas; its names that are not their home module's
    object; its public names; those `dir` misses), in a fresh interpreter."""
    script = textwrap.dedent(f"""
        import importlib, json, sys
        import {module} as api
        first = sorted(m for m in sys.modules if m.startswith("clinicode") or m in ("torch", "pandas"))
        wrong = [n for n, (mod, attr) in api._WHERE.items()
                 if getattr(api, n) is not getattr(importlib.import_module(mod), attr)]
        print(json.dumps([first, wrong, api.__all__, sorted(set(api.__all__) - set(dir(api)))]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_serving_surface_loads_nothing_and_names_no_training_verb():
    first, wrong, names, not_in_dir = _surface("clinicode.serving")
    assert first == ["clinicode", "clinicode.serving"]
    assert wrong == [] and not_in_dir == []
    assert {"Predictor", "load_checkpoint", "open_review_db", "MODEL_KINDS", "verify_checkpoint"} <= set(names)
    assert not {"train", "prepare_mimic", "evaluate", "write_demo_mimic", "load_dataset"} & set(names)


def test_every_public_api_name_imports_and_the_module_itself_loads_nothing():
    """Each name of clinicode.api is its home module's object; importing the module alone loads no other clinicode
    module than the serving surface it extends, no torch and no pandas (the app's first page stays light)."""
    first, wrong, names, not_in_dir = _surface("clinicode.api")
    assert first == ["clinicode", "clinicode.api", "clinicode.serving"]
    assert wrong == [] and not_in_dir == []
    assert set(_surface("clinicode.serving")[2]) < set(names)  # the API is the serving surface and the verbs
    for name in ("Predictor", "train", "evaluate", "load_checkpoint", "READERS", "WRITERS", "CODE_SYSTEMS",
                 "MODEL_KINDS", "open_review_db", "ClinicodeError"):
        assert name in names
    import clinicode.api as api

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        api.nope


@pytest.mark.slow
def test_running_app_never_loads_train_or_data_preparation(runs_dir):
    """Drive every page and a prediction in a fresh interpreter, then inspect sys.modules."""
    script = textwrap.dedent(f"""
        import json, sys
        from streamlit.testing.v1 import AppTest
        at = AppTest.from_file({str(APP)!r}, default_timeout=120).run()
        assert "torch" not in sys.modules, "the first render imported torch"
        at.text_area(key="note_text").input("hypertension and heart failure").run()
        at.button(key="predict").click().run()
        for p in {PAGES!r}:
            at.switch_page(f"app_pages/{{p}}.py").run()
            assert not at.exception, (p, [e.value for e in at.exception])
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("clinicode"))))
    """)
    env = {**os.environ, "CLINICODE_RUNS": str(runs_dir)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    mods = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "clinicode.predict" in mods
    for banned in ("clinicode.train", "clinicode.data.prepare", "clinicode.data.mimic", "clinicode.evaluate",
                   "clinicode.embeddings"):
        assert banned not in mods


@pytest.fixture(scope="module")
def tfidf_runs(demo_data, tmp_path_factory) -> Path:
    from clinicode.config import TrainConfig
    from clinicode.train import train

    root = tmp_path_factory.mktemp("app_runs_tfidf")
    train(out_dir=root / "bow", config=TrainConfig(model="tfidf-lr", device="cpu"), data_dir=demo_data, progress=False)
    return root


def test_tfidf_run_codes_notes_and_says_embeddings_are_leam_only(tfidf_runs, monkeypatch):
    monkeypatch.setenv("CLINICODE_RUNS", str(tfidf_runs))
    at = _ok(_app().run())
    at.text_area(key="note_text").input(NOTE).run()
    _ok(at.button(key="predict").click().run())
    assert len(_code_table(at)) >= 10
    (hl,) = [h.value for h in at.html if 'id="note-hl"' in h.value]
    assert "<mark" not in hl and "&lt;script&gt;" in hl
    for page in PAGES:
        _ok(at.switch_page(f"app_pages/{page}.py").run())
    at.switch_page("app_pages/embeddings.py").run()
    assert any("only for LEAM" in i.value for i in at.info)


def test_what_the_app_caches_holds_no_note_text(tiny_run, demo_data):
    """Test-split notes are listed by id and codes; a note's text is read when shown and never cached."""
    sys.path.insert(0, str(ROOT / "app_streamlit"))
    import state

    codes = state.read_test_codes(str(demo_data))
    assert list(codes.columns) == ["id", "labels"] and len(codes) > 10
    emb = state.test_embeddings(str(tiny_run), str(demo_data))
    assert set(emb) == {"Z", "C", "labels", "n_total"} and emb["Z"].shape[0] == len(codes)
    note = codes["id"].iloc[3]
    text = state.test_note_text(demo_data, note)
    import pandas as pd

    assert text == pd.read_parquet(demo_data / "test.parquet").set_index("id").loc[note, "text"]
    assert not hasattr(state.test_note_text, "clear")  # a plain function, not a st.cache_data one


# ------------------------------------------------------------------------------------------ thousands of codes
N_MANY = 240  # > 60 codes: the performance page groups them; > P = 16: the model scores codes by blocks


@pytest.fixture(scope="module")
def many_codes_runs(tmp_path_factory) -> Path:
    """A run with 240 codes, each announced by its own word ("kw017") in the notes, with ICD-9-shaped names."""
    import random

    from clinicode.config import TrainConfig
    from clinicode.train import train

    rng = random.Random(0)
    data = tmp_path_factory.mktemp("many_codes_data")
    codes = [f"{400 + k // 10}.{k % 10}" for k in range(N_MANY)]
    (data / "labels.json").write_text(json.dumps([{"code": c, "description": f"condition number {k}"}
                                                  for k, c in enumerate(codes)]))
    filler = "patient seen stable discharged follow up clinic home".split()
    for split, n in (("train", 400), ("dev", 80), ("test", 80)):
        with open(data / f"{split}.jsonl", "w") as f:
            for i in range(n):
                ks = rng.sample(range(N_MANY), 4)
                words = [f"kw{k:03d}" for k in ks] + rng.choices(filler, k=25)
                rng.shuffle(words)
                f.write(json.dumps({"id": f"{split}{i}", "text": " ".join(words),
                                    "labels": [codes[k] for k in ks]}) + "\n")
    root = tmp_path_factory.mktemp("app_runs_many")
    cfg = TrainConfig(model="leam", epochs=4, batch_size=16, lr=2e-2, embeddings="random", min_doc_freq=1, seed=3,
                      device="cpu")
    train(out_dir=root / "many", config=cfg, data_dir=data,
          model_options={"embed_dim": 16, "radius": 1, "hidden_dim": 32, "dropout": 0.0}, progress=False)
    return root


def test_many_codes_search_any_code_and_show_its_evidence(many_codes_runs, monkeypatch):
    monkeypatch.setenv("CLINICODE_RUNS", str(many_codes_runs))
    at = _ok(_app().run())
    at.text_area(key="note_text").input("admitted with kw007 and kw123, stable, discharged home").run()
    _ok(at.button(key="predict").click().run())
    assert at.session_state["note_result"]["pred"].code_phrases in ({}, None) or \
        len(at.session_state["note_result"]["pred"].code_phrases) < N_MANY     # evidence is not computed for all codes
    at.text_input(key="code_search").input("condition number 12").run()        # 12, 112, 120-129, 212
    _ok(at)
    (found,) = [d.value for d in at.dataframe if "probability" in d.value.columns and len(d.value) == 13]
    assert set(found["code"]) == {"401.2", "411.2", "421.2", *[f"412.{k}" for k in range(10)]}
    assert found["probability"].is_monotonic_decreasing
    at.selectbox(key="hl_code").set_value("412.3").run()                       # a searched code, not predicted
    _ok(at)
    (hl,) = [h.value for h in at.html if 'id="note-hl"' in h.value]
    assert '<mark class="evidence"' in hl
    assert "412.3" in at.session_state["note_result"]["pred"].code_phrases


def test_many_codes_performance_page_groups_ranks_and_searches(many_codes_runs, monkeypatch):
    monkeypatch.setenv("CLINICODE_RUNS", str(many_codes_runs))
    at = _ok(_app().run())
    _ok(at.switch_page("app_pages/performance.py").run())
    assert any(f"{N_MANY:,} codes: grouped below" in c.value for c in at.caption)
    frames = [d.value for d in at.dataframe]
    groups = [f for f in frames if "mean_f1" in f.columns]
    assert len(groups) == 2 and all(g["codes"].sum() == N_MANY for g in groups)
    assert set(groups[0].iloc[:, 0]) <= {name for _, name in __import__("render").FREQUENCY_BANDS}
    assert groups[1].iloc[:, 0].tolist() == ["ICD-9 dx: Circulatory system"]         # 400.0-423.9
    table = [f for f in frames if "chapter" in f.columns and len(f) == N_MANY]
    assert table, "the searchable table lists every code"
    at.text_input(key="perf_search").input("412").run()
    _ok(at)
    (hits,) = [d.value for d in at.dataframe if "chapter" in d.value.columns and len(d.value) == 10]
    assert set(hits["code"]) == {f"412.{k}" for k in range(10)}


@pytest.fixture(scope="module")
def seed_runs(demo_data, tmp_path_factory) -> Path:
    """Three runs of the paper's model that differ only in their seed (s9-old as saved before `code_evidence` and
    `window_nonneg` existed: no such keys in its model_config.json), one trained with another learning rate, and one
    with the default model (code evidence, non-negative window)."""
    from clinicode.config import TrainConfig
    from clinicode.train import train

    from conftest import TINY_MODEL

    root = tmp_path_factory.mktemp("app_runs_seeds")
    for name, seed, lr, evidence in (("s7", 7, 2e-2, False), ("s8", 8, 2e-2, False), ("s9-old", 9, 2e-2, False),
                                     ("other-lr", 9, 1e-2, False), ("evidence", 7, 2e-2, True)):
        cfg = TrainConfig(model="leam", epochs=2, batch_size=16, lr=lr, w2v_epochs=1, seed=seed, device="cpu",
                          embeddings="random")
        train(out_dir=root / name, config=cfg, data_dir=demo_data,
              model_options={**TINY_MODEL, "code_evidence": evidence, "window_nonneg": evidence}, progress=False)
    old = root / "s9-old" / "checkpoint" / "model_config.json"
    old.write_text(json.dumps({k: v for k, v in json.loads(old.read_text()).items()
                               if k not in ("code_evidence", "window_nonneg")}))
    return root


def test_model_card_shows_rare_codes_and_the_spread_over_seeds(seed_runs, monkeypatch):
    monkeypatch.setenv("CLINICODE_RUNS", str(seed_runs))
    at = _ok(_app().run())
    at.sidebar.selectbox(key="run_name").set_value("s7").run()
    _ok(at.switch_page("app_pages/about_model.py").run())
    frames = [d.value for d in at.dataframe]
    (slices,) = [f for f in frames if "present in test" in f.columns]
    saved = json.loads((seed_runs / "s7" / "checkpoint" / "metrics_test.json").read_text())["slices"]
    assert list(slices["in the label set"]) == [saved["rare"]["n_codes"], saved["frequent"]["n_codes"]]
    (spread,) = [f for f in frames if "worst below mean" in f.columns]
    micro = spread.set_index("metric").loc["Micro F1"]
    values = [json.loads((seed_runs / r / "checkpoint" / "metrics_test.json").read_text())["f1_micro"]
              for r in ("s7", "s8", "s9-old")]
    assert micro["runs"] == 3                     # neither the other learning rate nor code evidence is a seed sibling
    assert micro["worst"] == pytest.approx(min(values)) and micro["mean"] == pytest.approx(sum(values) / 3)
    assert any("seeds 7, 8, 9" in c.value for c in at.caption)
    assert [m.value for m in at.metric][0] == "LEAM (paper)"
    assert not any("Not the paper's LEAM" in c.value for c in at.caption)
    assert any("Wang et al." in c.value for c in at.caption)
    at.sidebar.selectbox(key="run_name").set_value("other-lr").run()
    _ok(at.switch_page("app_pages/about_model.py").run())
    assert not [d for d in at.dataframe if "worst below mean" in d.value.columns]
    assert any("No other seed of this training" in c.value for c in at.caption)
    at.sidebar.selectbox(key="run_name").set_value("evidence").run()
    _ok(at.switch_page("app_pages/about_model.py").run())
    assert [m.value for m in at.metric][0] == "LEAM + evidence"
    assert any("Not the paper's LEAM" in c.value for c in at.caption)
    assert not [d for d in at.dataframe if "worst below mean" in d.value.columns]


def test_suggestions_from_the_title_are_shown_apart_and_marked_in_the_note(app_env, tmp_path, monkeypatch):
    """#43: codes the checkpoint lacks whose title stands in the note are listed under their own heading (never in
    the predicted codes) and highlighted by default with a dashed mark and their code followed by '?'."""
    titles = tmp_path / "titles.tsv"
    titles.write_text("584.8\tAcute renal failure\n999.1\tAir embolism\n", encoding="utf-8")
    monkeypatch.setenv("CLINICODE_TITLES", str(titles))
    at = _ok(_app().run())
    note = "Seen for acute renal failure after surgery; hypertension."
    at.text_area(key="note_text").input(note).run()
    _ok(at.button(key="predict").click().run())
    (sug,) = [d.value for d in at.dataframe if "why" in d.value.columns]
    assert sug["code"].tolist() == ["584.8"] and sug["title"].tolist() == ["Acute renal failure"]
    assert "584.8" not in _predicted(at) and "584.8" not in set(_code_table(at)["code"])
    assert any("suggested from the title" in h.value for h in at.subheader)
    (hl,) = [h.value for h in at.html if 'id="note-hl"' in h.value]
    assert ("584.8", "acute renal failure") in render_mod().code_tags(hl)
    assert 'class="code-ev suggested" data-code="584.8"' in hl and ">584.8?</sup>" in hl and "dashed" in hl
    monkeypatch.delenv("CLINICODE_TITLES")


@pytest.fixture(scope="module")
def fused_runs(demo_data, tmp_path_factory) -> Path:
    """A run of the default kind (`train` with no --model: the fused model), as `make demo` makes it."""
    from clinicode.config import TrainConfig
    from clinicode.train import train

    from conftest import TINY_MODEL

    sizes = {k: v for k, v in TINY_MODEL.items() if k not in ("code_evidence", "window_nonneg")}
    root = tmp_path_factory.mktemp("app_runs_fused")
    cfg = TrainConfig(epochs=3, batch_size=16, lr=2e-2, w2v_epochs=1, patience=3, seed=7, device="cpu")
    assert cfg.model == "fused"
    train(out_dir=root / "default", config=cfg, data_dir=demo_data, model_options=sizes, progress=False)
    return root


def test_the_default_kind_codes_a_note_with_each_codes_evidence_on_every_page(fused_runs, monkeypatch):
    monkeypatch.setenv("CLINICODE_RUNS", str(fused_runs))
    at = _ok(_app().run())
    at.text_area(key="note_text").input(NOTE).run()
    _ok(at.button(key="predict").click().run())
    _ok(at.slider(key="threshold_default").set_value(0.0).run())
    assert len(_code_table(at)) >= 10 and _predicted(at)
    (hl,) = [h.value for h in at.html if 'id="note-hl"' in h.value]
    tags = render_mod().code_tags(hl)
    assert tags and {c for c, _ in tags} <= set(_predicted(at))
    assert "<script" not in hl and "&lt;script&gt;" in re.sub(r"<mark[^>]*>|</mark>|<sup[^>]*>[^<]*</sup>", "", hl)
    # one code's evidence: the caption says what the default model's span weights are, not LEAM's cosine
    at.selectbox(key="hl_code").set_value(at.selectbox(key="hl_code").options[2].split(" — ")[0]).run()
    (caption,) = [c.value for c in at.caption if "Green: the words that justify" in c.value]
    assert "the code's training mentions first" in caption and "(cosine with the code's vector;" not in caption
    for page in PAGES:
        _ok(at.switch_page(f"app_pages/{page}.py").run())
        assert at.title, page
