"""The formats room (clinicode.formats): one registry of readers and writers, and the bounds every reader shares
(.gz, a byte-order mark, the record bound), for predict's notes and training's coded-notes folders alike."""

from __future__ import annotations

import base64
import codecs
import csv
import gzip
import io
import json

import pytest

from clinicode import formats
from clinicode.data.prepared import load_dataset, read_split
from clinicode.errors import ConfigError, DataFormatError
from clinicode.records import Upload, read_records

BOM = codecs.BOM_UTF8


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _csv(rows) -> bytes:
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(["id", "text", "labels"])
    w.writerows([r["id"], r["text"], ";".join(r["labels"])] for r in rows)
    return buf.getvalue().encode()


TRAIN = [{"id": f"t{i}", "text": f"chest pain and hypertension case {i}", "labels": ["401.9", "786.50"][: 1 + i % 2]}
         for i in range(6)]
DEV = [{"id": f"d{i}", "text": f"hypertension follow-up visit {i}", "labels": ["401.9"]} for i in range(3)]


# ------------------------------------------------------------------ the registry
def test_readers_and_writers_are_registered_by_name():
    # the built-in ones, whatever else is registered (each registered format is checked in tests/checkpoint/
    # test_conformance.py)
    assert list(formats.READERS)[:5] == ["jsonl", "csv", "parquet", "txt", "fhir"]
    assert list(formats.WRITERS)[:3] == ["jsonl", "csv", "fhir"]
    assert all(formats.READERS[n].name == n for n in formats.READERS)
    assert formats.reader_for("notes.CSV.gz").name == "csv"
    assert formats.reader_for("notes.ndjson").name == "jsonl"
    assert formats.reader_for("n.parquet.gz") is None  # a binary format is never read through gzip
    assert formats.writer_for("codes.csv").name == "csv" and formats.writer_for("-").name == "jsonl"


@pytest.mark.parametrize("look_up, what", [(formats.reader, "input"), (formats.writer, "output")])
def test_an_unknown_format_is_one_line_naming_the_known_ones(look_up, what):
    with pytest.raises(ConfigError) as err:
        look_up("xml")
    known = ", ".join(formats.READERS if what == "input" else formats.WRITERS)
    assert str(err.value) == f"unknown {what} format 'xml'; known formats: {known}."


def test_predict_cli_takes_its_format_choices_from_the_registry():
    from typer.testing import CliRunner

    from clinicode.cli import app

    res = CliRunner().invoke(app, ["predict", "--help"], terminal_width=400)
    for name in formats.READERS:
        assert name in res.output
    res = CliRunner().invoke(app, ["predict", "--checkpoint", "nowhere", "--input", "x.jsonl",
                                   "--input-format", "xml"])
    assert res.exit_code == 1 and f"unknown input format 'xml'; known formats: {', '.join(formats.READERS)}." \
        in res.output


def test_the_writers_write_what_predict_wrote_before():
    from clinicode.predict_io import records_bytes

    recs = [{"id": "a", "predicted": [{"code": "401.9", "description": "x", "score": 0.9}], "scores": {"401.9": 0.9},
             "truncated": False}, {"id": "b", "error": "note 'b': empty text; nothing to code"}]
    assert records_bytes(recs) == b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in recs)
    rows = list(csv.reader(io.StringIO(records_bytes(recs, fmt="csv").decode())))
    assert rows[0] == ["id", "predicted", "scores", "truncated", "error", "suggested", "from_terminology"]  # #43, #50
    assert rows[1] == ["a", "401.9", '{"401.9": 0.9}', "False", "", "", ""]
    bundle = json.loads(formats.writer("fhir").to_bytes(recs[:1]).decode().splitlines()[0])
    assert bundle["resourceType"] == "Bundle"


