"""The MIMIC-III top-50 pipeline chains prepare -> train -> evaluate from one config into one run folder."""

import json

import pytest

from pipelines.mimic3_top50 import DEFAULT_CONFIG, main


def test_pipeline_runs_on_synthetic_mimic(demo_mimic, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["--mimic-dir", str(demo_mimic), "--out", str(out), "--no-progress", "--set", "epochs=1",
                 "--set", "embeddings=random", "--set", "device=cpu"])
    assert code == 0
    report = json.loads((out / "pipeline_report.json").read_text())
    assert report["paper"]["f1_micro"] == 0.619
    assert report["comparable"] is False  # synthetic data without CAML's split files
    assert set(report["test"]) == {"auc_macro", "auc_micro", "f1_macro", "f1_micro", "prec_at_5", "prec_at_8",
                                   "prec_at_15"}
    assert (out / "checkpoint" / "manifest.json").is_file() and (out / "data" / "train.parquet").is_file()
    printed = capsys.readouterr().out
    assert "not comparable" in printed and "paper" in printed
    # the paper's F1 (at 0.5) is printed beside clinicode's F1 at 0.5, not at the tuned threshold
    row = next(line for line in printed.splitlines() if line.startswith("f1_micro"))
    half, paper, tuned = (float(x) for x in row.split()[1:])
    assert (half, paper, tuned) == (pytest.approx(report["test_threshold_0.5"]["f1_micro"], abs=5e-4), 0.619,
                                    pytest.approx(report["test"]["f1_micro"], abs=5e-4))
    assert json.loads(DEFAULT_CONFIG.read_text())["prepare"]["label_set"] == "caml50"


def test_pipeline_rejects_unknown_train_keys(demo_mimic, tmp_path, capsys):
    code = main(["--mimic-dir", str(demo_mimic), "--out", str(tmp_path / "r"), "--set", "epoch=1"])
    assert code == 1
    assert "unknown key 'epoch'" in capsys.readouterr().err


def test_make_demos_train_from_mimic_tables_into_a_new_nested_folder(demo_mimic, tmp_path):
    """`make demo` runs `train --mimic-dir demo/mimic --out runs/demo` where runs/ does not exist yet: the folder is
    claimed with its parents made, then the run is prepared into it and trained."""
    from conftest import TINY_SIZES
    from helpers import succeeds

    out = tmp_path / "runs" / "demo"
    succeeds(["train", "--mimic-dir", demo_mimic, "--out", out, *TINY_SIZES, "--epochs", "1"])
    assert (out / "checkpoint" / "manifest.json").is_file() and (out / "data" / "train.parquet").is_file()
