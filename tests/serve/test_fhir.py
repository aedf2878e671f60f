"""FHIR R4 output and input (clinicode.fhir): code systems, resource kinds, unconfirmed machine suggestions, the score
and evidence extensions, subjects, errors, DocumentReference parsing; `predict --format fhir` writes the same Bundle.
Every Bundle is validated with the `fhir.resources` R4B models."""

import base64
import json

import pytest

from clinicode import __version__, fhir
from clinicode.codes import systems as codes
from clinicode.errors import DataFormatError
from tests.helpers import SECRET, fails, succeeds

R4B = pytest.importorskip("fhir.resources.R4B.bundle")


def validate(b: dict) -> None:
    R4B.Bundle.model_validate(b)  # raises on any structural error (required fields, types, unknown keys)


@pytest.mark.parametrize("code, version, kind, system", [
    ("401.9", None, "diagnosis", fhir.ICD9_CM),        # ICD-9-CM diagnosis
    ("038.9", 9, "diagnosis", fhir.ICD9_CM),           # leading zero
    ("V58.61", 9, "diagnosis", fhir.ICD9_CM),
    ("E849.7", None, "diagnosis", fhir.ICD9_CM),
    ("38.93", None, "procedure", fhir.ICD9_CM),        # ICD-9-CM procedure: the dot after 2 characters
    ("00.40", 9, "procedure", fhir.ICD9_CM),
    ("J18.9", None, "diagnosis", fhir.ICD10_CM),
    ("I10", 10, "diagnosis", fhir.ICD10_CM),
    ("S72.001A", 10, "diagnosis", fhir.ICD10_CM),
    ("02HV33Z", None, "procedure", fhir.ICD10_PCS),    # ICD-10-PCS: 7 characters, never dotted
    ("5A1955Z", 10, "procedure", fhir.ICD10_PCS),
    ("V58.61", 10, "diagnosis", fhir.ICD10_CM),        # a V code in an ICD-10 label set is ICD-10-CM
    ("my-label", None, "diagnosis", fhir.LOCAL_SYSTEM),
])
def test_the_label_sets_code_system_decides_kind_and_uri(code, version, kind, system):
    cs = {None: codes.MIXED, 9: codes.ICD9_CM, 10: codes.ICD10}[version]  # None: each code alone, as before
    assert fhir.code_systems([code], cs)[code] == (kind, system)


def test_mesh_codes_are_conditions_in_mesh_not_icd10_pcs_procedures():
    """'D009369' has the shape of an undotted ICD-10-PCS code: the shape guess made MeSH labels PCS procedures."""
    systems = fhir.code_systems(["D009369", "C537666", "OMIM:312080"])  # a MeSH set's labels, the system inferred
    assert systems == {"D009369": ("diagnosis", codes.MESH.uri), "C537666": ("diagnosis", codes.MESH.uri),
                       "OMIM:312080": ("diagnosis", codes.OMIM.uri)}
    assert fhir.code_systems(["D009369"], codes.MESH_OMIM)["D009369"] == ("diagnosis", "https://www.nlm.nih.gov/mesh")


def test_a_code_classified_alone_asks_the_registry_so_a_mesh_id_is_no_pcs_procedure():
    """Codes of a mixed set, and suggested codes of a Bundle that names no family, are classified by the registry."""
    assert fhir.code_systems(["D009369", "401.9"])["D009369"] == ("diagnosis", codes.MESH.uri)
    rec = {"id": "n1", "predicted": [], "suggested": [{"code": "D009369", "description": "Neoplasms", "spans": []}]}
    (entry,) = fhir.bundle([rec])["entry"]
    assert entry["resource"]["resourceType"] == "Condition"
    assert entry["resource"]["code"]["coding"][0]["system"] == codes.MESH.uri


