"""Shared fixtures: a synthetic MIMIC-shaped folder, its prepared dataset and a tiny trained LEAM run (built once)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED = Path(__file__).resolve().parents[2] / "shared"
SHARED_DATA = SHARED / "data"
MIMIC_ENV = "CLINICODE_MIMIC_DIR"  # a folder holding real MIMIC-III v1.4 tables: `mimic` tests run only then


def pytest_collection_modifyitems(config, items) -> None:
    """`gpu` tests run where CUDA exists, `mimic` tests where CLINICODE_MIMIC_DIR names real MIMIC-III."""
    needs_gpu = [i for i in items if "gpu" in i.keywords]
    if needs_gpu:
        import torch

        if not torch.cuda.is_available():
            for item in needs_gpu:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)"))
    if not os.environ.get(MIMIC_ENV):
        for item in items:
            if "mimic" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=f"needs real MIMIC-III: set {MIMIC_ENV} to its folder"))


@pytest.fixture(scope="session")
def demo_mimic(tmp_path_factory) -> Path:
    """A small synthetic MIMIC-III-shaped folder (no real patient data)."""
    from clinicode.synthetic.mimic3 import write_demo_mimic

    out = tmp_path_factory.mktemp("demo") / "mimic"
    write_demo_mimic(out, n_admissions=600, seed=0)
    return out


@pytest.fixture(scope="session")
def demo_data(demo_mimic, tmp_path_factory) -> Path:
    """The prepared dataset of `demo_mimic` (CAML top-50 label set, patient-grouped split)."""
    from clinicode.data.prepare import prepare_mimic

    out = tmp_path_factory.mktemp("prepared") / "data"
    prepare_mimic(demo_mimic, out)
    return out


@pytest.fixture
def coded_notes(demo_data: Path, tmp_path: Path):
    """A function (name, train, dev, test notes) -> a folder of the first synthetic prepared notes as
    {train,dev,test}.jsonl, the public sets' shape (the review benchmarks' tests)."""
    import json

    import pandas as pd

    def make(name: str, train: int, dev: int, test: int) -> Path:
        out = tmp_path / name
        out.mkdir()
        for split, n in (("train", train), ("dev", dev), ("test", test)):
            df = pd.read_parquet(demo_data / f"{split}.parquet").head(n)
            (out / f"{split}.jsonl").write_text("".join(
                json.dumps({"id": str(i), "text": t, "labels": list(lab)}) + "\n"
                for i, t, lab in zip(df["id"], df["text"], df["labels"])))
        return out

    return make


# The paper's model (code_evidence and window_nonneg off, as `train --paper`), as these fixtures were before the
# defaults changed: the tests built on them test the pipeline around the paper's LEAM; the default model has its own
# (tests/model/test_code_evidence.py, tests/train/test_code_evidence_run.py).
TINY_MODEL = dict(embed_dim=32, radius=3, hidden_dim=64, dropout=0.2, code_evidence=False, window_nonneg=False)
# `tiny_run`'s options as `clinicode train` flags: a run trained with them is tiny_run's twin, so --resume accepts them.
# TINY_SIZES: the same sizes and training options without the model switch (for runs of LEAM with code evidence, the
# leam kind: the default before the fused model, #41, which has its own tests in tests/train/test_fused.py).
TINY_SIZES = ["--model", "leam", "--embed-dim", "32", "--window", "3", "--hidden-dim", "64", "--dropout", "0.2",
              "--epochs", "8", "--lr", "0.02", "--w2v-epochs", "2", "--patience", "3", "--seed", "7", "--device", "cpu",
              "--no-progress"]
TINY_CLI = ["--paper", *TINY_SIZES]


@pytest.fixture(scope="session")
def tiny_run(demo_data, tmp_path_factory) -> Path:
    """A LEAM run trained for a few epochs on the demo data; RUN/checkpoint is the checkpoint."""
    from clinicode.config import TrainConfig
    from clinicode.train import train

    run = tmp_path_factory.mktemp("runs") / "tiny"
    cfg = TrainConfig(model="leam", epochs=8, batch_size=16, lr=2e-2, w2v_epochs=2, patience=3, seed=7,
                      device="cpu")
    train(out_dir=run, config=cfg, data_dir=demo_data, model_options=TINY_MODEL, progress=False)
    return run


# The in-process service the serve tests share (hostile rounds): the tiny checkpoint behind `create_app`, one per
# module. A module that needs another setup defines its own fixture of the same name.
SERVE_BASE_URL = "http://127.0.0.1:8000"   # a Host the service accepts (it is bound to loopback)


@pytest.fixture(scope="module")
def predictor(tiny_run):
    from clinicode.predict import Predictor

    return Predictor.from_checkpoint(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def note(demo_data):
    import pandas as pd

    return str(pd.read_parquet(demo_data / "test.parquet")["text"].iloc[0])


@pytest.fixture(scope="module")
def client(predictor):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from clinicode.config import ServeConfig
    from clinicode.serve import create_app

    with TestClient(create_app(predictor, limits=ServeConfig(batch_wait_ms=1)), base_url=SERVE_BASE_URL) as c:
        yield c
