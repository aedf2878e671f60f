"""Fixtures of the benchmark scripts' tests."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest


@pytest.fixture
def coded_notes(demo_data: Path, tmp_path: Path):
    """A function (name, train, dev, test notes) -> a folder of the first synthetic prepared notes as
    {train,dev,test}.jsonl, the public sets' shape."""

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