def test_the_csv_output_names_the_predicted_codes_scored_from_the_terminology():
    """A code no training note carried (`source` "terminology" in JSONL, a tag in FHIR) is named in CSV's
    from_terminology column, so a coder reading the spreadsheet sees which codes have no training evidence."""
    from clinicode.format_writers import csv_done
    from clinicode.predict_io import records_bytes

    rec = {"id": "a", "scores": {"401.9": 0.9, "C6": 0.8, "C7": 0.7}, "truncated": False,
           "predicted": [{"code": "401.9", "description": "x", "score": 0.9},
                         {"code": "C6", "description": "y", "score": 0.8, "source": "terminology"},
                         {"code": "C7", "description": "z", "score": 0.7, "source": "terminology"}]}
    text = records_bytes([rec], fmt="csv").decode()
    row = dict(zip(*csv.reader(io.StringIO(text))))
    assert row["predicted"] == "401.9;C6;C7" and row["from_terminology"] == "C6;C7", row
    # a part written before the column was added, resumed: its header is no note
    old = "id,predicted,scores,truncated,error,suggested\r\nb,401.9,{},False,,\r\n"
    assert csv_done(io.StringIO(old + text, newline="")) == {"a": 1, "b": 1}


# ------------------------------------------------------------------ predict's notes
def _document_reference(rid, text):
    doc = {"resourceType": "DocumentReference",
           "content": [{"attachment": {"contentType": "text/plain", "data": base64.b64encode(text.encode()).decode()}}]}
    if rid is not None:
        doc["id"] = rid
    return doc


def test_fhir_document_references_are_an_input_format(tmp_path):
    src = tmp_path / "docs.ndjson.gz"
    src.write_bytes(gzip.compress(BOM + _jsonl([_document_reference("n1", "Chest pain."),
                                                _document_reference(None, "Sepsis."),
                                                {"resourceType": "Patient"}])))
    recs = list(read_records(src, "fhir"))
    assert [(r.id, r.text) for r in recs[:2]] == [("n1", "Chest pain."), ("line-2", "Sepsis.")]
    assert recs[2].text is None and recs[2].error.startswith("line 3 of docs.ndjson.gz: expected a FHIR "
                                                             "DocumentReference resource")


def test_predict_reads_gz_txt_and_bom_csv_gz_notes(tmp_path):
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(BOM + b"Chest pain."))
    assert [(r.id, r.text) for r in read_records(tmp_path / "a.txt.gz")] == [("a", "Chest pain.")]
    up = Upload("n.csv.gz", gzip.compress(BOM + b"id,text\nx,Sepsis.\n"))
    assert [(r.id, r.text) for r in read_records(up)] == [("x", "Sepsis.")]


def test_an_oversized_csv_cell_is_a_bad_record_not_a_silent_drop(monkeypatch):
    import clinicode.records as records

    monkeypatch.setattr(records, "MAX_LINE_BYTES", 4096)
    data = b"id,text\na,fine\nbig," + b"x" * 5000 + b"\nc,also fine\n"
    recs = list(read_records(Upload("n.csv", data)))
    assert [r.id for r in recs] == ["a", "row-2", "c"]
    assert recs[1].error == "row 2 of n.csv: more than the 4,096 bytes a record may hold; split or shorten the note"


def test_gzip_bytes_are_read_through_gzip_whatever_the_name(tmp_path, monkeypatch):
    # `gzip -c notes.jsonl | clinicode predict --input -`, a pipe, or a .jsonl that is really gzip: the magic bytes
    # decide, so the notes are read instead of every line turning into a bad "not UTF-8" record.
    data = gzip.compress(_jsonl([{"id": "a", "text": "Chest pain."}, {"id": "b", "text": "Sepsis."}]))
    (tmp_path / "misnamed.jsonl").write_bytes(data)
    want = [("a", "Chest pain."), ("b", "Sepsis.")]
    assert [(r.id, r.text) for r in read_records(tmp_path / "misnamed.jsonl")] == want
    assert [(r.id, r.text) for r in read_records(Upload("n.jsonl", data))] == want
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    assert [(r.id, r.text) for r in read_records("-")] == want
    (tmp_path / "n.txt").write_bytes(gzip.compress(b"Chest pain."))
    assert [(r.id, r.text) for r in read_records(tmp_path / "n.txt")] == [("n", "Chest pain.")]


