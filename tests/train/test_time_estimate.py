"""The loop's time estimate (a few measured training steps before epoch 1) is measured only when someone reads it:
a `report` (the train command's lines) or the log at INFO (--verbose); `review retrain` passes neither, so its warm
start spends nothing on it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import clinicode.training.loop as loop
from clinicode.config import TrainConfig
from clinicode.train import train

from conftest import TINY_MODEL


def _small_data(folder: Path) -> Path:
    folder.mkdir()
    texts, codes = ["fever cough", "rash itch", "knee pain"], [["A"], ["B"], ["C"]]
    for split in ("train", "dev"):
        rows = [{"id": f"{split}{i}", "text": texts[i % 3] + f" note {i}", "labels": codes[i % 3]} for i in range(12)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_the_time_estimate_is_measured_only_when_someone_reads_it(tmp_path, monkeypatch, caplog):
    measured = []
    real = loop.estimate
    monkeypatch.setattr(loop, "estimate", lambda setup: measured.append(1) or real(setup))
    data = _small_data(tmp_path / "data")
    cfg = TrainConfig(model="leam", epochs=1, batch_size=8, w2v_epochs=1, seed=3, device="cpu")
    caplog.set_level(logging.WARNING, logger="clinicode.train")
    train(out_dir=tmp_path / "quiet", config=cfg, data_dir=data, model_options=TINY_MODEL, progress=False)
    assert measured == []                                      # nobody reads it: not measured
    lines: list[str] = []
    train(out_dir=tmp_path / "told", config=cfg, data_dir=data, model_options=TINY_MODEL, progress=False,
          report=lines.append)
    assert measured == [1] and any(line.startswith("time estimate: ~") for line in lines)
    caplog.set_level(logging.INFO, logger="clinicode.train")
    train(out_dir=tmp_path / "verbose", config=cfg, data_dir=data, model_options=TINY_MODEL, progress=False)
    assert measured == [1, 1] and any(r.getMessage().startswith("time estimate: ~") for r in caplog.records)
