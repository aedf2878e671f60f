"""The fused model's own options (--fused-epochs, --mentions, --fit-on, --terminology) are its kind's options: spelt as
flags or --model-option, refused for another kind, saved in fusion.json, read back from a checkpoint written before
they left train_config.json (and a retrain keeps them); a run started before cannot --resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clinicode.checkpoint import load_checkpoint
from clinicode.config import TrainConfig
from clinicode.files import sha256_file

from helpers import fails, runner, succeeds

SMALL = ["--embed-dim", "8", "--window", "1", "--hidden-dim", "8", "--epochs", "1", "--w2v-epochs", "1",
         "--device", "cpu", "--no-progress"]
CHOSEN = {"fused_epochs": 2, "mentions": False, "fit_on": "train", "terminology": None}
# train_config.json of a fused run trained before the four options left it (bc5cdr, 150 training notes, --epochs 3
# --fit-on train --no-mentions --fused-epochs 2, seed 0): the keys as that clinicode wrote them
OLD_TRAIN_CONFIG = {
    "model": "fused", "epochs": 3, "fused_epochs": 2, "mentions": False, "fit_on": "train", "terminology": None,
    "batch_size": 16, "lr": 0.01, "optimizer": "adamw", "weight_decay": 0.3, "decay_scope": "embeddings",
    "pos_weight": 0.25, "max_len": 2500, "min_doc_freq": 3, "embeddings": "w2v", "w2v_epochs": 1, "patience": 5,
    "lr_schedule": "plateau", "lr_decay": 0.5, "lr_patience": 2, "patience_steps": 500, "lr_patience_steps": 200,
    "ema_decay": 0.99, "seed": 0, "device": "cpu", "top_k": None, "single_label": None, "eval_batch_size": 64,
    "memory_mb": 2048}


@pytest.fixture(scope="module")
def run(demo_data, tmp_path_factory) -> Path:
    """A fused run given two of its options as flags and one as --model-option."""
    out = tmp_path_factory.mktemp("fused-options") / "run"
    succeeds(["train", "--data", demo_data, "--out", out, *SMALL, "--fit-on", "train", "--no-mentions",
              "--model-option", "fused_epochs=2"])
    return out


def _as_before(run: Path, to: Path) -> Path:
    """A copy of RUN whose checkpoint is laid out as before the move: the four options in train_config.json, none in
    fusion.json, the manifest's hashes to match."""
    shutil.copytree(run, to)
    ck = to / "checkpoint"
    (ck / "train_config.json").write_text(json.dumps(OLD_TRAIN_CONFIG, indent=2))
    fusion = json.loads((ck / "fusion.json").read_text())
    fusion.pop("options")
    (ck / "fusion.json").write_text(json.dumps(fusion, indent=2))
    manifest = json.loads((ck / "manifest.json").read_text())
    for name in ("train_config.json", "fusion.json"):
        manifest["files"][name] = sha256_file(ck / name)
    (ck / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return to


def test_the_flags_and_model_option_reach_the_fused_options_and_leave_train_config(run):
    ck = run / "checkpoint"
    assert json.loads((ck / "fusion.json").read_text())["options"] == CHOSEN
    assert not set(CHOSEN) & set(json.loads((ck / "train_config.json").read_text()))
    assert {k: v for k, v in json.loads((run / "run.json").read_text())["model_options"].items()
            if k in CHOSEN} == CHOSEN
    loaded = load_checkpoint(ck)
    assert loaded.model.options.own() == CHOSEN
    card = loaded.model_kind.card(loaded.model)["model_config"]
    assert {k: card[k] for k in CHOSEN} == CHOSEN and card["embed_dim"] == 8
    assert not (ck / "mentions.json").exists() and "fit_on" not in json.loads((ck / "fusion.json").read_text())


@pytest.mark.parametrize("model, flags, message", [
    ("leam", ["--fit-on", "train"], "--model leam has no option 'fit_on' (--fit-on is the fused model's); leave out "
                                     "--fit-on, or train --model fused."),
    ("leam", ["--terminology", "auto"], "--terminology is the fused model's"),
    ("leam", ["--no-mentions"], "--mentions is the fused model's"),
    ("leam", ["--model-option", "fit_on=train"], "--model leam has no option 'fit_on'"),
    ("tfidf-lr", ["--fused-epochs", "3"], "--model tfidf-lr takes no model options, got --fused-epochs; they are the "
                                          "fused model's, leave them out."),
    ("fused", ["--fit-on", "train", "--model-option", "fit_on=train"], "--fit-on and --model-option fit_on both set"),
    ("fused", ["--model-option", "fit_on=dev"], "fit_on takes one of 'train+dev', 'train', got 'dev'"),
])
def test_a_fused_option_given_wrongly_is_one_line(demo_data, tmp_path, model, flags, message):
    fails(["train", "--data", demo_data, "--out", tmp_path / "run", "--model", model, "--device", "cpu", *flags],
          message)
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_written_before_reads_its_options_from_train_config_and_retrains(run, demo_data, tmp_path):
    from clinicode.training.run import retrain

    old = _as_before(run, tmp_path / "old")
    loaded = load_checkpoint(old / "checkpoint")
    assert loaded.model.options.own() == CHOSEN          # not the defaults (30 epochs, mentions, train+dev)
    assert loaded.train_config == TrainConfig(**{k: v for k, v in OLD_TRAIN_CONFIG.items() if k not in CHOSEN})
    for start in ("warm", "fresh"):
        out = tmp_path / f"retrained-{start}"
        retrain(checkpoint=loaded, out_dir=out, data_dir=demo_data, epochs=1, start=start)
        fusion = json.loads((out / "checkpoint" / "fusion.json").read_text())
        assert fusion["options"] == CHOSEN and "fit_on" not in fusion, start   # kept --fit-on train: no refit
        assert not (out / "checkpoint" / "mentions.json").exists()


def _refused_resume(args: list, message: str) -> None:
    """`train --resume` ends with exit status 1 and one error line holding MESSAGE, no traceback, and nothing before
    it: the options and the data are checked before the fused model fits its first part (`check_resume`)."""
    from clinicode.cli import app

    res = runner().invoke(app, [str(a) for a in args])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 1 and "Traceback" not in res.stderr + res.stdout, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.stderr
    assert "fitted" not in res.stdout, res.stdout


def test_a_run_started_before_refuses_to_resume(run, demo_data, tmp_path):
    old = _as_before(run, tmp_path / "old")
    state = json.loads((old / "state" / "state.json").read_text())
    state["train_config"] = {**state["train_config"], **CHOSEN}   # as state.json kept them then
    (old / "state" / "state.json").write_text(json.dumps(state))
    _refused_resume(["train", "--data", demo_data, "--out", old, *SMALL, "--fit-on", "train", "--no-mentions",
                     "--fused-epochs", "2", "--resume"],
                    "was started before fit_on, fused_epochs, mentions, terminology became the model kind's options")


def test_resume_compares_the_fused_options_with_the_runs(run, demo_data, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    _refused_resume(["train", "--data", demo_data, "--out", copy, *SMALL, "--no-mentions", "--model-option",
                     "fused_epochs=2", "--resume"],
                    "was started with other model options (fit_on: train then train+dev)")
