"""Code evidence (the default model; `--code-evidence` spelled out here) end to end: the option is recorded and read
back, the checkpoint scores the same in every path (predict, the stored table, evaluate), and --resume will not
silently switch it."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from safetensors.torch import load_file

from clinicode.batching import pad_batch
from clinicode.checkpoint import load_checkpoint
from clinicode.evaluate import evaluate
from clinicode.predict import Predictor

from conftest import TINY_SIZES
from helpers import fails, snapshot, succeeds


@pytest.fixture(scope="module")
def evidence_run(demo_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("ev") / "run"
    succeeds(["train", "--data", demo_data, "--out", run, "--code-evidence", *TINY_SIZES])
    return run


def test_the_option_is_recorded_with_its_weights(evidence_run):
    ck = evidence_run / "checkpoint"
    assert json.loads((ck / "model_config.json").read_text())["code_evidence"] is True
    weights = load_file(ck / "model.safetensors")
    assert weights["evidence_rho"].shape == (50,)
    loaded = load_checkpoint(evidence_run)
    assert loaded.model.config.code_evidence and (loaded.model.evidence_weight() >= 0).all()
    m = json.loads((ck / "metrics_test.json").read_text())
    assert m["auc_macro"] > 0.75 and m["f1_micro"] > 0.3                 # it learns the synthetic notes' codes


def test_every_scoring_path_gives_the_models_own_scores(evidence_run, demo_data, tmp_path):
    texts = pd.read_parquet(demo_data / "test.parquet")["text"].tolist()[:20]
    ck = load_checkpoint(evidence_run)
    ids, mask = pad_batch(ck.tokenizer.encode_ids(texts))
    want = ck.model.probabilities(ck.model(ids, mask).logits).detach().numpy()
    for memory in (2048, 64):                                            # with and without the stored word-code table
        pred = Predictor.from_checkpoint(evidence_run, device="cpu", memory_mb=memory)
        np.testing.assert_allclose(pred.score(texts), want, rtol=1e-4, atol=1e-5)
    saved = json.loads((evidence_run / "checkpoint" / "metrics_test.json").read_text())
    m = evaluate(checkpoint=evidence_run, data_dir=demo_data, split="test", device="cpu")
    for k in ("f1_micro", "auc_macro", "prec_at_5"):
        assert m[k] == pytest.approx(saved[k], abs=1e-12)
    src = tmp_path / "notes.jsonl"
    src.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts[:3])))
    succeeds(["predict", "--checkpoint", evidence_run, "--input", src, "--output", tmp_path / "codes.jsonl",
              "--explain", "2", "--no-progress"])
    rows = [json.loads(line) for line in (tmp_path / "codes.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["0", "1", "2"]
    assert max(rows[0]["scores"].values()) == pytest.approx(float(want[0].max()), abs=1e-4)


@pytest.mark.parametrize("flag,message", [
    ("--no-code-evidence", "code_evidence: True then False"),
    ("--paper", "code_evidence: True then False"),
])
def test_resume_will_not_switch_it(evidence_run, demo_data, tmp_path, flag, message):
    run = tmp_path / "run"
    shutil.copytree(evidence_run, run)
    before = snapshot(run)
    fails(["train", "--data", demo_data, "--out", run, "--resume", flag, *TINY_SIZES], message)
    assert snapshot(run) == before


def test_a_run_without_it_resumed_with_it_is_refused(tiny_run, demo_data, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    assert load_checkpoint(run).model.config.code_evidence is False
    before = snapshot(run)
    fails(["train", "--data", demo_data, "--out", run, "--resume", "--code-evidence", *TINY_SIZES],
          "code_evidence: False then True")
    assert snapshot(run) == before


def test_a_model_config_saved_before_the_option_reads_as_the_papers_model():
    from clinicode.config import saved_config
    from clinicode.models.leam.options import LEAMConfig

    old = {"vocab_size": 100, "n_labels": 50, "embed_dim": 32, "radius": 3, "hidden_dim": 64, "dropout": 0.2,
           "label_reg_weight": 1.0, "label_reg_codes": 256, "compat": "cosine", "multilabel": True, "phrase_init": 1.0}
    assert saved_config(LEAMConfig, old, source="model_config.json").code_evidence is False
