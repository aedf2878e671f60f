"""load_dataset: the read side of prepared datasets (parquet / JSONL / CSV), on real sets and bad inputs."""

import json
from pathlib import Path

import pandas as pd
import pytest

from clinicode.data.labels import LabelSet
from clinicode.data.prepare import prepare_mimic
from clinicode.data.prepared import PreparedDataset, load_dataset
from clinicode.errors import DataFormatError
from clinicode.synthetic.mimic3 import write_demo_mimic

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
REAL = {"hoc": (1286, 211, 355), "mtsamples": (1651, 243, 483), "cmc2007-radiology-icd9": (684, 93, 201)}


def _jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def folder(tmp_path):
    _jsonl(tmp_path / "train.jsonl", [
        {"id": 1, "text": "chest pain", "labels": ["b", "a"], "split": "train"},
        {"id": 2, "text": "fever", "labels": ["a"]},
        {"id": 3, "text": "cough", "labels": []},
    ])
    _jsonl(tmp_path / "dev.jsonl", [{"id": "d1", "text": "rash", "labels": ["a", "z"]}])
    return tmp_path


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_sets_load(name):
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"{path} not available")
    ds = load_dataset(path)
    assert tuple(len(ds.split(s)) for s in ("train", "dev", "test")) == REAL[name]
    for df in ds.splits.values():
        assert list(df.columns[:3]) == ["id", "text", "labels"]
        assert all(isinstance(i, str) for i in df["id"])
        assert all(isinstance(lab, list) and set(lab) <= set(ds.labels.codes) for lab in df["labels"])
    if name == "hoc":
        assert sum(not lab for lab in ds.split("train")["labels"]) + sum(
            not lab for s in ("dev", "test") for lab in ds.split(s)["labels"]) == 272
    top = load_dataset(path, top_k=3)
    assert len(top.labels) == 3
    assert all(lab for df in top.splits.values() for lab in df["labels"])


def test_jsonl_folder_without_labels_json(folder):
    ds = load_dataset(folder)
    assert isinstance(ds, PreparedDataset) and ds.manifest == {}
    assert ds.labels.codes == ("a", "b")
    train = ds.split("train")
    assert train["id"].tolist() == ["1", "2", "3"]
    assert train["labels"].tolist() == [["a", "b"], ["a"], []]  # sorted by label index, empty kept
    assert ds.split("dev")["labels"].tolist() == [["a"]]
    assert ds.stats["unseen_label_occurrences"] == {"dev": 1}
    assert "test" not in ds.splits
    with pytest.raises(DataFormatError, match=r"split 'test' not in .*available splits: train, dev"):
        ds.split("test")


def test_top_k_ties_by_code_string(tmp_path):
    _jsonl(tmp_path / "train.jsonl", [
        {"id": "1", "text": "t", "labels": ["c", "b"]}, {"id": "2", "text": "t", "labels": ["c", "a"]},
        {"id": "3", "text": "t", "labels": ["d"]},
    ])
    _jsonl(tmp_path / "dev.jsonl", [{"id": "4", "text": "t", "labels": ["d"]}, {"id": "5", "text": "t",
                                                                                "labels": ["a"]}])
    ds = load_dataset(tmp_path, top_k=2)
    assert ds.labels.codes == ("a", "c")
    assert ds.split("train")["id"].tolist() == ["1", "2"]
    assert ds.split("dev")["id"].tolist() == ["5"]
    assert ds.stats["documents_without_top_k_label"] == {"train": 1, "dev": 1}


def test_csv_with_semicolon_labels_and_extra_columns(tmp_path):
    pd.DataFrame({"id": [10, 11], "text": ["a b", "c, d"], "labels": ["x;y", ""], "extra": [1, 2]}).to_csv(
        tmp_path / "train.csv", index=False)
    pd.DataFrame({"id": ["007"], "text": ["e"], "labels": ["y"]}).to_csv(tmp_path / "dev.csv", index=False)
    ds = load_dataset(tmp_path)
    assert ds.split("train")["labels"].tolist() == [["x", "y"], []]
    assert list(ds.split("train").columns) == ["id", "text", "labels"]
    assert ds.split("dev")["id"].tolist() == ["007"]


