"""Run `predict` on a cluster engine (Dask, Spark, Ray Data): `score_partition`, one engine-neutral pandas function.

Each worker loads the checkpoint once and returns the records `clinicode predict` writes (docs/predict.md)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pandas as pd

from clinicode.config import PREDICT
from clinicode.predict import Prediction, Predictor
from clinicode.records import frame_records

OUTPUT_COLUMNS = ("id", "record")
_CACHE: dict[tuple[str, str], Predictor] = {}
_LOCK = threading.Lock()


def _predictor(checkpoint: str, device: str) -> Predictor:
    key = (str(Path(checkpoint).resolve()), device)
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = Predictor.from_checkpoint(key[0], device=device)
        return _CACHE[key]


def score_partition(
    df: pd.DataFrame,
    *,
    checkpoint: str,
    top_k: int | None = PREDICT.top_k,
    threshold: float | None = None,
    explain: int = PREDICT.explain,
    device: str = "cpu",
) -> pd.DataFrame:
    """Score one partition of notes.

    Args:
        df: columns `id` and `text` (other columns are ignored).
        checkpoint: run or checkpoint folder, readable by every worker.
    Returns:
        DataFrame with columns `id` (str) and `record` (the JSON output record, with `error` for bad notes),
        one row per input row, in order.
    """
    if len(df) == 0:
        return pd.DataFrame({"id": pd.Series([], dtype=str), "record": pd.Series([], dtype=str)})
    pred = _predictor(checkpoint, device)
    records = list(frame_records(df, "partition"))  # the same rules as `clinicode predict` (clinicode.records)
    good = [r for r in records if r.error is None]
    scored = iter(pred.predict([r.text for r in good], ids=[r.id for r in good], top_k=top_k, threshold=threshold,
                               explain=explain, attention=False))
    out = [(Prediction(r.id, error=r.error) if r.error else next(scored)).to_dict() for r in records]  # the one record
    return pd.DataFrame({"id": [r.id for r in records], "record": [json.dumps(o, ensure_ascii=False) for o in out]})
