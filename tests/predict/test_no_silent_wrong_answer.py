"""Never a silent wrong answer (#42): the formats, outputs, FHIR, evidence, titles and training cases.

One test (or a few) per case; each fails without its fix. Refusals exit with status 1 and print one line
(`helpers.fails`), with no note text in it.
"""

from __future__ import annotations

import base64
import bz2
import codecs
import io
import json
import lzma
import os
import subprocess
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clinicode.codes.icd9 import load_descriptions_tsv
from clinicode.codes.systems import ICD9_CM, ICD10
from clinicode.codes.titles import TitleIndex
from clinicode.data.prepared import load_dataset
from clinicode.errors import DataFormatError
from clinicode.fhir import note_from_document_reference
from clinicode.predict import Predictor

from helpers import SECRET, fails, runner, snapshot, succeeds


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _predict(run: Path, src, out="-", *extra) -> list:
    return ["predict", "--checkpoint", run, "--input", src, "--output", out, "--device", "cpu", "--no-progress", *extra]


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _folder(root: Path, files: dict[str, str]) -> Path:
    root.mkdir()
    for name, body in files.items():
        (root / name).write_text(body, encoding="utf-8")
    return root


_GOOD_CSV = "id,text,labels\na,heart failure,428.0\nb,renal failure,584.9\n"


# ------------------------------------------------------------------ 1. unquoted commas in CSV text
def test_csv_whose_first_row_has_an_unquoted_comma_is_refused_not_scored_with_ids_as_text(tmp_path, tiny_run):
    src = tmp_path / "notes.csv"
    src.write_text(f"id,text\n1,Pt with chest pain, {SECRET}\n2,heart failure, afib\n", encoding="utf-8")
    before = snapshot(tmp_path)
    fails(_predict(tiny_run, src, tmp_path / "out.jsonl"), "row 1 has more fields than the header")
    assert snapshot(tmp_path) == before


def test_train_csv_whose_first_row_has_a_stray_comma_is_refused(tmp_path):
    folder = _folder(tmp_path / "coded", {"train.csv": "id,text,labels\na,heart failure, chf,428.0\n",
                                          "dev.csv": _GOOD_CSV})
    with pytest.raises(DataFormatError, match="row 1 has more fields than the header"):
        load_dataset(folder)


# ------------------------------------------------------------------ 12. the right row of a CSV parse error
def test_a_csv_parse_error_names_the_row_pandas_stopped_at(tmp_path, tiny_run):
    src = tmp_path / "notes.csv"
    src.write_text("id,text\n" + "".join(f'{i},"heart\nfailure"\n' for i in range(1, 1501)) + "1501,a,b\n",
                   encoding="utf-8")
    fails(_predict(tiny_run, src, tmp_path / "out.jsonl"), "at row 1,501 (expected 2 fields, saw 3)")


# ------------------------------------------------------------------ 7. concatenated CSVs
def test_a_repeated_header_row_is_a_bad_record_not_a_note_with_id_id(tmp_path, tiny_run):
    src = tmp_path / "both.csv"
    src.write_text("id,text\na,heart failure\nid,text\nb,renal failure\n", encoding="utf-8")
    res = succeeds(_predict(tiny_run, src))
    recs = _records(res.stdout)
    assert [r["id"] for r in recs] == ["a", "row-2", "b"]
    assert "repeated header row" in recs[1]["error"] and "predicted" not in recs[1]
    folder = _folder(tmp_path / "coded", {"train.csv": _GOOD_CSV + "id,text,labels\nc,sepsis,038.9\n",
                                          "dev.csv": _GOOD_CSV})
    with pytest.raises(DataFormatError, match="row 3: a repeated header row"):
        load_dataset(folder)


# ------------------------------------------------------------------ 15. JSON arrays and ids of other types
def test_a_pretty_printed_json_array_is_one_line_saying_what_jsonl_is(tmp_path, tiny_run):
    src = tmp_path / "notes.jsonl"
    src.write_text(json.dumps([{"id": "a", "text": SECRET}], indent=2), encoding="utf-8")
    fails(_predict(tiny_run, src), "a JSON array, not JSONL (one JSON object a line")