@pytest.mark.parametrize("encoding, name", [("utf-16", "UTF-16"), ("utf-16-be", "UTF-16"), ("utf-32", "UTF-32")])
def test_a_utf16_or_utf32_file_is_one_line_saying_how_to_re_encode_it(tmp_path, encoding, name):
    bom = {"utf-16-be": codecs.BOM_UTF16_BE}.get(encoding, b"")
    for fname, text in (("n.jsonl", '{"id": "a", "text": "x"}\n'), ("n.csv", "id,text\na,x\n")):
        (tmp_path / fname).write_bytes(bom + text.encode(encoding))
        with pytest.raises(DataFormatError) as err:
            list(read_records(tmp_path / fname))
        assert str(err.value) == (f"--input {tmp_path / fname}: {name} text (its byte-order mark says so), not UTF-8; "
                                  f"re-encode the file as UTF-8 (e.g. iconv -f {name} -t UTF-8).")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_bytes(bom + "Chest pain.".encode(encoding))
    (folder / "b.txt").write_bytes(b"Sepsis.")
    recs = list(read_records(folder))  # one such note in a folder is a bad record; the others are still read
    assert [(r.id, r.text) for r in recs] == [("a", None), ("b", "Sepsis.")]
    assert recs[0].error.startswith(f"file a.txt: {name} text (its byte-order mark says so)")


def test_a_byte_order_mark_starting_a_later_jsonl_line_is_dropped():
    # `cat a.jsonl b.jsonl` where b.jsonl was saved with a byte-order mark: its first note is read, not refused.
    data = b'{"id": "a", "text": "x"}\n' + BOM + b'{"id": "b", "text": "y"}\n'
    assert [(r.id, r.text, r.error) for r in read_records(Upload("n.jsonl", data))] == [("a", "x", None),
                                                                                         ("b", "y", None)]


def test_a_fifo_link_loop_or_folder_named_like_a_note_is_a_bad_record_not_a_silent_drop(tmp_path):
    import os

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"Chest pain.")
    os.mkfifo(folder / "fifo.txt")  # never opened: reading it would wait for a writer forever
    (folder / "loop1.txt").symlink_to("loop2.txt")
    (folder / "loop2.txt").symlink_to("loop1.txt")
    (folder / "sub.txt").mkdir()
    recs = list(read_records(folder))
    assert [(r.id, r.text) for r in recs] == [("a", "Chest pain."), ("fifo", None), ("loop1", None), ("loop2", None),
                                              ("sub", None)]
    assert recs[1].error == "file fifo.txt: a FIFO (named pipe), not a regular file; put the note in a plain .txt file"
    assert recs[2].error.startswith("file loop1.txt: a broken or looping symbolic link, not a regular file")
    assert recs[4].error.startswith("file sub.txt: a folder, not a regular file")


# ------------------------------------------------------------------ training's coded-notes folders
def test_a_gzipped_coded_notes_folder_loads(tmp_path):
    (tmp_path / "train.csv.gz").write_bytes(gzip.compress(_csv(TRAIN)))
    (tmp_path / "dev.jsonl.gz").write_bytes(gzip.compress(_jsonl(DEV)))
    ds = load_dataset(tmp_path)
    assert len(ds.split("train")) == 6 and len(ds.split("dev")) == 3
    assert list(ds.split("train")["labels"][1]) == ["401.9", "786.50"]
    assert list(read_split(tmp_path, "train")["id"]) == [r["id"] for r in TRAIN]