def test_label_set_version_decides_ambiguous_codes():
    nine = fhir.code_systems(["401.9", "38.93", "V58.61"])
    assert nine["V58.61"] == ("diagnosis", fhir.ICD9_CM) and nine["38.93"] == ("procedure", fhir.ICD9_CM)
    ten = fhir.code_systems(["J18.9", "02HV33Z", "V58.61"])
    assert ten["V58.61"] == ("diagnosis", fhir.ICD10_CM) and ten["02HV33Z"] == ("procedure", fhir.ICD10_PCS)


def _rec(rid="n1", explain=True):
    rec = {"id": rid, "predicted": [{"code": "401.9", "description": "Hypertension NOS", "score": 0.91},
                                    {"code": "38.93", "description": "Venous cath NEC", "score": 0.6}],
           "scores": {"401.9": 0.91, "38.93": 0.6, "428.0": 0.2}, "truncated": False}
    if explain:
        rec["evidence"] = {"spans": [{"start": 0, "end": 5, "weight": 0.3}],
                           "codes": {"401.9": [{"start": 10, "end": 22, "weight": 0.8}, {"start": 30, "end": 41,
                                                                                         "weight": 0.5}],
                                     "38.93": [{"start": 50, "end": 60, "weight": 0.4}]}}
    return rec


def _ext(res, url):
    return [e for e in res.get("extension", []) if e["url"] == url]


def test_bundle_resources_are_unconfirmed_machine_suggestions_with_score_evidence_and_subject():
    systems = fhir.code_systems(["401.9", "38.93", "428.0"])
    b = fhir.bundle([_rec()], systems=systems, subjects=["Patient/42"], documents=["DocumentReference/d1"])
    validate(b)
    assert b["resourceType"] == "Bundle" and b["type"] == "collection"
    cond, proc = (e["resource"] for e in b["entry"])
    assert cond["resourceType"] == "Condition" and proc["resourceType"] == "Procedure"
    assert cond["code"]["coding"][0] == {"system": fhir.ICD9_CM, "code": "401.9", "display": "Hypertension NOS"}
    assert cond["verificationStatus"]["coding"][0]["code"] == "unconfirmed"
    assert proc["status"] == "unknown"
    for res in (cond, proc):
        assert fhir.MACHINE_TAG in res["meta"]["tag"]
        assert res["subject"] == {"reference": "Patient/42"}
        assert _ext(res, fhir.EXT_NOTE_ID)[0]["valueString"] == "n1"
    assert _ext(cond, fhir.EXT_SCORE)[0]["valueDecimal"] == pytest.approx(0.91)
    spans = [{x["url"]: x.get("valueInteger",
                              x.get("valueDecimal")) for x in e["extension"]} for e in _ext(cond, fhir.EXT_EVIDENCE)]
    assert spans == [{"start": 10, "end": 22, "weight": 0.8}, {"start": 30, "end": 41, "weight": 0.5}]
    assert len(_ext(proc, fhir.EXT_EVIDENCE)) == 1
    assert cond["evidence"][0]["detail"][0]["reference"] == "DocumentReference/d1"
    assert len({e["fullUrl"] for e in b["entry"]}) == 2


def test_bundle_without_subject_uses_data_absent_reason_and_errors_become_operation_outcomes():
    b = fhir.bundle([_rec(explain=False), {"id": "bad", "error": "note 'bad': empty text; nothing to code"},
                     {"id": "none", "predicted": [], "scores": {}, "truncated": False}])
    validate(b)
    kinds = [e["resource"]["resourceType"] for e in b["entry"]]
    # a note with no code above the threshold: an informational OperationOutcome naming it (#42: it left no trace)
    assert kinds == ["Condition", "Procedure", "OperationOutcome", "OperationOutcome"]
    nothing = b["entry"][3]["resource"]
    assert nothing["issue"][0]["severity"] == "information" and "no code reached" in nothing["issue"][0]["diagnostics"]
    assert _ext(nothing, fhir.EXT_NOTE_ID)[0]["valueString"] == "none"
    assert b["entry"][0]["resource"]["subject"]["extension"][0]["valueCode"] == "unknown"
    outcome = b["entry"][2]["resource"]
    assert outcome["issue"][0]["severity"] == "error" and "empty text" in outcome["issue"][0]["diagnostics"]
    assert _ext(outcome, fhir.EXT_NOTE_ID)[0]["valueString"] == "bad"
    assert not _ext(b["entry"][0]["resource"], fhir.EXT_EVIDENCE)
    empty = fhir.bundle([{"id": "x", "predicted": [], "scores": {}, "truncated": False}],
                        documents=["DocumentReference/d9"])
    validate(empty)
    [only] = [e["resource"] for e in empty["entry"]]
    assert "DocumentReference/d9" in only["issue"][0]["diagnostics"]
    assert "entry" not in fhir.bundle([])