def test_jsonl_ids_that_are_no_string_or_integer_are_bad_records_with_a_reason(tmp_path, tiny_run):
    src = tmp_path / "notes.jsonl"
    src.write_text('{"id": true, "text": "heart failure"}\n{"id": {"a": 1}, "text": "heart failure"}\n'
                   '{"id": 1e400, "text": "heart failure"}\n{"id": 17, "text": "heart failure"}\n', encoding="utf-8")
    recs = _records(succeeds(_predict(tiny_run, src)).stdout)
    assert [r["id"] for r in recs] == ["line-1", "line-2", "line-3", "17"]
    assert "the 'id' is true (a boolean)" in recs[0]["error"]
    assert "the 'id' is an object" in recs[1]["error"]
    assert "not an integer" in recs[2]["error"]
    assert all("a string or an integer" in r["error"] for r in recs[:3]) and "error" not in recs[3]


# ------------------------------------------------------------------ 9. other files under a text name
def _zip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("notes.jsonl", data)
    return buf.getvalue()


def _parquet(data: bytes) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": ["a"], "text": ["heart failure"]}), buf)
    return buf.getvalue()


@pytest.mark.parametrize("name, pack, what", [
    ("notes.jsonl", _zip, "a zip archive"), ("notes.jsonl", bz2.compress, "bzip2-compressed data"),
    ("notes.jsonl", lzma.compress, "xz-compressed data"), ("notes.jsonl", _parquet, "a Parquet file"),
    ("notes.csv", _zip, "a zip archive"), ("notes.jsonl.gz", bz2.compress, "bzip2-compressed data, not gzip"),
    ("notes.jsonl.gz", _zip, "a zip archive, not gzip")])
def test_compressed_or_binary_content_under_a_text_name_is_named_by_its_bytes(tmp_path, tiny_run, name, pack, what):
    src = tmp_path / name
    src.write_bytes(pack(json.dumps({"id": "a", "text": "heart failure"}).encode() + b"\n"))
    res = fails(_predict(tiny_run, src), what)
    assert "first bytes" in res.stderr


# ------------------------------------------------------------------ 16. outputs named for a format not written
@pytest.mark.parametrize("name, what", [("out.jsonl.gz", "not gzip"), ("out.parquet", "not Parquet"),
                                        ("out.csv.xz", "not xz")])
def test_an_output_named_compressed_or_parquet_is_refused_not_written_as_plain_jsonl(tmp_path, tiny_run, name, what):
    src = _jsonl(tmp_path / "notes.jsonl", [{"id": "a", "text": "heart failure"}])
    before = snapshot(tmp_path)
    fails(_predict(tiny_run, src, tmp_path / name), what)
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------ 10. resume and stdout
def test_resume_to_stdout_is_refused(tmp_path, tiny_run):
    src = _jsonl(tmp_path / "notes.jsonl", [{"id": "a", "text": "heart failure"}])
    fails(_predict(tiny_run, src, "-", "--resume"), "stdout (--output -) cannot be continued")


@pytest.mark.parametrize("to_file", [False, True])
def test_ctrl_c_advises_resume_only_for_an_output_file(tmp_path, tiny_run, monkeypatch, to_file):
    import clinicode.predict_io

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(clinicode.predict_io, "predict_file", interrupted)
    src = _jsonl(tmp_path / "notes.jsonl", [{"id": "a", "text": "heart failure"}])
    res = runner().invoke(clinicode_app(), [str(a) for a in _predict(tiny_run, src, tmp_path / "o.jsonl"
                                                                     if to_file else "-")])
    assert res.exit_code == 130 and "interrupted" in res.stderr
    assert ("--resume" in res.stderr) == to_file


def clinicode_app():
    from clinicode.cli import app

    return app


# ------------------------------------------------------------------ 4. Parquet integer ids with a null
def test_parquet_integer_ids_with_a_null_stay_integers(tmp_path, tiny_run):
    src = tmp_path / "notes.parquet"
    pq.write_table(pa.table({"id": pa.array([1, None, 3], pa.int64()),
                             "text": ["heart failure", "renal failure", "sepsis"]}), src)
    recs = _records(succeeds(_predict(tiny_run, src)).stdout)
    assert [r["id"] for r in recs] == ["1", "row-2", "3"]


