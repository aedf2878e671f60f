"""Recipes for the published protocols: each names its protocol with that protocol's own options (so `prepare`
enforces its published counts), the runner chains prepare -> train -> evaluate on MIMIC-IV, and a protocol's counts
are reproduced at full size on synthetic MIMIC-IV built from the shipped split files."""

from __future__ import annotations

import json

import pytest

from clinicode.constants import SPLITS
from clinicode.data.protocols import by_name
from pipelines.reproduce import RECIPES, load_recipe, main

from conftest import SHARED_DATA


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_each_recipe_is_its_protocol_with_its_own_options(recipe):
    config = load_recipe(recipe)
    protocol = by_name(config["protocol"])
    prep = config["prepare"]
    assert prep.get("icd_version", 9) == protocol.icd_version
    assert (protocol.mimic == "mimic4") == ("icd_version" in prep)
    assert prep["label_set"] == protocol.label_set and prep.get("min_code_count", 1) == protocol.min_code_count
    files = ([SHARED_DATA / prep["splits_file"]] if "splits_file" in prep else
             [SHARED_DATA / prep["splits_dir"] / f"{s}_{'full' if protocol.label_set == 'full' else '50'}_hadm_ids.csv"
              for s in SPLITS])
    if prep["label_set"] == "top50":
        files.append(SHARED_DATA / prep["splits_dir"] / "top50_codes.txt")
    from clinicode.data.protocols import find_protocol

    if all(f.is_file() for f in files):
        assert find_protocol(files) == protocol  # the recipe's files are the protocol's, byte for byte


def test_the_runner_chains_prepare_train_evaluate_on_mimic4(tmp_path, capsys):
    from clinicode.synthetic.mimic4 import write_demo_mimic4

    raw = tmp_path / "mimic4"
    write_demo_mimic4(raw, n_admissions=400, seed=2)
    recipe = tmp_path / "recipe.json"
    config = load_recipe("mimic4-icd10-top50")
    config["prepare"] = {"icd_version": 10, "label_set": "top50"}  # no split files: a hash split, not comparable
    recipe.write_text(json.dumps(config))
    out = tmp_path / "run"
    code = main(["--recipe", str(recipe), "--mimic-dir", str(raw), "--out", str(out), "--no-progress",
                 "--set", "epochs=1", "--set", "embeddings=random", "--set", "device=cpu"])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "pipeline_report.json").read_text())
    assert report["prepare"]["release"] == "mimic4" and report["prepare"]["icd_version"] == 10
    assert report["protocol"]["name"] == "nguyen-mimic4-icd10-top50" and report["comparable"] is False
    assert {"prec_at_5", "prec_at_8", "prec_at_15", "f1_micro"} <= set(report["test"])
    assert "not comparable" in capsys.readouterr().out


@pytest.mark.slow
def test_a_published_protocol_is_reproduced_at_full_size(tmp_path):
    """Synthetic MIMIC-IV holding every id of MIMIC-IV-ICD's ICD-10 lists: prepare with the recipe's options gives
    exactly the published 104,077 / 3,805 / 7,368 documents (and would stop on any other count)."""
    from clinicode.data.prepare import prepare_mimic
    from clinicode.synthetic.mimic4 import write_demo_mimic4

    folder = SHARED_DATA / "mimic-splits" / "nguyen2023" / "icd10"
    if not folder.is_dir():
        pytest.skip("../shared/data/mimic-splits is not here")
    write_demo_mimic4(tmp_path / "raw", n_admissions=500, hadm_ids_from=[folder], seed=3)
    prep = load_recipe("mimic4-icd10-top50")["prepare"]
    summary = prepare_mimic(tmp_path / "raw", tmp_path / "data", icd_version=prep["icd_version"],
                            label_set=prep["label_set"],
                            splits_dir=folder, expect_published_counts=True)
    assert summary["protocol"] == "nguyen-mimic4-icd10-top50" and summary["comparable"] is True
    assert summary["splits"] == {"train": 104_077, "dev": 3_805, "test": 7_368} == by_name(summary["protocol"]).counts
    assert summary["n_labels"] == 50 and summary["missing_from_data"] == {s: 0 for s in SPLITS}


# Options that say where or how fast a run goes, not what it learns; a recipe need not pin them.
_UNPINNED = {"device", "memory_mb", "eval_batch_size", "top_k", "single_label"}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_each_leam_recipe_pins_every_learning_option(recipe):
    """A recipe is a fixed run: a later change of a library default (e.g. the learning-rate schedule) must not
    change what it trains."""
    import dataclasses

    from clinicode.config import TrainConfig

    config = load_recipe(recipe)
    if config["train"].get("model") != "leam":
        pytest.skip("tfidf-lr recipe")
    missing = {f.name for f in dataclasses.fields(TrainConfig)} - _UNPINNED - set(config["train"])
    if config["train"].get("lr_schedule") == "constant":
        missing -= {"lr_decay", "lr_patience"}                   # they only act on the plateau schedule
    assert not missing, f"{recipe} does not pin {sorted(missing)}"


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_each_leam_recipe_pins_the_papers_model(recipe):
    """Every recipe reproduces a published LEAM row, so it trains the paper's model whatever the library's default
    model is (the default adds code evidence and a non-negative window)."""
    import dataclasses

    from clinicode.models.leam.options import PAPER_MODEL, LEAMConfig, is_paper_model

    config = load_recipe(recipe)
    if config["train"].get("model") != "leam":
        pytest.skip("tfidf-lr recipe")
    assert {k: config["model"].get(k) for k in PAPER_MODEL} == PAPER_MODEL
    assert is_paper_model(config["model"])
    built = LEAMConfig(vocab_size=3, n_labels=1, **config["model"])
    assert not built.code_evidence and not built.window_nonneg
    assert set(config["model"]) <= {f.name for f in dataclasses.fields(LEAMConfig)}
