"""Training asks the model kind (#45): the epoch loop builds, scores the loss and steps through the kind it is given,
a kind fitted whole gets the labels, the dev split and the seed, and a kind without options refuses LEAM's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from clinicode.config import TrainConfig
from clinicode.errors import ConfigError
from clinicode.models import MODEL_KINDS, kind_options, train_kind
from clinicode.models.leam.kind import LEAMKind
from clinicode.models.tfidf_lr.kind import TfidfLRKind
from clinicode.predict import Predictor
from clinicode.train import train

from conftest import TINY_MODEL
from helpers import fails, succeeds


def _small_data(folder: Path, *, single: bool = False) -> Path:
    """12 train and 12 dev notes over codes A and B (with SINGLE, one code a note: A, B or C)."""
    folder.mkdir()
    texts = ["fever cough", "rash itch", "fever rash"] if not single else ["fever cough", "rash itch", "knee pain"]
    codes = [["A"], ["B"], ["A", "B"]] if not single else [["A"], ["B"], ["C"]]
    for split in ("train", "dev"):
        rows = [{"id": f"{split}{i}", "text": texts[i % 3] + f" note {i}", "labels": codes[i % 3]} for i in range(12)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


class ProbeLoopKind(LEAMKind):
    """LEAM under another name that counts what the loop asks of it: the loop must go through the kind, not LEAM."""

    name = "probe-loop"

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.calls[what] = self.calls.get(what, 0) + 1

    def build(self, model_config):
        self._count("build")
        return super().build(model_config)

    def forward(self, model, ids, mask, *, plan, targets=None):
        self._count("forward")
        return super().forward(model, ids, mask, plan=plan, targets=targets)

    def loss(self, model, logits, y, *, pos_weight):
        self._count("loss")
        return super().loss(model, logits, y, pos_weight=pos_weight)

    def after_step(self, model) -> None:
        self._count("after_step")
        super().after_step(model)

    def epoch_stats(self, model):
        self._count("epoch_stats")
        return super().epoch_stats(model)


class ProbeWholeKind(TfidfLRKind):
    """tfidf-lr under another name that records what `fit` was given."""

    name = "probe-whole"

    def fit(self, data, options, *, loop):
        self.given = dict(texts=list(data.texts), y=data.y, labels=data.labels, dev_texts=list(data.dev_texts),
                          y_dev=data.y_dev, seed=data.config.seed, min_doc_freq=data.config.min_doc_freq,
                          options=options)
        return super().fit(data, options, loop=loop)


def test_the_epoch_loop_trains_whatever_kind_it_is_given(tmp_path, monkeypatch):
    kind = ProbeLoopKind()
    monkeypatch.setitem(MODEL_KINDS, kind.name, kind)
    data = _small_data(tmp_path / "data", single=True)  # single-label: every epoch's model is usable
    res = train(out_dir=tmp_path / "run", config=TrainConfig(model=kind.name, epochs=2, batch_size=8, w2v_epochs=1,
                                                             seed=3, device="cpu"),
                data_dir=data, model_options={**TINY_MODEL, "embed_dim": 8, "hidden_dim": 8}, progress=False)
    steps = sum(-(-12 // 8) for _ in range(2))  # two epochs of 12 notes in batches of 8
    calls = kind.calls
    assert (calls["build"], calls["after_step"], calls["epoch_stats"]) == (1, steps, 2)
    # every step's forward and loss through the kind (plus the time estimate's few measured ones before epoch 1)
    assert calls["forward"] == calls["loss"] >= steps
    manifest = json.loads((tmp_path / "run" / "checkpoint" / "manifest.json").read_text())
    assert manifest["model"] == kind.name and res["best_epoch"] >= 1
    assert Predictor.from_checkpoint(tmp_path / "run", device="cpu").kind == kind.name


def test_a_kind_fitted_whole_gets_labels_the_dev_split_and_the_seed(tmp_path, monkeypatch):
    kind = ProbeWholeKind()
    monkeypatch.setitem(MODEL_KINDS, kind.name, kind)
    data = _small_data(tmp_path / "data")
    train(out_dir=tmp_path / "run", config=TrainConfig(model=kind.name, seed=11, min_doc_freq=2), data_dir=data,
          progress=False)
    given = kind.given
    assert list(given["labels"].codes) == ["A", "B"] and given["seed"] == 11 and given["min_doc_freq"] == 2
    assert given["options"] is None  # a kind without options is given none
    assert len(given["texts"]) == 12 and given["y"].shape == (12, 2)
    assert given["dev_texts"][0].startswith("fever cough note 0") and given["y_dev"].shape == (12, 2)
    both = given["dev_texts"].index("fever rash note 2")   # in id order: dev0, dev1, dev10, dev11, dev2, ...
    assert np.array_equal(given["y_dev"][both], [1, 1]) and both == 4
    assert kind.loop_model is None and MODEL_KINDS["leam"].loop_model is MODEL_KINDS["leam"]


@pytest.mark.parametrize("given", [{"embed_dim": 8}, {"code_evidence": False}])
def test_a_kind_without_options_refuses_leams_in_one_line_and_writes_nothing(tmp_path, given):
    data = _small_data(tmp_path / "data")
    with pytest.raises(ConfigError, match=f"--model tfidf-lr takes no model options, got {next(iter(given))}"):
        train(out_dir=tmp_path / "run", config=TrainConfig(model="tfidf-lr"), data_dir=data, model_options=given,
              progress=False)
    assert not (tmp_path / "run").exists()
    assert kind_options(train_kind("tfidf-lr"), {}) is None and kind_options(train_kind("tfidf-lr"), None) is None
    assert kind_options(train_kind("leam"), {"embed_dim": 8}).embed_dim == 8


def test_train_cli_refuses_leam_flags_for_tfidf_lr_and_saves_no_options_without_them(tmp_path):
    data = _small_data(tmp_path / "data")
    fails(["train", "--data", data, "--out", tmp_path / "bad", "--model", "tfidf-lr", "--embed-dim", "8",
           "--no-progress"], "--model tfidf-lr takes no model options, got --embed-dim")
    fails(["train", "--data", data, "--out", tmp_path / "bad", "--model", "tfidf-lr", "--paper", "--no-progress"],
          "got --paper")
    assert not (tmp_path / "bad").exists()
    succeeds(["train", "--data", data, "--out", tmp_path / "run", "--model", "tfidf-lr", "--no-progress"])
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["model_options"] == {}  # LEAM's defaults are no longer saved as if they applied


class AroundTheLoopKind(LEAMKind):
    """A kind whose training is its own plain code around the loop (as the fused model's): a part fitted first, the
    loop over LEAM's kind for one epoch, a part made after; nothing for `train` to find by name."""

    name = "around-loop"

    def fit(self, data, options, *, loop):
        data.say(f"{self.name}: {len(data.texts)} notes before the loop")
        trained = loop(MODEL_KINDS["leam"].loop_model, options, epochs=1)
        data.say(f"{self.name}: after the loop, {len(trained.result['history'])} epoch")
        return trained


def test_a_kind_runs_the_loop_from_its_own_fit_and_says_its_own_lines(tmp_path, monkeypatch):
    kind = AroundTheLoopKind()
    monkeypatch.setitem(MODEL_KINDS, kind.name, kind)
    data = _small_data(tmp_path / "data", single=True)
    lines: list[str] = []
    res = train(out_dir=tmp_path / "run", config=TrainConfig(model=kind.name, epochs=3, batch_size=8, w2v_epochs=1,
                                                             seed=3, device="cpu"),
                data_dir=data, model_options={**TINY_MODEL, "embed_dim": 8, "hidden_dim": 8}, progress=False,
                report=lines.append)
    assert lines[0] == "around-loop: 12 notes before the loop" and lines[-1] == "around-loop: after the loop, 1 epoch"
    assert len(res["history"]) == 1                     # the kind's cap on the loop's epochs, not --epochs 3
    manifest = json.loads((tmp_path / "run" / "checkpoint" / "manifest.json").read_text())
    assert manifest["model"] == kind.name and manifest["epoch"] == 1


def test_training_names_no_kind_and_finds_no_hook():
    """One path for every kind: `train` asks a kind only what `ModelKind` declares (no `hasattr`), and names none."""
    import ast

    import clinicode.training.finish as finish_mod
    import clinicode.training.loop as loop_mod
    import clinicode.training.run as run_mod

    for mod in (run_mod, loop_mod, finish_mod):
        tree = ast.parse(Path(mod.__file__).read_text())
        calls = [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        assert "hasattr" not in calls, mod.__name__
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not strings & set(MODEL_KINDS), (mod.__name__, strings & set(MODEL_KINDS))
    for kind in MODEL_KINDS.values():
        assert not any(hasattr(kind, hook) for hook in ("before_loop", "after_loop", "refit", "loop_kind")), kind.name


def test_the_loop_asks_a_loop_model_and_no_kind_forwards_it():
    """The epoch loop's questions are `LoopModel`'s, not `ModelKind`'s: the fused kind hands the loop LEAM's kind and
    forwards none of them."""
    from clinicode.models import ModelKind
    from clinicode.models.fitting import LoopModel

    loop_questions = {"build", "forward", "loss", "after_step", "epoch_stats", "load_weights", "memory_plan",
                      "model_config", "start_from", "vector_dim"}
    assert loop_questions <= set(vars(LoopModel)) and not loop_questions & set(vars(ModelKind))
    fused = MODEL_KINDS["fused"]
    assert fused.loop_model is MODEL_KINDS["leam"] and not any(hasattr(fused, q) for q in loop_questions)
