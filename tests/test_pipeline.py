"""The MIMIC-III top-50 pipeline chains prepare -> train -> evaluate from one config into one run folder."""

import json

from pipelines.mimic3_top50 import DEFAULT_CONFIG, main


def test_pipeline_runs_on_synthetic_mimic(demo_mimic, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["--mimic-dir", str(demo_mimic), "--out", str(out), "--no-progress", "--set", "epochs=1",
                 "--set", "embeddings=random", "--set", "device=cpu"])
    assert code == 0
    report = json.loads((out / "pipeline_report.json").read_text())
    assert report["paper"]["f1_micro"] == 0.619
    assert report["comparable"] is False  # synthetic data without CAML's split files
    assert set(report["test"]) == {"auc_macro", "auc_micro", "f1_macro", "f1_micro", "prec_at_5"}
    assert (out / "checkpoint" / "manifest.json").is_file() and (out / "data" / "train.parquet").is_file()
    printed = capsys.readouterr().out
    assert "not comparable" in printed and "paper" in printed
    assert json.loads(DEFAULT_CONFIG.read_text())["prepare"]["label_set"] == "caml50"


def test_pipeline_rejects_unknown_train_keys(demo_mimic, tmp_path, capsys):
    code = main(["--mimic-dir", str(demo_mimic), "--out", str(tmp_path / "r"), "--set", "epoch=1"])
    assert code == 1
    assert "unknown key 'epoch'" in capsys.readouterr().err
