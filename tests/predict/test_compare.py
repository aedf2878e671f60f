"""`clinicode compare`: two models on the same notes, with a paired-bootstrap interval of the difference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clinicode.cli import app
from clinicode.config import TrainConfig
from clinicode.evaluate import compare, evaluate
from clinicode.train import train


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # newer Click keeps stderr separate by default
        return CliRunner()


@pytest.fixture(scope="module")
def lr_run(demo_data, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("cmp") / "lr"
    train(out_dir=run, config=TrainConfig(model="tfidf-lr"), data_dir=demo_data, progress=False)
    return run


def test_compare_reports_the_metric_differences_evaluate_gives(tiny_run, lr_run, demo_data):
    c = compare(runs_a=[tiny_run], runs_b=[lr_run], data_dir=demo_data, n_boot=200, device="cpu")
    ea = evaluate(checkpoint=tiny_run, data_dir=demo_data, device="cpu")
    eb = evaluate(checkpoint=lr_run, data_dir=demo_data, device="cpu")
    for k in ("f1_micro", "auc_macro"):
        assert c["metrics_a"][k] == pytest.approx(ea[k], abs=1e-9)
        assert c["metrics_b"][k] == pytest.approx(eb[k], abs=1e-9)
        assert c[k]["diff"] == pytest.approx(ea[k] - eb[k], abs=1e-9)
        assert c[k]["lo"] <= c[k]["diff"] <= c[k]["hi"] and c[k]["lo"] < c[k]["hi"]
    assert c["n_docs"] == ea["n_docs"] and c["n_boot"] == 200


def test_a_model_compared_with_itself_differs_by_nothing(tiny_run, demo_data):
    c = compare(runs_a=[tiny_run], runs_b=[tiny_run], data_dir=demo_data, n_boot=100, device="cpu")
    assert c["f1_micro"] == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "p_a_below_b": 0.0}


def test_compare_cli_prints_the_table_and_writes_json(tiny_run, lr_run, demo_data, tmp_path):
    out = tmp_path / "cmp.json"
    res = _runner().invoke(app, ["compare", "--a", str(tiny_run), "--a", str(tiny_run), "--b", str(lr_run),
                                 "--data", str(demo_data), "--n-boot", "100", "--device", "cpu", "--output", str(out)])
    assert res.exit_code == 0, (res.exception, res.stderr)
    assert "f1_micro" in res.stdout and "95% interval" in res.stdout and "A = 2 run(s), B = 1 run(s)" in res.stdout
    saved = json.loads(out.read_text())
    assert saved["a"] == [str(tiny_run)] * 2 and saved["b"] == [str(lr_run)]
    assert set(saved["auc_macro"]) == {"diff", "lo", "hi", "p_a_below_b"}


def test_compare_refuses_runs_with_different_label_sets(tiny_run, demo_data, tmp_path):
    other = tmp_path / "top5"
    train(out_dir=other, config=TrainConfig(model="tfidf-lr", top_k=5), data_dir=demo_data, progress=False)
    res = _runner().invoke(app, ["compare", "--a", str(tiny_run), "--b", str(other), "--data", str(demo_data),
                                 "--device", "cpu"])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "label set" in lines[0] and "compare runs trained on the same labels" in lines[0]


def test_compare_with_a_missing_run_folder_fails_in_one_line(lr_run, demo_data, tmp_path):
    res = _runner().invoke(app, ["compare", "--a", str(tmp_path / "nope"), "--b", str(lr_run), "--data",
                                 str(demo_data)])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nope" in lines[0]
