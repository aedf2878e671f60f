"""The bad-input matrix through the CLI (prepare, train, evaluate, predict) and the app.

Every CLI case asserts: exit status 1, exactly one stderr line starting with `error: `, no traceback (the
command ended through SystemExit, not an uncaught exception), the pinned message, and that no note text
appears in it. Cases already pinned elsewhere (tests/data/test_prepared.py, test_mimic_prepare.py,
test_cli_data.py, test_predict.py, test_app.py) are not repeated here; the report lists the whole matrix.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from clinicode.data.labels import LabelSet
from clinicode.synthetic.mimic3 import write_demo_mimic

from helpers import SECRET, fails, succeeds  # the CLI's one-line failure contract


# ------------------------------------------------------------------------------------------------- prepare
@pytest.fixture(scope="module")
def small_mimic(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bad_mimic") / "mimic"
    write_demo_mimic(out, n_admissions=60, seed=3)
    return out


@pytest.fixture
def mimic(small_mimic, tmp_path) -> Path:
    dst = tmp_path / "mimic"
    shutil.copytree(small_mimic, dst)
    return dst


def _edit_csv(path: Path, fn) -> None:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    fn(rows[0], rows)
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")


def test_prepare_missing_column(mimic, tmp_path):
    _edit_csv(mimic / "NOTEEVENTS.csv", lambda h, rows: h.__setitem__(h.index("TEXT"), "BODY"))
    fails(["prepare", "--mimic-dir", mimic, "--out", tmp_path / "p"], "NOTEEVENTS.csv has no column TEXT; found ROW_ID")
    assert not (tmp_path / "p").exists()


def test_prepare_non_integer_id(mimic, tmp_path):
    def bad_id(h, rows):
        rows[3][h.index("HADM_ID")] = SECRET
    _edit_csv(mimic / "NOTEEVENTS.csv", bad_id)
    fails(["prepare", "--mimic-dir", mimic, "--out", tmp_path / "p"],
          "NOTEEVENTS.csv failed mid-way: a value in ROW_ID, SUBJECT_ID, HADM_ID is not an integer")
    _edit_csv(mimic / "DIAGNOSES_ICD.csv", bad_id)
    fails(["prepare", "--mimic-dir", mimic, "--out", tmp_path / "p"],
          "DIAGNOSES_ICD.csv cannot be parsed: a value in SUBJECT_ID, HADM_ID is not an integer")


def test_prepare_non_utf8_notes(mimic):
    p = mimic / "NOTEEVENTS.csv"
    data = p.read_bytes()
    cut = data.index(b"\n", len(data) // 2)
    p.write_bytes(data[:cut] + b" caf\xe9 " + data[cut:])
    fails(["prepare", "--mimic-dir", mimic, "--out", mimic.parent / "p"],
          "NOTEEVENTS.csv is not valid UTF-8 (invalid continuation byte); MIMIC-III is UTF-8")


def test_prepare_empty_table(mimic):
    (mimic / "DIAGNOSES_ICD.csv").write_text("")
    fails(["prepare", "--mimic-dir", mimic, "--out", mimic.parent / "p"],
          "DIAGNOSES_ICD.csv is empty; expected a CSV with header")


def _split_dir(tmp_path: Path, ids: dict[str, list[int]]) -> Path:
    d = tmp_path / "splits"
    d.mkdir()
    for s, xs in ids.items():
        (d / f"{s}_50_hadm_ids.csv").write_text("".join(f"{x}\n" for x in xs))
    return d


def test_prepare_split_files_with_only_unknown_ids(mimic, tmp_path):
    d = _split_dir(tmp_path, {"train": [1, 2], "dev": [3], "test": [4]})
    fails(["prepare", "--mimic-dir", mimic, "--out", tmp_path / "p", "--splits-dir", d],
          "has a note and one of the 50 label-set codes and is listed in the split files")
    assert not (tmp_path / "p").exists()


def test_prepare_split_files_with_some_unknown_ids_are_counted(mimic, tmp_path):
    hadm = pd.read_csv(mimic / "NOTEEVENTS.csv", usecols=["HADM_ID"])["HADM_ID"].dropna().astype(int).unique().tolist()
    d = _split_dir(tmp_path, {"train": hadm[:30] + [1, 2], "dev": hadm[30:40] + [3], "test": hadm[40:]})
    res = succeeds(["prepare", "--mimic-dir", mimic, "--out", tmp_path / "p", "--splits-dir", d])
    missing = json.loads((tmp_path / "p" / "manifest.json").read_text())["missing_from_data"]
    # the unknown ids, plus listed admissions without label-set codes
    assert missing["train"] >= 2 and missing["dev"] >= 1
    line = "split-file ids not found in the data: " + ", ".join(f"{k} {v}" for k, v in missing.items() if v)
    assert line in res.stdout.splitlines()


def test_prepare_duplicate_id_in_split_file(mimic, tmp_path):
    d = _split_dir(tmp_path, {"train": [5, 6, 5], "dev": [7], "test": [8]})
    fails(["prepare", "--mimic-dir", mimic, "--out", tmp_path / "p", "--splits-dir", d],
          "train_50_hadm_ids.csv line 3: HADM_ID 5 is listed twice")


# ------------------------------------------------------------------------------------- train and evaluate
def _jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


GOOD = [{"id": f"t{i}", "text": f"chest pain and fever number {i}", "labels": ["401.9"]} for i in range(4)]


def _dataset(tmp_path: Path, case: str) -> Path:
    """A coded-notes folder that is good except for `case`."""
    d = tmp_path / f"data_{case}"
    d.mkdir()
    train, dev = [dict(r) for r in GOOD], [dict(r, id=f"d{i}") for i, r in enumerate(GOOD)]
    if case == "missing_column":
        for r in dev:
            r["body"] = r.pop("text")
    elif case == "text_not_string":
        dev[1]["text"] = 12345
    elif case == "labels_not_list":
        dev[2]["labels"] = "401.9"
    elif case == "duplicate_ids":
        dev[3]["id"] = "d0"
        dev[3]["text"] = SECRET
    elif case == "label_outside_set":
        LabelSet.from_codes(["401.9", "428.0"]).save(d / "labels.json")
        dev[0]["labels"] = ["999.9"]
    elif case == "no_labels":
        for r in train:
            r["labels"] = []
    _jsonl(d / "train.jsonl", train)
    if case == "empty_file":
        (d / "dev.jsonl").write_text("")
    elif case == "non_utf8":
        (d / "dev.jsonl").write_bytes(b'{"id": "d0", "text": "' + SECRET.encode() + b' caf\xe9", "labels": []}\n')
    elif case == "csv_header_only":
        (d / "dev.csv").write_text("id,text,labels\n")
    elif case != "missing_dev":
        _jsonl(d / "dev.jsonl", dev)
    return d


DATA_CASES = {
    "missing_column": "dev.jsonl has no column 'text'; found id, labels",
    "text_not_string": "dev.jsonl: 1 document(s) whose text is not a string, e.g. id 'd1' (int)",
    "labels_not_list": "document 'd2' has labels of type str; expected a list of codes",
    "duplicate_ids": "dev.jsonl: 1 duplicate id(s), e.g. 'd0'; ids must be unique",
    "label_outside_set": "dev split of",
    "no_labels": "has no labels at all; a dataset needs at least one label",
    "empty_file": "dev.jsonl is empty; expected a header/rows",
    "non_utf8": "dev.jsonl is not valid UTF-8 (bad byte near offset",
    "csv_header_only": "dev.csv has no documents",
    "missing_dev": "has no dev split; expected dev.parquet, dev.jsonl or dev.csv",
}


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_train_bad_dataset(tmp_path, case):
    d = _dataset(tmp_path, case)
    fails(["train", "--data", d, "--out", tmp_path / "run", "--epochs", "1", "--device", "cpu", "--no-progress"],
          DATA_CASES[case])
    assert not (tmp_path / "run" / "checkpoint").exists()


# `evaluate` reads only the split it scores and judges codes by the checkpoint's label set, so a folder's own
# labels.json, an unlabelled train split and a missing dev split do not concern it (see the tests below).
EVALUATE_CASES = {k: v for k, v in DATA_CASES.items() if k not in ("label_outside_set", "no_labels", "missing_dev")}


@pytest.mark.parametrize("case", sorted(EVALUATE_CASES))
def test_evaluate_bad_dataset(tiny_run, tmp_path, case):
    d = _dataset(tmp_path, case)
    fails(["evaluate", "--checkpoint", tiny_run, "--data", d, "--split", "dev", "--device", "cpu"],
          EVALUATE_CASES[case])


def test_evaluate_missing_split(tiny_run, tmp_path):
    d = _dataset(tmp_path, "missing_dev")
    fails(["evaluate", "--checkpoint", tiny_run, "--data", d, "--split", "dev", "--device", "cpu"],
          "split 'dev' not in")


def test_evaluate_data_sharing_no_code_with_the_checkpoint(tiny_run, tmp_path):
    d = tmp_path / "other"
    d.mkdir()
    _jsonl(d / "test.jsonl", [{"id": f"x{i}", "text": "hypertension", "labels": ["Cardiology",
                                                                                 "Neurology"]} for i in range(3)])
    fails(["evaluate", "--checkpoint", tiny_run, "--data", d, "--device", "cpu"],
          "the test split's 6 gold codes share no code with the checkpoint's 50 codes")


def test_label_outside_set_message_in_full(tmp_path):
    d = _dataset(tmp_path, "label_outside_set")
    fails(["train", "--data", d, "--out", tmp_path / "r", "--device", "cpu"],
          "1 label(s) of 1 code(s) not in labels.json, e.g. '999.9'; add the code to labels.json or remove it")


def test_evaluate_unknown_split(tiny_run, demo_data):
    fails(["evaluate", "--checkpoint", tiny_run, "--data", demo_data, "--split", "validation", "--device", "cpu"],
          "split 'validation' not in")


def test_evaluate_gold_codes_outside_the_checkpoint_labels_are_counted(tiny_run, tmp_path):
    d = tmp_path / "other"
    d.mkdir()
    rows = [{"id": f"x{i}", "text": "hypertension and heart failure", "labels": ["401.9", "XYZ"]} for i in range(3)]
    _jsonl(d / "train.jsonl", rows)
    _jsonl(d / "dev.jsonl", rows)
    _jsonl(d / "test.jsonl", rows)
    out = tmp_path / "m.json"
    res = succeeds(["evaluate", "--checkpoint", tiny_run, "--data", d, "--output", out, "--device", "cpu"])
    m = json.loads(out.read_text())
    assert (m["n_gold_outside_labels"], m["n_gold_codes"], m["codes_outside_labels"]) == (3, 6, ["XYZ"])
    assert ("warning: 3 of 6 gold codes (50.0%; 1 distinct, e.g. XYZ) are not among the checkpoint's 50 codes "
            "and are not scored") in res.stderr


# ----------------------------------------------------------------------------------------------- checkpoint
@pytest.fixture
def old_version_ck(tiny_run, tmp_path) -> Path:
    ck = tmp_path / "oldrun" / "checkpoint"
    shutil.copytree(tiny_run / "checkpoint", ck)
    m = json.loads((ck / "manifest.json").read_text())
    m["schema_version"] = 0
    (ck / "manifest.json").write_text(json.dumps(m))
    return ck.parent


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_checkpoint_from_an_incompatible_version(old_version_ck, demo_data, tmp_path, command):
    src = tmp_path / "n.jsonl"
    _jsonl(src, [{"id": "a", "text": "hypertension"}])
    args = (["evaluate", "--checkpoint", old_version_ck, "--data", demo_data] if command == "evaluate"
            else ["predict", "--checkpoint", old_version_ck, "--input", src, "--output", tmp_path / "o.jsonl"])
    fails(args + ["--device", "cpu"], "checkpoint schema version 0 (written by clinicode")
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "o.jsonl.partial").exists()


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_damaged_checkpoint(tiny_run, demo_data, tmp_path, command):
    ck = tmp_path / "run" / "checkpoint"
    shutil.copytree(tiny_run / "checkpoint", ck)
    data = bytearray((ck / "model.safetensors").read_bytes())
    data[-10] ^= 0xFF
    (ck / "model.safetensors").write_bytes(bytes(data))
    src = tmp_path / "n.jsonl"
    _jsonl(src, [{"id": "a", "text": "hypertension"}])
    args = (["evaluate", "--checkpoint", ck.parent, "--data", demo_data] if command == "evaluate"
            else ["predict", "--checkpoint", ck.parent, "--input", src])
    fails(args + ["--device", "cpu"], "model.safetensors does not match the hash in manifest.json")


def test_interrupted_run_without_checkpoint(tmp_path):
    (tmp_path / "run" / "state").mkdir(parents=True)
    fails(["predict", "--checkpoint", tmp_path / "run", "--input", "x.jsonl"],
          "no checkpoint/manifest.json inside; give a run folder written by `clinicode train`")


# -------------------------------------------------------------------------------------------------- predict
def _predict(tiny_run, src, out, *extra) -> list:
    return ["predict", "--checkpoint", tiny_run, "--input", src, "--output", out, "--device", "cpu", *extra]


@pytest.mark.parametrize("name,content,message", [
    ("empty.jsonl", b"", "no records; expected one note per JSONL line"),
    ("blank.jsonl", b"\n\n", "no records; expected one note per JSONL line"),
    ("empty.csv", b"", "empty.csv: empty file; expected a CSV header with columns id,text"),
    ("header.csv", b"id,text\n", "no records; expected one note per JSONL line, CSV/parquet row"),
    ("empty.parquet", b"", "empty.parquet: not a readable parquet file (ArrowInvalid)"),
    ("junk.parquet", b"PAR1" + SECRET.encode(), "not a readable parquet file"),
    ("latin.csv", b"id,text\na," + SECRET.encode() + b" caf\xe9\n", "latin.csv: not UTF-8 text ("),
    ("notext.csv", b"id,body\na," + SECRET.encode() + b"\n",
     "notext.csv: no 'text' column (columns: id, body); add one"),
    ("notes.docx", b"PK", "unknown file type '.docx'"),
])
def test_predict_bad_input_file(tiny_run, tmp_path, name, content, message):
    src = tmp_path / name
    src.write_bytes(content)
    out = tmp_path / "o.jsonl"
    fails(_predict(tiny_run, src, out), message)
    # a file-level error leaves no output behind, not even an empty OUT.partial
    assert not out.exists() and not out.with_name("o.jsonl.partial").exists()


def test_predict_parquet_without_text_column(tiny_run, tmp_path):
    src = tmp_path / "n.parquet"
    pd.DataFrame({"id": ["a"], "note": [SECRET]}).to_parquet(src)
    fails(_predict(tiny_run, src, tmp_path / "o.jsonl"), "n.parquet: no 'text' column (columns: id); add one")


def test_predict_bad_options(tiny_run, tmp_path):
    src = tmp_path / "n.jsonl"
    _jsonl(src, [{"id": "a", "text": "hypertension"}])
    fails(_predict(tiny_run, src, "-", "--threshold", "1.5"), "--threshold must be a number in [0, 1], got 1.5")
    fails(_predict(tiny_run, src, "-", "--explain", "-1"), "--explain must be an integer >= 0, got -1")
    fails(_predict(tiny_run, src, "-", "--top-k", "-2"), "--top-k must be a positive integer or 'all', got -2")
    # 0 is refused, as the service refuses it (one rule: PredictConfig.from_user)
    fails(_predict(tiny_run, src, "-", "--top-k", "0"), "--top-k must be a positive integer or 'all', got 0; "
                                                        "e.g. --top-k 5")
    fails(_predict(tiny_run, src, "-", "--shard", "x"), "--shard 'x': expected i/n")


def test_predict_non_utf8_txt_in_a_folder_is_a_bad_record(tiny_run, tmp_path):
    d = tmp_path / "notes"
    d.mkdir()
    (d / "a.txt").write_text("hypertension and atrial fibrillation")
    (d / "b.txt").write_bytes(SECRET.encode() + b" caf\xe9")
    out = tmp_path / "o.jsonl"
    res = succeeds(_predict(tiny_run, d, out))
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == ["a", "b"]
    assert "error" not in recs[0] and recs[1]["error"] == "file b.txt: not UTF-8 text"
    assert "1 bad records" in res.stderr and SECRET not in res.stderr + out.read_text()
    fails(_predict(tiny_run, d, tmp_path / "s.jsonl", "--strict"), "file b.txt: not UTF-8 text (--strict stops")


def test_predict_record_errors_never_quote_the_note(tiny_run, tmp_path):
    src = tmp_path / "n.jsonl"
    src.write_text(json.dumps({"id": "a", "text": ["not", SECRET]}) + "\n" + json.dumps({"id": "b",
                                                                                         "body": SECRET}) + "\n"
                   + json.dumps({"id": "c", "text": "123 456 ... !!"}) + "\n")
    out = tmp_path / "o.jsonl"
    succeeds(_predict(tiny_run, src, out))
    errs = [json.loads(x)["error"] for x in out.read_text().splitlines()]
    assert errs == ["note 'a': 'text' is list, expected a string", "record 'b' (line 2): no 'text' field",
                    "note 'c': no words after tokenisation (no letters: only numbers, punctuation, symbols or emoji); "
                    "nothing to code"]


def test_predict_huge_note_is_scored_and_flagged_truncated(tiny_run, tmp_path):
    words = "hypertension heart failure atrial fibrillation patient stable discharged home follow up".split()
    big = " ".join(words[i % len(words)] for i in range(650_000))
    assert len(big) > 5_000_000
    src = tmp_path / "huge.jsonl"
    _jsonl(src, [{"id": "big", "text": big}, {"id": "small", "text": "sepsis and acute kidney failure"}])
    out = tmp_path / "o.jsonl"
    succeeds(_predict(tiny_run, src, out, "--explain", "2"))
    big_rec, small_rec = (json.loads(x) for x in out.read_text().splitlines())
    assert big_rec["id"] == "big" and big_rec["truncated"] is True and big_rec["scores"]
    assert all(s["end"] <= 200_000 for s in big_rec["evidence"]["spans"])  # evidence lies in the kept 2,500 tokens
    assert small_rec["truncated"] is False


def test_predict_duplicate_ids_each_get_a_record_and_are_counted(tiny_run, tmp_path):
    src = tmp_path / "n.jsonl"
    _jsonl(src, [{"id": "a", "text": "hypertension"}, {"id": "b", "text": "sepsis"}, {"id": "a",
                                                                                      "text": "heart failure"}])
    out = tmp_path / "o.jsonl"
    res = succeeds(_predict(tiny_run, src, out))
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in recs] == ["a", "b", "a"] and all("scores" in r for r in recs)
    assert "1 records repeat an earlier id" in res.stderr


# ------------------------------------------------------------------------------------------------------ app
@pytest.fixture
def app_env(tiny_run, tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    runs = tmp_path / "runs"
    shutil.copytree(tiny_run, runs / "tiny", ignore=shutil.ignore_patterns("state"))
    monkeypatch.setenv("CLINICODE_RUNS", str(runs))
    return runs


def _app():
    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app_streamlit" / "main.py"), default_timeout=90)


def test_app_batch_upload_without_text_column(app_env):
    at = _app().run()
    at.switch_page("app_pages/batch.py").run()
    at.file_uploader(key="batch_file").set_value(("notes.csv", f"id,note\n1,{SECRET}\n".encode(), "text/csv")).run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "no 'text' column" in errors[0] and SECRET not in errors[0]
    assert not at.dataframe


def test_app_non_utf8_note_upload(app_env):
    at = _app().run()
    at.radio(key="note_source").set_value("Upload .txt").run()
    at.file_uploader(key="note_file").set_value(("note.txt", SECRET.encode() + b" caf\xe9", "text/plain")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [e.value for e in at.error] == ["note.txt is not UTF-8 text; save it as UTF-8 and upload it again."]


# ------------------------------------------------------------------------------ a file without its header row
LONG = f"Patient {SECRET} admitted with chest pain and shortness of breath"


def test_predict_csv_without_header_row_never_quotes_the_note(tiny_run, tmp_path):
    src = tmp_path / "n.csv"
    src.write_text(f'1,"{LONG}"\n2,"another note"\n')
    fails(_predict(tiny_run, src, tmp_path / "o.jsonl"),
          f"n.csv: no 'text' column (columns: 1, <{len(LONG)}-character name>; is the header row missing?)")


def test_train_csv_without_header_row_never_quotes_the_note(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for split in ("train", "dev"):
        (d / f"{split}.csv").write_text(f'1,"{LONG}",401.9\n2,"x",401.9\n')
    fails(["train", "--data", d, "--out", tmp_path / "r", "--device", "cpu"],
          f"train.csv has no column 'id'; found 1, <{len(LONG)}-character name>, 401.9; is the header row missing?")


def test_prepare_noteevents_without_header_row_never_quotes_the_note(mimic, tmp_path):
    p = mimic / "NOTEEVENTS.csv"
    p.write_text(f'1,2,3,2101-01-01,,,Discharge summary,Report,,,"{LONG}"\n')
    fails(["prepare", "--mimic-dir", mimic, "--out", tmp_path / "p"], "NOTEEVENTS.csv has no column ROW_ID, SUBJECT_ID")


def test_app_batch_error_for_headerless_csv_never_quotes_the_note():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app_streamlit"))
    import batch_files

    parsed = batch_files.parse_batch(f'1,"{LONG}"\n'.encode(), "notes.csv")
    assert parsed.error is not None and "no 'text' column" in parsed.error
    assert SECRET not in parsed.error