def test_icd10_bundle_uses_cm_and_pcs_systems():
    rec = {"id": "m4", "predicted": [{"code": "J18.9", "description": "Pneumonia", "score": 0.7},
                                     {"code": "02HV33Z", "description": "Insertion", "score": 0.6}], "scores": {}}
    b = fhir.bundle([rec], systems=fhir.code_systems(["J18.9", "02HV33Z", "I10"]),
                    subjects=[{"reference": "Patient/7"}])
    validate(b)
    cond, proc = (e["resource"] for e in b["entry"])
    assert (cond["resourceType"], cond["code"]["coding"][0]["system"]) == ("Condition", fhir.ICD10_CM)
    assert (proc["resourceType"], proc["code"]["coding"][0]["system"]) == ("Procedure", fhir.ICD10_PCS)
    assert proc["subject"] == {"reference": "Patient/7"}


def _docref(text, **kw):
    d = {"resourceType": "DocumentReference", "id": "doc-1", "status": "current", "subject": {"reference": "Patient/9"},
         "content": [{"attachment": {"contentType": "text/plain; charset=utf-8",
                                     "data": base64.b64encode(text.encode("utf-8")).decode()}}]}
    d.update(kw)
    return d


def test_document_reference_in():
    from fhir.resources.R4B.documentreference import DocumentReference

    doc = _docref("chest pain, hypertension é")
    DocumentReference.model_validate(doc)  # the example input is itself valid R4B
    note = fhir.note_from_document_reference(doc)
    assert note == {"id": "doc-1", "text": "chest pain, hypertension é", "subject": {"reference": "Patient/9"},
                    "document": "DocumentReference/doc-1"}


@pytest.mark.parametrize("doc, message", [
    ({"resourceType": "Patient"}, "expected a FHIR DocumentReference"),
    ([1, 2], "expected a FHIR DocumentReference"),
    ({"resourceType": "DocumentReference"}, "has no content"),
    ({"resourceType": "DocumentReference", "content": [{"attachment": {"url": "http://x"}}]}, "no base64 'data'"),
    (_docref("x", content=[{"attachment": {"data": "%%" + SECRET}}]), "not valid base64"),
    (_docref("x", content=[{"attachment": {"contentType": "application/pdf", "data": "AAAA"}}]), "not supported"),
    (_docref("x", content=[{"attachment": {"data": base64.b64encode(b"\xff\xfe" + SECRET.encode()).decode()}}]),
     "does not decode"),
    (_docref("x", subject="Patient/1"), "must be a Reference object"),
])
def test_document_reference_errors_say_what_and_never_echo_text(doc, message):
    with pytest.raises(DataFormatError) as err:
        fhir.note_from_document_reference(doc)
    assert message in str(err.value) and SECRET not in str(err.value)


@pytest.mark.parametrize("rid", ["\u2028", " \u3000 ", "", "a\x01b"])
def test_a_note_id_that_is_no_fhir_string_becomes_an_outcome_never_an_invalid_bundle(rid):
    """Second hostile round: `predict --format fhir` (which, unlike serve, takes any id) wrote every resource of such a
    note with a note-id extension FHIR refuses; now the note is one OperationOutcome saying why."""
    rec = {**_rec(explain=True), "id": rid}
    b = fhir.bundle([rec, _rec(explain=False)])
    validate(b)
    first = b["entry"][0]["resource"]
    assert first["resourceType"] == "OperationOutcome" and "extension" not in first
    assert "id of visible characters" in first["issue"][0]["diagnostics"]
    assert [e["resource"]["resourceType"] for e in b["entry"][1:]] == ["Condition", "Procedure"]
    bad = fhir.bundle([{"id": rid, "error": "note: empty text; nothing to code"}])
    validate(bad)
    assert "extension" not in bad["entry"][0]["resource"]


