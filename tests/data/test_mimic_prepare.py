"""MIMIC-III readers, split lists and prepare_mimic: the data contract on tiny and synthetic folders."""

import csv
import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clinicode.codes.icd9 import format_diagnosis, format_procedure
from clinicode.constants import CAML50_SPLIT_COUNTS, CAML_TOP50, SPLITS
from clinicode.data import prepare as prepare_module
from clinicode.data.mimic import find_table, read_codes, read_discharge_summaries
from clinicode.data.prepare import NOT_COMPARABLE, prepare_mimic
from clinicode.data.splits import read_splits
from clinicode.errors import ConfigError, DataFormatError
from clinicode.synthetic.mimic3 import write_demo_mimic

CAML_IDS = Path(__file__).resolve().parents[3] / "shared" / "data" / "caml-mimic-ids"
NOTE_HEADER = ["ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CHARTTIME", "STORETIME", "CATEGORY",
               "DESCRIPTION", "CGID", "ISERROR", "TEXT"]
CODE_HEADER = ["ROW_ID", "SUBJECT_ID", "HADM_ID", "SEQ_NUM", "ICD9_CODE"]


def _write(path: Path, header, rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def make_tiny(folder: Path) -> Path:
    """A hand-written MIMIC-shaped folder with every trap, small enough to check by eye."""
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "NOTEEVENTS.csv", NOTE_HEADER, [
        # The addendum is stored first and has the lower ROW_ID; clinicode still puts the report first.
        (1, 1, 100, "2150-01-05", "", "", "Discharge summary", "Addendum", "", "", "ADDENDUM-A, with comma"),
        (2, 1, 100, "2150-01-04", "", "", "Discharge summary", "Report", "", "", "REPORT-A line one\nline \"two\""),
        (3, 1, 100, "2150-01-04", "", "", "Nursing/other", "Report", "", "", "NURSING-A"),
        (4, 2, 200, "2150-02-01", "", "", "Discharge summary", "Report", "", "", "REPORT-B"),
        (5, 2, 200, "2150-02-01", "", "", "Discharge summary", "Addendum", "", "", "ADDENDUM-B2"),
        (6, 2, 200, "2150-01-31", "", "", "Discharge summary", "Addendum", "", "", "ADDENDUM-B1"),
        (7, 3, "", "2150-03-01", "", "", "Discharge summary", "Report", "", "", "NO-HADM"),
        (8, 4, 400, "2150-04-01", "", "", "Discharge summary", "Report", "", "", "REPORT-D only outside codes"),
        (9, 5, 500, "2150-05-01", "", "", "Radiology", "CHEST", "", "", "RADIOLOGY-E"),
        (10, 6, 600, "2150-06-01", "", "", "Discharge summary", "Report", "", "", "REPORT-F"),
    ])
    _write(folder / "DIAGNOSES_ICD.csv", CODE_HEADER, [
        (1, 1, 100, 1, "4019"), (2, 1, 100, 2, "4019"), (3, 1, 100, 3, "0389"), (4, 1, 100, 4, "E8497"),
        (5, 1, 100, 5, ""), (6, 2, 200, 1, "V5861"), (7, 2, 200, 2, "25000"), (8, 4, 400, 1, "V1046"),
        (9, 5, 500, 1, "4019"), (10, 9, "", 1, "4280"), (11, 6, 600, 1, "4280"),
    ])
    _write(folder / "PROCEDURES_ICD.csv", CODE_HEADER, [
        (1, 1, 100, 1, "9604"), (2, 2, 200, 1, "0040"), (3, 2, 200, 2, "3893"), (4, 6, 600, 1, "966"),
    ])
    _write(folder / "D_ICD_DIAGNOSES.csv", ["ROW_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"], [
        (1, "4019", "Hypertension NOS", "Unspecified essential hypertension"), (2, "0389", "Septicemia NOS",
                                                                                "Unspecified septicemia"),
    ])
    _write(folder / "D_ICD_PROCEDURES.csv", ["ROW_ID", "ICD9_CODE", "SHORT_TITLE", "LONG_TITLE"], [
        (1, "9604", "Insert endotracheal tube", "Insertion of endotracheal tube"), (2, "0040", "Proc-one vessel",
                                                                                    "Adjunct vascular system "
                                                                                    "procedure on single vessel"),
    ])
    return folder