# ------------------------------------------------------------------ 3. --output through a symbolic link
def test_predict_output_through_a_link_writes_its_target_and_keeps_the_link(tmp_path, tiny_run):
    first = _jsonl(tmp_path / "first.jsonl", [{"id": "old", "text": "heart failure"}])
    second = _jsonl(tmp_path / "second.jsonl", [{"id": "new", "text": "renal failure"}])
    target = tmp_path / "results" / "codes.jsonl"
    succeeds(_predict(tiny_run, first, target))
    link = tmp_path / "latest.jsonl"
    link.symlink_to(target)
    succeeds(_predict(tiny_run, second, link))
    assert link.is_symlink() and link.resolve() == target
    assert [r["id"] for r in _records(target.read_text())] == ["new"]


def test_evaluate_output_through_a_link_writes_its_target_and_keeps_the_link(tmp_path, tiny_run, demo_data):
    target = tmp_path / "metrics.json"
    args = ["evaluate", "--checkpoint", tiny_run, "--data", demo_data, "--split", "dev", "--device", "cpu"]
    succeeds([*args, "--output", target])
    stale = target.read_bytes()
    target.write_bytes(stale.replace(b'"split": "dev"', b'"split": "dev" '))  # still evaluate's, now changed
    link = tmp_path / "link.json"
    link.symlink_to(target)
    succeeds([*args, "--output", link])
    assert link.is_symlink() and json.loads(target.read_text())["split"] == "dev"
    assert target.read_bytes() != stale.replace(b'"split": "dev"', b'"split": "dev" ')


# ------------------------------------------------------------------ 2, 8. FHIR in, FHIR out
NOTE = "Patient with congestive heart failure and atrial fibrillation; hypertension."


def _document(rid: str, patient: str, data: bytes) -> dict:
    return {"resourceType": "DocumentReference", "id": rid, "subject": {"reference": patient},
            "content": [{"attachment": {"contentType": "text/plain", "data": base64.b64encode(data).decode()}}]}


def _bundles(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _coded(bundle: dict) -> list[dict]:
    return [e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] in ("Condition", "Procedure")]


def test_fhir_in_fhir_out_keeps_the_subject_and_the_link_to_the_document(tmp_path, tiny_run):
    src = _jsonl(tmp_path / "docs.ndjson", [_document("d1", "Patient/9", NOTE.encode()),
                                            _document("d2", "Patient/10", NOTE.encode())])
    res = succeeds(_predict(tiny_run, src, "-", "--input-format", "fhir", "--format", "fhir", "--threshold", "0"))
    for bundle, doc, patient in zip(_bundles(res.stdout), ("d1", "d2"), ("Patient/9", "Patient/10"), strict=True):
        coded = _coded(bundle)
        assert coded and all(r["subject"] == {"reference": patient} for r in coded)
        assert all(r["evidence"] == [{"detail": [{"reference": f"DocumentReference/{doc}"}]}]
                   for r in coded if r["resourceType"] == "Condition")


def test_a_byte_order_mark_in_an_attachment_shifts_no_evidence_offset(tmp_path, tiny_run):
    plain, marked = _document("d1", "Patient/9", NOTE.encode()), _document("d2", "Patient/9",
                                                                            codecs.BOM_UTF8 + NOTE.encode())
    assert note_from_document_reference(marked)["text"] == NOTE
    src = _jsonl(tmp_path / "docs.ndjson", [plain, marked])
    res = succeeds(_predict(tiny_run, src, "-", "--input-format", "fhir", "--explain", "3"))
    a, b = _records(res.stdout)
    assert a["evidence"] == b["evidence"] and a["evidence"]["spans"]


# ------------------------------------------------------------------ 13. offsets are code points
def test_offsets_count_code_points_an_emoji_is_one(tmp_path, tiny_run):
    emoji = "\U0001F600\U0001F600 "  # two code points (four UTF-16 units) and a space
    src = _jsonl(tmp_path / "notes.jsonl", [{"id": "plain", "text": NOTE}, {"id": "emoji", "text": emoji + NOTE}])
    a, b = _records(succeeds(_predict(tiny_run, src, "-", "--explain", "3")).stdout)
    shift = len(emoji)
    assert shift == 3
    for s, t in zip(a["evidence"]["spans"], b["evidence"]["spans"], strict=True):
        assert (t["start"], t["end"]) == (s["start"] + shift, s["end"] + shift)
        assert (emoji + NOTE)[t["start"]:t["end"]] == NOTE[s["start"]:s["end"]]
    doc = Path(__file__).resolve().parents[2] / "docs"
    assert "code points" in (doc / "predict.md").read_text() and "code points" in (doc / "serve.md").read_text()


