"""Handing freed memory back between training's phases (issue 29's peak RSS) leaves every number as it was."""

from __future__ import annotations

import numpy as np
import torch
from safetensors.numpy import load_file

from clinicode.config import TrainConfig
from clinicode.runtime import release_freed_memory
from clinicode.training.loop import pos_weight
from tests.conftest import TINY_MODEL


def _cfg() -> TrainConfig:
    return TrainConfig(model="leam", epochs=2, batch_size=16, lr=2e-2, w2v_epochs=2, patience=3, seed=11, device="cpu")


def test_release_freed_memory_trims_the_heap_on_linux():
    assert release_freed_memory() is True  # glibc (the project's Linux images): malloc_trim is found and called


def test_a_run_with_the_releases_equals_one_without_them(demo_data, tmp_path, monkeypatch):
    import clinicode.train as train_mod
    import clinicode.training.loop as loop_mod

    with_release = train_mod.train(out_dir=tmp_path / "with", config=_cfg(), data_dir=demo_data,
                                   model_options=TINY_MODEL, progress=False)
    monkeypatch.setattr(loop_mod, "release_freed_memory", lambda: False)
    monkeypatch.setattr(loop_mod.TrainingSetup, "release_training", lambda self: None)
    without = train_mod.train(out_dir=tmp_path / "without", config=_cfg(), data_dir=demo_data,
                              model_options=TINY_MODEL, progress=False)
    a = load_file(str(tmp_path / "with" / "checkpoint" / "model.safetensors"))
    b = load_file(str(tmp_path / "without" / "checkpoint" / "model.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert with_release["test"] == without["test"] and with_release["dev"] == without["dev"]
    sa, sb = np.load(tmp_path / "with" / "scores_test.npz"), np.load(tmp_path / "without" / "scores_test.npz")
    assert np.array_equal(sa["scores"], sb["scores"])


def test_labels_held_as_bytes_give_the_float_labels_and_weights_exactly():
    rng = np.random.default_rng(0)
    y = (rng.random((300, 40)) < 0.1).astype(np.float32)
    y[:, 3] = 0.0  # a code without positives (pos_weight's clamp)
    as_bytes = torch.from_numpy(y).to(torch.uint8)
    rows = np.array([5, 0, 299, 17])
    assert torch.equal(as_bytes[rows].float(), torch.from_numpy(y)[rows])
    assert as_bytes[rows].float().dtype == torch.float32
    for alpha in (0.5, 1.0):
        assert torch.equal(pos_weight(as_bytes, alpha), pos_weight(torch.from_numpy(y), alpha))
