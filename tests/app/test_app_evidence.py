"""The performance page shows evidence quality when the run's test notes carried gold mentions (docs/metrics.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from clinicode.data.prepared import read_split

APP = Path(__file__).resolve().parents[2] / "app_streamlit" / "main.py"


@pytest.fixture(scope="module")
def evidence_runs(demo_data, tmp_path_factory) -> Path:
    """A tiny run trained on the demo notes as a coded-notes folder whose every gold code is 'mentioned' by the note's
    first word (so the metrics have gold spans to judge; which words does not matter here), and one without."""
    from clinicode.config import TrainConfig
    from clinicode.train import train

    from conftest import TINY_MODEL

    coded = tmp_path_factory.mktemp("coded") / "notes"
    coded.mkdir()
    for split in ("train", "dev", "test"):
        df = read_split(demo_data, split)
        with open(coded / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for _, row in df.iterrows():
                first = re.search(r"[^\W_]+", row["text"]).span()
                f.write(json.dumps({"id": row["id"], "text": row["text"], "labels": list(row["labels"]),
                                    "evidence": [{"code": c, "start": first[0], "end": first[1]}
                                                 for c in row["labels"]]}) + "\n")
    root = tmp_path_factory.mktemp("app_runs_evidence")
    cfg = TrainConfig(model="leam", epochs=3, batch_size=16, lr=2e-2, w2v_epochs=1, seed=7, device="cpu",
                      embeddings="random")
    train(out_dir=root / "mentions", config=cfg, data_dir=coded, model_options=TINY_MODEL, progress=False)
    train(out_dir=root / "plain", config=cfg, data_dir=demo_data, model_options=TINY_MODEL, progress=False)
    return root, coded


def test_training_saves_what_evaluate_reports(evidence_runs):
    from clinicode.evaluate import evaluate

    root, coded = evidence_runs
    saved = json.loads((root / "mentions" / "checkpoint" / "metrics_test.json").read_text())["evidence"]
    assert saved["n_pairs"] > 0 and saved["model"] is not None
    assert evaluate(checkpoint=root / "mentions", data_dir=coded, split="test", device="cpu")["evidence"] == saved
    assert "evidence" not in json.loads((root / "plain" / "checkpoint" / "metrics_test.json").read_text())


def test_performance_page_shows_evidence_quality_beside_both_floors(evidence_runs, monkeypatch):
    evidence_runs, _ = evidence_runs
    saved = json.loads((evidence_runs / "mentions" / "checkpoint" / "metrics_test.json").read_text())["evidence"]
    monkeypatch.setenv("CLINICODE_RUNS", str(evidence_runs))
    at = AppTest.from_file(str(APP), default_timeout=90).run()
    at.sidebar.selectbox(key="run_name").set_value("mentions").run()
    at.switch_page("app_pages/performance.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(s.value == "Evidence quality" for s in at.subheader)
    (table,) = [d.value for d in at.dataframe if "word F1" in d.value.columns]
    assert table["spans"].tolist() == ["this model's highlights", "title words found in the note",
                                       "random words, same lengths"]
    for row, key in zip(table.to_dict("records"), ("model", "title", "random")):
        assert row["hit@1"] == pytest.approx(saved[key]["hit_at_1"])
        assert row["word F1"] == pytest.approx(saved[key]["token_f1"])
    assert any(f"{saved['n_pairs']:,} correctly predicted codes" in c.value for c in at.caption)
    span = saved["span_code"]
    assert span["f1"] is not None and any(c.value.startswith(f"Span-and-code F1 {span['f1']:.3f} ") for c in at.caption)

    at.sidebar.selectbox(key="run_name").set_value("plain").run()
    at.switch_page("app_pages/performance.py").run()
    assert not at.exception and not any(s.value == "Evidence quality" for s in at.subheader)