# ------------------------------------------------------------------ 11. a full disk
@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                                 capture_output=True).returncode == 0
    except OSError:
        mounted = False
    if not mounted:
        pytest.skip("mounting a small tmpfs is not permitted here")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_full_disk_names_the_partial_file_and_the_rerun_continues(tmp_path, tiny_run, small_disk):
    src = _jsonl(tmp_path / "notes.jsonl", [{"id": f"n{i}", "text": NOTE} for i in range(600)])
    out = small_disk / "codes.jsonl"
    fails(_predict(tiny_run, src, out), f"while writing {out}.partial; free space")
    assert (small_disk / "codes.jsonl.partial").is_file()
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    succeeds(_predict(tiny_run, src, out, "--resume"))
    assert [r["id"] for r in _records(out.read_text())] == [f"n{i}" for i in range(600)]


# ------------------------------------------------------------------ 5. evidence in a CSV
@pytest.mark.parametrize("cell, message", [('"[{""code"": ""428.0"", ""start"": 0"', "not JSON;"),
                                           ("\"[{'code': '428.0', 'start': 0, 'end': 5}]\"", "a Python repr")])
def test_an_evidence_cell_that_is_not_json_is_refused_naming_the_document(tmp_path, cell, message):
    folder = _folder(tmp_path / "coded", {"train.csv": _GOOD_CSV,
                                          "dev.csv": f"id,text,labels,evidence\nd1,heart failure,428.0,{cell}\n"})
    with pytest.raises(DataFormatError, match=f"document 'd1' has an evidence cell that is .*{message}"):
        load_dataset(folder)


def test_evidence_codes_are_read_in_the_checkpoints_spelling_and_the_others_counted(tiny_run):
    from clinicode.evaluate import evidence_of, format_evidence

    pred = Predictor.from_checkpoint(tiny_run, device="cpu")
    code = "428.0" if "428.0" in pred.codes else pred.codes[0]
    text = "congestive heart failure noted today"
    dotted = [[{"code": code, "start": 11, "end": 24}]]
    undotted = [[{"code": code.replace(".", ""), "start": 11, "end": 24}, {"code": "XYZ1", "start": 0, "end": 5}]]
    a = evidence_of(pred, [text], [[code]], dotted, k=3, threshold=0.0)
    b = evidence_of(pred, [text], [[code]], undotted, k=3, threshold=0.0)
    assert a["n_pairs"] == b["n_pairs"] == 1
    assert a["n_mentions_outside"] == 0 and b["n_mentions_outside"] == 1 and b["outside_codes"] == ["XYZ1"]
    assert any("1 gold mentions name a code the model has no label for (e.g. XYZ1)" in line
               for line in format_evidence(b))


# ------------------------------------------------------------------ 6. titles: spellings, BOM, header, duplicates
def test_canonical_spells_undotted_codes_as_the_system_does():
    assert ICD10.canonical("S72001A") == "S72.001A"          # no PCS section starts with S
    assert ICD10.canonical("02HV33Z") == "02HV33Z"
    assert ICD9_CM.canonical("4280") == "428.0"
    assert ICD9_CM.canonical("3893", {"38.93"}) == "38.93"    # the label set decides an undotted procedure
    assert ICD9_CM.canonical(" not a code ") is None          # no code of the system (callers keep it as given)


def test_titles_in_undotted_spelling_match_the_checkpoints_codes(tmp_path, tiny_run):
    pred = Predictor.from_checkpoint(tiny_run, device="cpu")
    own = [c for c in pred.codes if "." in c][:5]
    own += [c for c in pred.codes if len(c.partition(".")[0]) == 2][:2]  # procedures: '966' is the set's 96.6
    titles = tmp_path / "titles.tsv"
    titles.write_text("".join(f"{c.replace('.', '')}\tcongestive heart failure\n" for c in own)
                      + "99999\tzebra fever\n", encoding="utf-8")
    src = _jsonl(tmp_path / "notes.jsonl", [{"id": "a", "text": "congestive heart failure with zebra fever"}])
    rec = _records(succeeds(_predict(tiny_run, src, "-", "--titles", titles)).stdout)[0]
    assert [m["code"] for m in rec["suggested"]] == ["999.99"]  # #43: `suggested` replaced `title_suggestions`


