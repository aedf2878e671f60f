"""A coded-notes folder's optional `evidence` column (gold mentions {code, start, end}) survives loading, .gz too."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from clinicode.data.prepared import load_dataset, read_split
from clinicode.errors import DataFormatError

TEXT = "Acute renal failure after lithium; no seizure."
ROWS = [
    {"id": "1", "text": TEXT, "labels": ["D058186"],
     "evidence": [{"code": "D058186", "start": 0, "end": 19}]},
    {"id": "2", "text": "Seizure.", "labels": ["D012640"], "evidence": []},
]


def _lines(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_evidence_survives_jsonl_and_jsonl_gz(tmp_path):
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    (plain / "dev.jsonl").write_text(_lines(ROWS), encoding="utf-8")
    with gzip.open(packed / "dev.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(_lines(ROWS))
    for folder in (plain, packed):
        df = read_split(folder, "dev")
        assert df["evidence"].tolist() == [[{"code": "D058186", "start": 0, "end": 19}], []]
        assert df["text"][0][0:19] == "Acute renal failure"


def test_evidence_survives_parquet_and_training_loads(tmp_path):
    pd.DataFrame(ROWS).to_parquet(tmp_path / "train.parquet")
    (tmp_path / "dev.jsonl").write_text(_lines(ROWS), encoding="utf-8")
    ds = load_dataset(tmp_path)
    assert ds.split("train")["evidence"].tolist() == [[{"code": "D058186", "start": 0, "end": 19}], []]
    assert ds.split("dev")["labels"].tolist() == [["D058186"], ["D012640"]]


def test_a_folder_without_evidence_has_no_column(tmp_path):
    (tmp_path / "dev.jsonl").write_text(_lines([{k: v for k, v in r.items() if k != "evidence"} for r in ROWS]),
                                        encoding="utf-8")
    assert list(read_split(tmp_path, "dev").columns) == ["id", "text", "labels"]


@pytest.mark.parametrize("bad", [[{"code": "D1", "start": 5, "end": 500}], [{"code": "D1", "start": 3}],
                                 [{"code": "D1", "start": 4, "end": 2}], ["D1"], [{"start": 0, "end": 2}]])
def test_a_bad_mention_is_one_line_naming_the_note(tmp_path, bad):
    (tmp_path / "dev.jsonl").write_text(_lines([{**ROWS[0], "evidence": bad}]), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"document '1' has an evidence entry .*character offsets") as err:
        read_split(tmp_path, "dev")
    assert TEXT not in str(err.value) and "\n" not in str(err.value)


def test_a_truncated_gzip_split_is_one_line(tmp_path):
    data = gzip.compress(_lines(ROWS * 50).encode())
    (tmp_path / "dev.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError, match=r"dev.jsonl.gz is not a complete gzip file"):
        read_split(Path(tmp_path), "dev")


def test_evidence_in_csv_is_a_json_string(tmp_path):
    pd.DataFrame([{"id": r["id"], "text": r["text"], "labels": ";".join(r["labels"]),
                   "evidence": json.dumps(r["evidence"]) if r["evidence"] else ""} for r in ROWS]).to_csv(
        tmp_path / "dev.csv", index=False)
    assert read_split(tmp_path, "dev")["evidence"].tolist() == [[{"code": "D058186", "start": 0, "end": 19}], []]