def _all_docs(out: Path) -> pd.DataFrame:
    frames = [pd.read_parquet(out / f"{s}.parquet").assign(split=s) for s in SPLITS]
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny(tmp_path_factory.mktemp("tiny") / "mimic")


@pytest.fixture(scope="module")
def tiny_prepared(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_out") / "prepared"
    return out, prepare_mimic(tiny, out)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    folder = tmp_path_factory.mktemp("syn") / "mimic"
    write_demo_mimic(folder, n_admissions=400, seed=3)
    return folder


@pytest.fixture(scope="module")
def synthetic_prepared(synthetic, tmp_path_factory):
    out = tmp_path_factory.mktemp("syn_out") / "prepared"
    return out, prepare_mimic(synthetic, out, chunksize=97)


# --- readers ----------------------------------------------------------------------------------------


def test_read_codes_keeps_strings_and_counts_drops(tiny):
    df, stats = read_codes(tiny, "DIAGNOSES_ICD")
    assert df["ICD9_CODE"].tolist().count("0389") == 1
    assert str(df["HADM_ID"].dtype) == "int64"
    assert stats.dropped == {"empty_code": 1, "no_hadm_id": 1}


def test_discharge_summaries_only_and_streamed(tiny):
    notes, stats = read_discharge_summaries(tiny, chunksize=2)
    assert stats.rows_read == 10
    assert set(notes["DESCRIPTION"]) == {"Report", "Addendum"}
    assert "NURSING-A" not in set(notes["TEXT"])
    assert stats.dropped == {"discharge_summary_without_hadm_id": 1}
    assert notes["TEXT"].str.contains("\n").any()  # quoted newline survived


def test_find_table_is_case_insensitive_and_reads_gzip(tmp_path):
    folder = make_tiny(tmp_path / "m")
    src = folder / "NOTEEVENTS.csv"
    with open(src, "rb") as f, gzip.open(folder / "noteevents.csv.gz", "wb") as g:
        g.write(f.read())
    src.unlink()
    assert find_table(folder, "NOTEEVENTS").name == "noteevents.csv.gz"
    notes, _ = read_discharge_summaries(folder)
    assert len(notes) == 7


# --- prepare on the tiny folder ---------------------------------------------------------------------


def test_tiny_documents_joined_in_clinicode_order(tiny_prepared):
    out, summary = tiny_prepared
    docs = _all_docs(out).set_index("id")
    assert docs.index.is_unique
    assert sorted(docs.index) == ["100", "200", "600"]
    assert docs.loc["100", "text"] == 'REPORT-A line one\nline "two" ADDENDUM-A, with comma'
    assert docs.loc["200", "text"] == "REPORT-B ADDENDUM-B1 ADDENDUM-B2"  # addenda by CHARTDATE
    assert "NURSING" not in " ".join(docs["text"])


def test_tiny_labels_dotted_deduplicated_inside_set(tiny_prepared):
    out, summary = tiny_prepared
    docs = _all_docs(out).set_index("id")
    assert list(docs.loc["100", "labels"]) == ["038.9", "401.9", "96.04"]  # E849.7 is outside the 50
    assert list(docs.loc["200", "labels"]) == ["250.00", "38.93", "V58.61"]  # 00.40 is outside the 50
    assert list(docs.loc["600", "labels"]) == ["428.0", "96.6"]
    assert summary["dropped"] == {
        "DIAGNOSES_ICD.empty_code": 1, "DIAGNOSES_ICD.no_hadm_id": 1,
        "NOTEEVENTS.discharge_summary_without_hadm_id": 1,
        "admissions_with_codes_but_no_note": 1, "admissions_without_label_set_codes": 1,
    }
    assert summary["label_set"] == "caml50" and summary["n_labels"] == 50
    assert summary["comparable"] is False and NOT_COMPARABLE in summary["note"]


def test_tiny_labels_json_and_manifest(tiny_prepared):
    out, summary = tiny_prepared
    labels = json.loads((out / "labels.json").read_text())
    codes = [x["code"] for x in labels]
    assert codes == sorted(CAML_TOP50)
    desc = {x["code"]: x["description"] for x in labels}
    assert desc["038.9"] == "Unspecified septicemia" and desc["96.04"] == "Insertion of endotracheal tube"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "prepared-dataset"
    assert manifest["summary"] == summary
    assert "Report before Addendum" in manifest["note_order"]
    assert set(manifest["inputs"]) >= {"NOTEEVENTS", "DIAGNOSES_ICD", "PROCEDURES_ICD"}
    assert len(manifest["inputs"]["NOTEEVENTS"]["sha256"]) == 64 and manifest["inputs"]["NOTEEVENTS"]["bytes"] > 0
    assert manifest["parameters"]["label_set"] == "caml50"
    assert manifest["counts"]["duplicate_code_rows"] == 1
    assert manifest["comparability"] == NOT_COMPARABLE


def test_parquet_contract_dtypes(tiny_prepared):
    out, _ = tiny_prepared
    schema = pq.read_schema(out / "train.parquet")
    assert schema.field("id").type == pa.string()
    assert schema.field("subject_id").type == pa.int64()
    assert schema.field("text").type == pa.string()
    assert schema.field("labels").type == pa.list_(pa.string())
    assert schema.names == ["id", "subject_id", "text", "labels"]


def test_frequent_label_set_with_ties(tiny, tmp_path):
    # Once per admission over admissions with a summary: 401.9 (1), 038.9 (1), E849.7 (1), 96.04 (1),
    # V58.61, 250.00, 00.40, 38.93 (1 each), V10.46 (1), 428.0 (1), 96.6 (1): all tie -> code-string order.
    summary = prepare_mimic(tiny, tmp_path / "out", label_set="frequent", top_k=3)
    labels = [x["code"] for x in json.loads((tmp_path / "out" / "labels.json").read_text())]
    assert labels == ["00.40", "038.9", "250.00"]
    assert summary["n_labels"] == 3 and summary["comparable"] is False
    assert NOT_COMPARABLE in summary["note"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["comparability"] == NOT_COMPARABLE and manifest["parameters"]["top_k"] == 3


def test_frequent_counts_each_code_once_per_admission(tiny, tmp_path):
    # 401.9 has a duplicate row on admission 100 and a row on 500 (no summary): it must still count 1.
    summary = prepare_mimic(tiny, tmp_path / "out", label_set="frequent", top_k=1)
    assert [x["code"] for x in json.loads((tmp_path / "out" / "labels.json").read_text())] == ["00.40"]
    assert sum(summary["splits"].values()) == 1


# --- prepare on the synthetic folder ----------------------------------------------------------------


def test_synthetic_contract(synthetic_prepared):
    out, summary = synthetic_prepared
    docs = _all_docs(out)
    assert docs["id"].is_unique
    assert all(len(lab) >= 1 and set(lab) <= set(CAML_TOP50) for lab in docs["labels"])
    order = {c: i for i, c in enumerate(sorted(CAML_TOP50))}
    assert all(list(lab) == sorted(lab, key=order.__getitem__) for lab in docs["labels"])
    by_split = docs.groupby("split")["subject_id"].apply(set)
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert not (by_split[a] & by_split[b]), f"patient in {a} and {b}"
    assert {s: int((docs["split"] == s).sum()) for s in SPLITS} == summary["splits"]
    assert summary["splits"]["train"] > summary["splits"]["test"] > 0
    assert summary["dropped"]["admissions_with_codes_but_no_note"] > 0
    assert summary["dropped"]["admissions_without_label_set_codes"] > 0


def test_synthetic_split_is_deterministic(synthetic, synthetic_prepared, tmp_path):
    out, summary = synthetic_prepared
    again = prepare_mimic(synthetic, tmp_path / "again")
    assert again["splits"] == summary["splits"]
    assert pd.read_parquet(tmp_path / "again" / "dev.parquet").equals(pd.read_parquet(out / "dev.parquet"))


def test_failure_midway_leaves_no_out_dir(synthetic, tmp_path, monkeypatch):
    real = prepare_module._write_splits

    def flaky(out, docs, texts):
        def failing():
            yield next(texts)  # the first batch is written, then the disk "fills"
            raise RuntimeError("disk full")
        real(out, docs, failing())

    monkeypatch.setattr(prepare_module, "_write_splits", flaky)
    with pytest.raises(RuntimeError, match="disk full"):
        prepare_mimic(synthetic, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == []  # no partial temp folder either


def test_failure_keeps_previous_out_dir(synthetic, tmp_path, monkeypatch):
    out = tmp_path / "out"
    prepare_mimic(synthetic, out)  # an earlier output of prepare: the only kind of folder it may replace
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(prepare_module, "_write_splits", lambda out, docs,
                        texts: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        prepare_mimic(synthetic, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# --- splits ---------------------------------------------------------------------------------------


def _write_splits(folder: Path, ids: dict[str, list[int]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for s, values in ids.items():
        (folder / f"{s}_50_hadm_ids.csv").write_text("".join(f"{v}\n" for v in values))
    return folder


def test_prepare_with_split_lists_counts_unlisted_and_missing(tiny, tmp_path):
    splits = _write_splits(tmp_path / "splits", {"train": [100, 999], "dev": [200], "test": [300]})
    summary = prepare_mimic(tiny, tmp_path / "out", splits_dir=splits)
    assert summary["splits"] == {"train": 1, "dev": 1, "test": 0}
    assert summary["dropped"]["admissions_not_in_split_lists"] == 1  # 600
    assert summary["missing_from_data"] == {"train": 1, "dev": 0, "test": 1}


def test_split_errors(tmp_path):
    with pytest.raises(DataFormatError, match=r"splits folder .* does not exist"):
        read_splits(tmp_path / "nope")
    folder = _write_splits(tmp_path / "a", {"train": [1, 2], "dev": [3]})
    with pytest.raises(DataFormatError, match=r"test_50_hadm_ids.csv not found"):
        read_splits(folder)
    folder = _write_splits(tmp_path / "b", {"train": [1, 2], "dev": [2], "test": [4]})
    with pytest.raises(DataFormatError, match=r"train and dev share 1 HADM_ID\(s\), e.g. 2"):
        read_splits(folder)
    folder = _write_splits(tmp_path / "c", {"train": [1], "dev": [3], "test": [4]})
    (folder / "train_50_hadm_ids.csv").write_text("id\n1\n")  # a `hadm_id` header is allowed, other text is not
    with pytest.raises(DataFormatError, match=r"line 1: 'id' is not an integer HADM_ID"):
        read_splits(folder)
    (folder / "train_50_hadm_ids.csv").write_text("1\n1\n")
    with pytest.raises(DataFormatError, match=r"line 2: HADM_ID 1 is listed twice"):
        read_splits(folder)


@pytest.mark.skipif(not CAML_IDS.is_dir(), reason="CAML split files not available")
def test_real_caml_split_files_give_exact_counts(tmp_path):
    mimic = tmp_path / "mimic"
    write_demo_mimic(mimic, n_admissions=200, n_other_notes=500, seed=1, hadm_ids_from=CAML_IDS, gzip=True)
    summary = prepare_mimic(mimic, tmp_path / "out", splits_dir=CAML_IDS)
    assert summary["splits"] == CAML50_SPLIT_COUNTS
    assert summary["comparable"] is True and "note" not in summary
    assert summary["missing_from_data"] == {"train": 0, "dev": 0, "test": 0}
    assert summary["dropped"]["admissions_not_in_split_lists"] > 0
    ids = {s: set(pd.read_parquet(tmp_path / "out" / f"{s}.parquet")["id"]) for s in SPLITS}
    listed = read_splits(CAML_IDS)
    assert all(ids[s] == {str(h) for h in listed[s]} for s in SPLITS)
    labels = json.loads((tmp_path / "out" / "labels.json").read_text())
    assert all(x["description"] for x in labels)


@pytest.mark.skipif(not CAML_IDS.is_dir(), reason="CAML split files not available")
def test_real_caml_split_files_wrong_counts_raise(synthetic, tmp_path):
    with pytest.raises(DataFormatError,
                       match=r"train \d+ \(expected 8,066\), dev \d+ \(expected 1,573\).*read as numbers"):
        prepare_mimic(synthetic, tmp_path / "out", splits_dir=CAML_IDS)
    assert not (tmp_path / "out").exists()
    summary = prepare_mimic(synthetic, tmp_path / "out", splits_dir=CAML_IDS, expect_published_counts=False)
    assert sum(summary["splits"].values()) < sum(CAML50_SPLIT_COUNTS.values())
    assert sum(summary["missing_from_data"].values()) > 11_000


# --- bad inputs ---------------------------------------------------------------------------------------


def test_missing_folder(tmp_path):
    with pytest.raises(DataFormatError, match=r"MIMIC folder .*nope does not exist.*--mimic-dir"):
        prepare_mimic(tmp_path / "nope", tmp_path / "out")


def test_missing_table(tiny, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny, folder)
    (folder / "PROCEDURES_ICD.csv").unlink()
    with pytest.raises(DataFormatError, match=r"PROCEDURES_ICD.csv\(.gz\) not found in .*demo-data"):
        prepare_mimic(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_column(tiny, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny, folder)
    df = pd.read_csv(folder / "DIAGNOSES_ICD.csv", dtype=str).drop(columns=["ICD9_CODE"])
    df.to_csv(folder / "DIAGNOSES_ICD.csv", index=False)
    with pytest.raises(DataFormatError, match=r"DIAGNOSES_ICD.csv has no column ICD9_CODE; found ROW_ID"):
        prepare_mimic(folder, tmp_path / "out")


def test_corrupt_gzip(tiny, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny, folder)
    (folder / "NOTEEVENTS.csv").unlink()
    (folder / "NOTEEVENTS.csv.gz").write_bytes(b"this is not gzip at all")
    with pytest.raises(DataFormatError, match=r"NOTEEVENTS.csv.gz cannot be read as CSV .*Re-download"):
        prepare_mimic(folder, tmp_path / "out")


def test_truncated_gzip(tiny, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny, folder)
    data = gzip.compress((folder / "NOTEEVENTS.csv").read_bytes() * 200)
    (folder / "NOTEEVENTS.csv").unlink()
    (folder / "NOTEEVENTS.csv.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError, match=r"NOTEEVENTS.csv.gz (failed mid-way|cannot be).*(truncated|corrupt)"):
        prepare_mimic(folder, tmp_path / "out", chunksize=5)


@pytest.mark.parametrize(("table", "content", "pattern"), [
    ("NOTEEVENTS", "", r"NOTEEVENTS.csv is empty; expected a CSV with header ROW_ID"),
    ("NOTEEVENTS", ",".join(NOTE_HEADER) + "\n", r"NOTEEVENTS.csv has a header but no rows"),
    ("DIAGNOSES_ICD", ",".join(CODE_HEADER) + "\n", r"DIAGNOSES_ICD.csv has a header but no rows"),
])
def test_empty_tables(tiny, tmp_path, table, content, pattern):
    folder = tmp_path / "m"
    shutil.copytree(tiny, folder)
    (folder / f"{table}.csv").write_text(content)
    with pytest.raises(DataFormatError, match=pattern):
        prepare_mimic(folder, tmp_path / "out")


def test_no_discharge_summaries(tiny, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny, folder)
    df = pd.read_csv(folder / "NOTEEVENTS.csv", dtype=str)
    df["CATEGORY"] = "Nursing"
    df.to_csv(folder / "NOTEEVENTS.csv", index=False)
    with pytest.raises(DataFormatError, match=r"No discharge summaries in NOTEEVENTS.csv \(read 10 rows"):
        prepare_mimic(folder, tmp_path / "out")


def test_bad_options(tiny, tmp_path):
    with pytest.raises(ConfigError, match=r"--label-set must be one of caml50, top50, frequent, full, got 'top100'"):
        prepare_mimic(tiny, tmp_path / "out", label_set="top100")
    with pytest.raises(ConfigError, match=r"is MIMIC-III, which is coded in ICD-9 only; drop --icd-version 10"):
        prepare_mimic(tiny, tmp_path / "out", icd_version=10)
    with pytest.raises(ConfigError, match=r"give --splits-dir .* or --splits-file .*, not both"):
        prepare_mimic(tiny, tmp_path / "out", splits_dir=tmp_path, splits_file=tmp_path / "x.csv")
    with pytest.raises(ConfigError, match=r"--note-dir is for MIMIC-IV"):
        prepare_mimic(tiny, tmp_path / "out", note_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"--top-k must be a positive integer"):
        prepare_mimic(tiny, tmp_path / "out", label_set="frequent", top_k=0)
    with pytest.raises(ConfigError, match=r"expect_published_counts=True needs a published protocol's split files"):
        prepare_mimic(tiny, tmp_path / "out", expect_published_counts=True)


def test_mimic3_full_label_set_with_a_split_file(synthetic, tmp_path):
    """MIMIC-III gets --label-set full too: every code in >= --min-code-count admissions with a summary (counted
    before splitting), admissions left without a code dropped, an Edin-style hadm_id,split file for the splits."""
    dx = pd.read_csv(synthetic / "DIAGNOSES_ICD.csv", dtype=str, keep_default_na=False)
    px = pd.read_csv(synthetic / "PROCEDURES_ICD.csv", dtype=str, keep_default_na=False)
    notes = pd.read_csv(synthetic / "NOTEEVENTS.csv", dtype=str, keep_default_na=False)
    with_note = set(notes.loc[(notes["CATEGORY"] == "Discharge summary") & (notes["HADM_ID"] != ""), "HADM_ID"])
    codes = pd.concat([dx.assign(c=[format_diagnosis(x) if x else "" for x in dx["ICD9_CODE"]]),
                       px.assign(c=[format_procedure(x) if x else "" for x in px["ICD9_CODE"]])])
    codes = codes[(codes["c"] != "") & codes["HADM_ID"].isin(with_note)].drop_duplicates(["HADM_ID", "c"])
    n = codes.groupby("c")["HADM_ID"].nunique()
    kept = set(n[n >= 4].index)
    ids = sorted(int(h) for h in codes.loc[codes["c"].isin(kept), "HADM_ID"].unique())
    split = tmp_path / "split.csv"
    split.write_text("hadm_id,split\n" + "".join(f"{h},{['train', 'val', 'test'][i % 3]}\n" for i, h in enumerate(ids)))
    summary = prepare_mimic(synthetic, tmp_path / "out", label_set="full", min_code_count=4, splits_file=split)
    assert summary["splits"] == {s: len(ids[i::3]) for i, s in enumerate(SPLITS)}
    labels = [x["code"] for x in json.loads((tmp_path / "out" / "labels.json").read_text())]
    assert labels == sorted(kept)
