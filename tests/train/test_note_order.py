"""A model is fitted from the notes, not from the order a file lists them in: the same notes in another order (as
`review retrain`'s data lists the decided notes first) train the same checkpoint, and test keeps the file's order."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
from safetensors.numpy import load_file

from clinicode.config import TrainConfig
from clinicode.train import train


def _shuffled_copy(data, out):
    shutil.copytree(data, out)
    for split in ("train", "dev"):
        path = out / f"{split}.jsonl"
        lines = path.read_text().splitlines()
        random.Random(1).shuffle(lines)
        path.write_text("\n".join(lines) + "\n")
    return out


def test_the_same_notes_in_another_order_train_the_same_checkpoint(coded_notes, tmp_path):
    given = coded_notes("given", 120, 40, 30)
    moved = _shuffled_copy(given, tmp_path / "moved")
    assert (moved / "train.jsonl").read_text() != (given / "train.jsonl").read_text()
    cfg = TrainConfig(model="fused", epochs=3, batch_size=16, lr=2e-2, w2v_epochs=1, seed=7, device="cpu")
    for name, data in (("a", given), ("b", moved)):
        train(out_dir=tmp_path / name, config=cfg, data_dir=data, progress=False)
    a, b = tmp_path / "a" / "checkpoint", tmp_path / "b" / "checkpoint"
    tensors = sorted(p.name for p in a.glob("*.safetensors"))
    assert {"model.safetensors", "tfidf_lr.safetensors", "fusion.safetensors"} <= set(tensors)
    for name in tensors:
        wa, wb = load_file(str(a / name)), load_file(str(b / name))
        assert wa.keys() == wb.keys()
        for key in wa:
            np.testing.assert_array_equal(wa[key], wb[key], err_msg=f"{name} {key}")
    for name in ("threshold.json", "metrics_dev.json", "metrics_test.json", "tokenizer.json"):
        assert json.loads((a / name).read_text()) == json.loads((b / name).read_text()), name
    sa, sb = np.load(tmp_path / "a" / "scores_test.npz"), np.load(tmp_path / "b" / "scores_test.npz")
    for key in sa.files:
        np.testing.assert_array_equal(sa[key], sb[key])


def test_test_scores_keep_the_files_order(coded_notes, tmp_path):
    given = coded_notes("given", 60, 20, 30)
    test_ids = [json.loads(line)["id"] for line in (given / "test.jsonl").read_text().splitlines()]
    reordered = test_ids[::-1]
    lines = {json.loads(line)["id"]: line for line in (given / "test.jsonl").read_text().splitlines()}
    (given / "test.jsonl").write_text("\n".join(lines[i] for i in reordered) + "\n")
    cfg = TrainConfig(model="tfidf-lr", seed=7, device="cpu")
    train(out_dir=tmp_path / "run", config=cfg, data_dir=given, progress=False)
    scores = np.load(tmp_path / "run" / "scores_test.npz", allow_pickle=False)
    assert [str(i) for i in scores["ids"]] == reordered
