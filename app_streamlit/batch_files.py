"""Batch scoring without Streamlit: an upload -> records -> scores -> the bytes of the CLI's output files.

Through clinicode's own readers and writers: the page's records are those `clinicode predict` writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from render import MAX_UPLOAD_MB


@dataclass
class BatchInput:
    """Parsed upload: one row per record (id, text, error) or a file-level error message."""

    rows: pd.DataFrame
    error: str | None = None


def parse_batch(data: bytes, filename: str, *, max_bytes: int = MAX_UPLOAD_MB * 1024 * 1024) -> BatchInput:
    """Read an uploaded file of notes through clinicode's one record reader, without raising.

    Bad records (invalid JSON, no text, non-string or blank text) keep a row with an `error`; a bad file (too big,
    not UTF-8, unknown type, a table without a `text` column) gives `error` and no rows. The formats and messages
    are those of `clinicode predict` (`clinicode.records.read_records`): .csv, .jsonl, .parquet or .txt.

    Args:
        data: the file's bytes.
        filename: its name; the extension picks the format.
        max_bytes: refuse larger uploads.
    Returns:
        BatchInput with rows [id, text, error] in file order.
    """
    from clinicode.serving import DataFormatError, Upload, read_records

    empty = pd.DataFrame(columns=["id", "text", "error"], dtype=object)
    if len(data) > max_bytes:
        return BatchInput(empty,
                          f"{filename}: {len(data) / 1e6:.1f} MB is over the {max_bytes / 2**20:.0f} "
                          "MB limit; split the file.")
    try:
        rows = [{"id": r.id, "text": r.text, "error": r.error} for r in read_records(Upload(filename, data))]
    except DataFormatError as err:
        return BatchInput(empty, str(err))
    # object dtype keeps None as None (pandas 3 would turn a str column's None into NaN)
    return BatchInput(pd.DataFrame(rows, columns=["id", "text", "error"], dtype=object))


def score_batch(
    predictor: Any,
    rows: pd.DataFrame,
    *,
    threshold: float,
    chunk: int = 32,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Score parsed rows with the CLI's scorer (`clinicode.predict_io.score_records`) into the CLI's output records.

    A row that cannot be read keeps its error; if scoring itself fails, the rows not yet scored get an error record
    ("could not score (...)") and the page goes on.

    Args:
        predictor: a `clinicode.predict.Predictor`.
        rows: [id, text, error] from `parse_batch`.
        threshold: codes scoring above it are predicted (a single-label model predicts its top code).
        chunk: notes per scoring step (and per progress step).
        on_progress: called with (done, total) after each chunk.
    Returns:
        One `Prediction.to_dict()` record per row, in row order (no note text).
    """
    from clinicode.serving import Record, score_records

    recs = [Record(str(r["id"]), r["text"], r["error"] if isinstance(r["error"], str) else None)
            for r in rows.to_dict("records")]
    out: list[dict[str, Any]] = []
    try:
        for _, preds in score_records(predictor, recs, threshold=threshold, explain=0, chunk=chunk):
            out.extend(p.to_dict() for p in preds)
            if on_progress is not None:
                on_progress(len(out), len(recs))
    except Exception as err:  # a failing scorer must not crash the page
        out.extend({"id": r.id, "error": r.error or f"could not score ({type(err).__name__})"} for r in recs[len(out):])
        if on_progress is not None:
            on_progress(len(out), len(recs))
    return out


def batch_table(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The batch page's view of output records: id, codes (";"-joined, best first), n_codes, top_code, top_score,
    scores (JSON of the predicted codes' probabilities), from_terminology (the predicted codes scored from a
    terminology's titles alone, ";"-joined, as the CSV output's column) and error (None when fine)."""
    rows = []
    for r in records:
        predicted = r.get("predicted", [])
        top_code, top_score = next(iter((r.get("scores") or {}).items()), (None, None))
        rows.append({"id": r["id"], "codes": ";".join(p["code"] for p in predicted), "n_codes": len(predicted),
                     "top_code": top_code, "top_score": None if top_score is None else float(top_score),
                     "scores": json.dumps({p["code"]: round(float(p["score"]), 6) for p in predicted}),
                     "from_terminology": ";".join(p["code"] for p in predicted if p.get("source") == "terminology"),
                     "error": r.get("error")})
    df = pd.DataFrame(rows, columns=["id", "codes", "n_codes", "top_code", "top_score", "scores", "from_terminology",
                                     "error"])
    df["error"] = pd.Series([r["error"] for r in rows], dtype=object, index=df.index)  # None stays None
    return df


def download_formats() -> list[Any]:
    """The output formats the batch page offers as downloads: the writers that say the app may offer them."""
    from clinicode.serving import offered_writers

    return offered_writers("app")


def batch_bytes(records: Sequence[Mapping[str, Any]], fmt: str) -> bytes:
    """The records as the file `clinicode predict --output x.jsonl` (fmt "jsonl") or `x.csv` ("csv") writes: the
    output formats' writer (`clinicode.formats`, through `records_bytes`), which predict's files go through too."""
    from clinicode.serving import records_bytes

    return records_bytes(records, fmt=fmt)