def test_prepared_mimic_roundtrip(tmp_path):
    write_demo_mimic(tmp_path / "mimic", n_admissions=150, seed=5)
    summary = prepare_mimic(tmp_path / "mimic", tmp_path / "prep")
    ds = load_dataset(tmp_path / "prep")
    assert len(ds.labels) == 50 and ds.labels.description("401.9") == "Unspecified essential hypertension"
    assert ds.manifest["summary"] == summary
    assert {s: len(df) for s, df in ds.splits.items()} == summary["splits"]
    assert "subject_id" in ds.split("train").columns


def test_labels_json_rejects_unknown_code(folder):
    LabelSet.from_codes(["a", "b"]).save(folder / "labels.json")
    with pytest.raises(DataFormatError,
                       match=r"dev split of .*: 1 label\(s\) of 1 code\(s\) not in labels.json, e.g. 'z'; add"):
        load_dataset(folder)


def test_missing_folder_and_split(tmp_path, folder):
    with pytest.raises(DataFormatError, match=r"dataset folder .*nope does not exist"):
        load_dataset(tmp_path / "nope")
    (folder / "dev.jsonl").unlink()
    with pytest.raises(DataFormatError, match=r"has no dev split; expected dev.parquet, dev.jsonl or dev.csv"):
        load_dataset(folder)


def test_missing_column(folder):
    _jsonl(folder / "dev.jsonl", [{"id": "d1", "body": "rash", "labels": []}])
    with pytest.raises(DataFormatError, match=r"dev.jsonl has no column 'text'; found id, labels"):
        load_dataset(folder)


def test_non_utf8(folder):
    (folder / "dev.jsonl").write_bytes(b'{"id": "d1", "text": "caf\xe9", "labels": []}\n')
    with pytest.raises(DataFormatError, match=r"dev.jsonl is not valid UTF-8 \(bad byte near offset 25\)"):
        load_dataset(folder)


def test_empty_file(folder):
    (folder / "train.jsonl").write_text("")
    with pytest.raises(DataFormatError, match=r"train.jsonl is empty"):
        load_dataset(folder)
    (folder / "train.jsonl").unlink()
    (folder / "train.csv").write_text("id,text,labels\n")
    with pytest.raises(DataFormatError, match=r"train.csv has no documents"):
        load_dataset(folder)


def test_duplicate_ids_named_without_text(folder):
    _jsonl(folder / "dev.jsonl", [{"id": 7, "text": "SECRET NOTE", "labels": []}, {"id": "7", "text": "x",
                                                                                   "labels": []}])
    with pytest.raises(DataFormatError, match=r"dev.jsonl: 1 duplicate id\(s\), e.g. '7'") as exc:
        load_dataset(folder)
    assert "SECRET" not in str(exc.value)


@pytest.mark.parametrize("text", ["", "   ", None])
def test_empty_text(folder, text):
    _jsonl(folder / "dev.jsonl", [{"id": "d1", "text": "ok", "labels": []}, {"id": "d2", "text": text, "labels": []}])
    with pytest.raises(DataFormatError, match=r"dev.jsonl: 1 document\(s\) with empty or missing text, e.g. id 'd2'"):
        load_dataset(folder)


def test_nan_text_in_csv(tmp_path, folder):
    (folder / "dev.jsonl").unlink()
    (folder / "dev.csv").write_text("id,text,labels\nd1,,a\n")
    with pytest.raises(DataFormatError, match=r"dev.csv: 1 document\(s\) with empty or missing text"):
        load_dataset(folder)


def test_labels_not_a_list(folder):
    _jsonl(folder / "dev.jsonl", [{"id": "d1", "text": "ok", "labels": "a"}])
    with pytest.raises(DataFormatError, match=r"document 'd1' has labels of type str; expected a list"):
        load_dataset(folder)


def test_bad_json_line(folder):
    (folder / "dev.jsonl").write_text('{"id": "d1", "text": "ok", "labels": []}\n{broken\n')
    with pytest.raises(DataFormatError, match=r"dev.jsonl line 2: not valid JSON"):
        load_dataset(folder)