def test_a_titles_file_drops_its_byte_order_mark_and_header(tmp_path):
    titles = tmp_path / "titles.tsv"
    titles.write_bytes(codecs.BOM_UTF8 + b"icd_code\tlong_title\nI5020\tHeart failure\n")
    assert load_descriptions_tsv(titles, unique=True) == {"I5020": "Heart failure"}


def test_a_code_given_twice_in_a_titles_file_is_refused_naming_it(tmp_path, tiny_run):
    src = _jsonl(tmp_path / "notes.jsonl", [{"id": "a", "text": "zebra fever"}])
    titles = tmp_path / "titles.tsv"
    titles.write_text("999.99\tzebra fever\n999.98\tother\n999.99\tzebra pox\n", encoding="utf-8")
    fails(_predict(tiny_run, src, "-", "--titles", titles), "code '999.99' is given twice (lines 1 and 3)")
    titles.write_text("999.99\tzebra fever\n99999\tzebra pox\n", encoding="utf-8")
    fails(_predict(tiny_run, src, "-", "--titles", titles), "are both code '999.99' with different titles")


# ------------------------------------------------------------------ 14. unspecified; titles with FHIR output
def test_unspecified_and_nos_are_optional_title_words():
    index = TitleIndex({"R07.9": "Chest pain, unspecified", "D64.9": "Anemia NOS", "J98.8": "Other specified "
                        "respiratory disorders not elsewhere classified"})
    assert sorted(m.code for m in index.match("Pt reports chest pain and anemia")) == ["D64.9", "R07.9"]
    assert [m.code for m in index.match("specified respiratory disorders")] == ["J98.8"]


def test_title_suggestions_travel_in_the_fhir_bundle_marked_as_such(tmp_path, tiny_run):
    titles = tmp_path / "titles.tsv"
    titles.write_text("999.99\tZebra fever, unspecified\n", encoding="utf-8")
    src = _jsonl(tmp_path / "notes.jsonl", [{"id": "a", "text": "congestive heart failure with zebra fever"}])
    bundle = _bundles(succeeds(_predict(tiny_run, src, "-", "--titles", titles, "--format", "fhir")).stdout)[0]
    suggested = [r for r in _coded(bundle) if any(t["code"] == "suggested-from-title" for t in r["meta"]["tag"])]
    assert [r["code"]["coding"][0]["code"] for r in suggested] == ["999.99"]
    assert not any(x["url"].endswith("/score") for x in suggested[0]["extension"])


# ------------------------------------------------------------------ 17. every epoch coded everything
def test_a_run_whose_every_epoch_codes_everything_says_so(tmp_path):
    from clinicode.config import TrainConfig
    from clinicode.train import train

    words = "heart failure fibrillation pneumonia sepsis renal diabetes".split()
    rows = {name: [{"id": f"{name}{i}", "text": " ".join(words[(i + j) % 7] for j in range(20)),
                    "labels": ["401.9", "428.0"] if name == "dev" else [["401.9"], ["428.0"],
                                                                       ["401.9", "428.0"]][i % 3]}
                   for i in range(n)] for name, n in (("train", 60), ("dev", 20))}
    folder = tmp_path / "coded"
    folder.mkdir()
    for name, r in rows.items():
        _jsonl(folder / f"{name}.jsonl", r)
    cfg = TrainConfig(epochs=2, batch_size=16, w2v_epochs=1, embeddings="random", seed=1, device="cpu")
    with pytest.raises(DataFormatError, match="all 2 epochs finished, but after each one the model marked every code"):
        train(out_dir=tmp_path / "run", config=cfg, data_dir=folder, progress=False,
              model_options=dict(embed_dim=8, radius=1, hidden_dim=8, code_evidence=False, window_nonneg=False))
    assert os.path.exists(tmp_path / "run" / "history.jsonl")