def test_predict_format_fhir_writes_one_bundle_per_note(tiny_run, demo_data, tmp_path):
    import pandas as pd

    rows = pd.read_parquet(demo_data / "test.parquet").head(12)
    src = tmp_path / "notes.jsonl"
    with open(src, "w") as f:
        for rid, text in zip(rows["id"], rows["text"]):
            f.write(json.dumps({"id": str(rid), "text": text}) + "\n")
        f.write(json.dumps({"id": "blank", "text": "  "}) + "\n")
    args = ["predict", "--checkpoint", tiny_run, "--input", src, "--explain", "2", "--threshold", "0.2",
            "--no-progress"]
    succeeds(args + ["--output", tmp_path / "rec.jsonl"])
    succeeds(args + ["--output", tmp_path / "fhir.jsonl", "--format", "fhir"])
    records = [json.loads(x) for x in open(tmp_path / "rec.jsonl")]
    bundles = [json.loads(x) for x in open(tmp_path / "fhir.jsonl")]
    assert len(bundles) == len(records) == 13
    systems = fhir.code_systems([c for r in records for c in r.get("scores", {})])
    n_proc = 0
    from clinicode.checkpoint import load_checkpoint

    sha = load_checkpoint(tiny_run / "checkpoint").manifest_sha256
    for rec, b in zip(records, bundles):
        validate(b)
        device, *res = [e["resource"] for e in b.get("entry", [])]  # each Bundle names the model that made it
        assert device["resourceType"] == "Device" and device["identifier"][0]["value"] == sha
        assert all(r["meta"]["source"].endswith("/checkpoint/" + sha) for r in res)
        if "error" in rec:
            assert [r["resourceType"] for r in res] == ["OperationOutcome"]
            continue
        assert [r["code"]["coding"][0]["code"] for r in res] == [p["code"] for p in rec["predicted"]]
        for r, p in zip(res, rec["predicted"]):
            assert _ext(r, fhir.EXT_SCORE)[0]["valueDecimal"] == pytest.approx(p["score"], abs=1e-6)
            assert _ext(r, fhir.EXT_NOTE_ID)[0]["valueString"] == rec["id"]
            want = "Procedure" if systems[p["code"]][0] == "procedure" else "Condition"
            assert r["resourceType"] == want
            n_proc += want == "Procedure"
        strip = lambda x: {k: v for k, v in x.items() if k not in ("timestamp", "entry")}  # noqa: E731
        source = fhir.model_source(checkpoint_sha256=sha, model="leam", name=tiny_run.name,
                                   clinicode_version=__version__)
        assert device == fhir.model_device(source)
        assert strip(b) == strip(fhir.bundle([rec], systems=systems, source=source))  # the same builder
    assert n_proc > 0  # the demo's top-50 set has ICD-9 procedures: they come out as Procedures
    # a rerun may replace its own FHIR output; FHIR output cannot be resumed or written as CSV
    succeeds(args + ["--output", tmp_path / "fhir.jsonl", "--format", "fhir"])
    fails(args + ["--output", tmp_path / "fhir.csv", "--format", "fhir"],
          "--format fhir writes one FHIR R4 Bundle a note and line (docs/serve.md): give an --output not ending "
          "in .csv (that is csv's ending)")
    fails(args + ["--output", tmp_path / "f2.jsonl", "--format", "fhir", "--resume"], "drop --resume")
    fails(args + ["--output", tmp_path / "f3.jsonl", "--format", "xml"], "expected records or fhir")