@pytest.mark.parametrize("gz", [False, True])
def test_bom_prefixed_csv_and_jsonl_splits_read(tmp_path, gz):
    pack = gzip.compress if gz else (lambda b: b)
    end = ".gz" if gz else ""
    (tmp_path / f"train.csv{end}").write_bytes(pack(BOM + _csv(TRAIN)))
    (tmp_path / f"dev.jsonl{end}").write_bytes(pack(BOM + _jsonl(DEV)))
    ds = load_dataset(tmp_path)
    assert list(ds.split("train")["id"]) == [r["id"] for r in TRAIN]
    assert list(ds.split("dev")["id"]) == [r["id"] for r in DEV]


@pytest.mark.parametrize("name, where", [("dev.jsonl", "line 2"), ("dev.csv", "row 2")])
def test_an_oversized_training_record_is_reported_in_one_line(tmp_path, monkeypatch, name, where):
    monkeypatch.setattr(formats, "MAX_RECORD_BYTES", 4096)
    (tmp_path / "train.jsonl").write_bytes(_jsonl(TRAIN))
    big = [DEV[0], {"id": "huge", "text": "x " * 5000, "labels": ["401.9"]}, DEV[2]]
    (tmp_path / name).write_bytes(_jsonl(big) if name.endswith(".jsonl") else _csv(big))
    with pytest.raises(DataFormatError) as err:
        load_dataset(tmp_path)
    assert str(err.value) == (f"{tmp_path / name} {where}: more than the 4,096 bytes a record may hold; "
                              "split or shorten the note.")
    assert "\n" not in str(err.value) and "x x" not in str(err.value)


@pytest.mark.parametrize("header, key", [(b"id,text,text", "text"), (b"id,id,text", "id")])
def test_a_csv_header_naming_id_or_text_twice_is_one_line_not_a_silently_ignored_column(header, key):
    # pandas renames the second 'text' to 'text.1' and predict would score only the first, ignoring the other.
    with pytest.raises(DataFormatError) as err:
        list(read_records(Upload("n.csv", header + b"\na,Chest pain.,Sepsis.\n")))
    assert str(err.value).startswith(f"n.csv: the header names {key!r} twice (columns: ")
    assert str(err.value).endswith("); rename or drop one, so no column is ignored.")


def test_a_training_csv_naming_labels_twice_is_refused(tmp_path):
    (tmp_path / "train.csv").write_bytes(b"id,text,labels,labels\nt1,Chest pain.,401.9,786.50\n")
    (tmp_path / "dev.jsonl").write_bytes(_jsonl(DEV))
    with pytest.raises(DataFormatError, match=r"the header names 'labels' twice"):
        load_dataset(tmp_path)


def test_damaged_gzip_on_stdin_or_in_a_notes_folder_is_told_in_one_line_not_a_bare_abort(tmp_path, monkeypatch):
    whole = gzip.compress(_jsonl([{"id": f"n{i}", "text": f"note {i} " * 200} for i in range(20)]))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(whole[:len(whole) // 2]))))
    with pytest.raises(DataFormatError, match=r"^--input -: damaged or truncated gzip on stdin \(EOFError\); send "):
        list(read_records("-"))
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("Chest pain.")
    cut = gzip.compress(b"Sepsis. " * 2000)
    (folder / "b.txt.gz").write_bytes(cut[:len(cut) // 2])
    (folder / "c.txt").write_text("Fever.")
    recs = list(read_records(folder))  # one damaged note is its own bad record; the others are read
    assert [(r.id, r.text) for r in recs] == [("a", "Chest pain."), ("b", None), ("c", "Fever.")]
    assert recs[1].error == "file b.txt.gz: damaged or truncated gzip (EOFError); write it again"


def test_predict_reads_a_csv_naming_a_column_it_ignores_twice():
    # only id and text matter to predict; a duplicated labels column is training's concern (refused there)
    recs = list(read_records(Upload("n.csv", b"id,text,labels,labels\n1,chest pain,a,b\n")))
    assert [(r.id, r.text, r.error) for r in recs] == [("1", "chest pain", None)]
