"""FHIR R4 output: `clinicode predict` records -> a Bundle of unconfirmed, machine-generated Conditions and Procedures.

The one builder for `clinicode predict --format fhir` and `clinicode serve` (`bundle`), plus the reverse step for FHIR
input (`note_from_document_reference`). It works on the records `Prediction.to_dict()` gives, never on model
internals, so a record and its Bundle always agree.

Per predicted code one resource: a `Condition` for a diagnosis (ICD-9-CM or ICD-10-CM), a `Procedure` for a procedure
(ICD-9-CM volume 3 or ICD-10-PCS), coded with the standard system URIs. Every resource is marked as a suggestion no
person has reviewed: `meta.tag` machine-generated, `Condition.verificationStatus` unconfirmed, `Procedure.status`
unknown. The score, the note id and the code's evidence spans travel in the extensions named below (defined in
docs/serve.md). A record that could not be scored becomes an `OperationOutcome` entry holding its error.

Code-system rules (which codes are procedures, which system URI) come from the checkpoint's `CodeSystem`
(`clinicode.codes.systems`).
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import uuid
from typing import Any, Mapping, Sequence

from clinicode.codes import systems as _cs
from clinicode.errors import DataFormatError

ICD10_CM, ICD10_PCS, ICD9_CM = _cs.ICD10_CM.uri, _cs.ICD10_PCS.uri, _cs.ICD9_CM.uri  # the URIs live with the systems

# clinicode's own definitions (docs/serve.md, "FHIR output"). One namespace, named once, so it can be repointed.
NAMESPACE = "https://clinicode.example/fhir"
EXT_SCORE = f"{NAMESPACE}/StructureDefinition/score"          # valueDecimal: the model's probability for the code
EXT_NOTE_ID = f"{NAMESPACE}/StructureDefinition/note-id"      # valueString: the id of the note the code came from
# complex: start, end (valueInteger), weight (valueDecimal)
EXT_EVIDENCE = f"{NAMESPACE}/StructureDefinition/evidence"
TAG_SYSTEM = f"{NAMESPACE}/CodeSystem/provenance"
LOCAL_SYSTEM = f"{NAMESPACE}/CodeSystem/label"                # a checkpoint's own label that is no ICD code
MACHINE_TAG = {"system": TAG_SYSTEM, "code": "machine-generated",
               "display": "Suggested by clinicode (a statistical model); not reviewed by a person"}

_VER_STATUS = "http://terminology.hl7.org/CodeSystem/condition-ver-status"
_CATEGORY = "http://terminology.hl7.org/CodeSystem/condition-category"
_ABSENT = "http://hl7.org/fhir/StructureDefinition/data-absent-reason"

DIAGNOSIS, PROCEDURE = "diagnosis", "procedure"


# ------------------------------------------------------------------ code systems
def code_systems(codes: Sequence[str], system: _cs.CodeSystem | None = None) -> dict[str, tuple[str, str]]:
    """{code: (kind, system URI)} for a checkpoint's label set, as its CodeSystem says (`Predictor.code_system`);
    without one it is inferred from the codes. A code of no standard system gets clinicode's LOCAL_SYSTEM."""
    system = system or _cs.infer_code_system(codes)
    return {c: (system.kind(c), system.uri_of(c) or LOCAL_SYSTEM) for c in codes}


# ------------------------------------------------------------------ Bundle
def subject_reference(subject: Any) -> dict[str, Any]:
    """The Reference for a note's subject: 'Patient/123' -> {'reference': ...}; a Reference object is kept as given;
    none -> the standard data-absent-reason 'unknown' (Condition.subject and Procedure.subject are required)."""
    if subject is None:
        return {"extension": [{"url": _ABSENT, "valueCode": "unknown"}]}
    if isinstance(subject, str):
        return {"reference": subject}
    return dict(subject)


def _span_ext(span: Mapping[str, Any]) -> dict[str, Any]:
    return {"url": EXT_EVIDENCE, "extension": [{"url": "start", "valueInteger": int(span["start"])},
                                               {"url": "end", "valueInteger": int(span["end"])},
                                               {"url": "weight", "valueDecimal": float(span["weight"])}]}


def _resource(rec: Mapping[str, Any], pred: Mapping[str, Any], subject: dict[str, Any],
              systems: Mapping[str, tuple[str, str]], document: str | None) -> dict[str, Any]:
    code = pred["code"]
    kind, system = systems.get(code) or code_systems([code], _cs.MIXED)[code]
    coding = {"system": system, "code": code}
    if pred.get("description"):
        coding["display"] = pred["description"]
    ext = [{"url": EXT_SCORE, "valueDecimal": float(pred["score"])},
           {"url": EXT_NOTE_ID, "valueString": str(rec["id"])}]
    ext += [_span_ext(s) for s in ((rec.get("evidence") or {}).get("codes") or {}).get(code, [])]
    res: dict[str, Any] = {"resourceType": "Condition" if kind == DIAGNOSIS else "Procedure",
                           "meta": {"tag": [MACHINE_TAG]}, "extension": ext}
    if kind == DIAGNOSIS:
        res["verificationStatus"] = {"coding": [{"system": _VER_STATUS, "code": "unconfirmed"}]}
        res["category"] = [{"coding": [{"system": _CATEGORY, "code": "encounter-diagnosis"}]}]
    else:
        res["status"] = "unknown"
    res["code"] = {"coding": [coding], **({"text": pred["description"]} if pred.get("description") else {})}
    res["subject"] = subject
    if document and kind == DIAGNOSIS:
        res["evidence"] = [{"detail": [{"reference": document}]}]
    return res


def _outcome(rec: Mapping[str, Any]) -> dict[str, Any]:
    return {"resourceType": "OperationOutcome", "meta": {"tag": [MACHINE_TAG]},
            "extension": [{"url": EXT_NOTE_ID, "valueString": str(rec["id"])}],
            "issue": [{"severity": "error", "code": "invalid", "diagnostics": str(rec["error"])}]}


def bundle(records: Sequence[Mapping[str, Any]], *, systems: Mapping[str, tuple[str, str]] | None = None,
           subjects: Sequence[Any] | None = None, documents: Sequence[str | None] | None = None) -> dict[str, Any]:
    """A FHIR R4 `collection` Bundle of the predicted codes of RECORDS (as `Prediction.to_dict()` gives them).

    Args:
        systems: `code_systems(predictor.codes)`; codes missing from it are classified alone.
        subjects: per record, the note's subject ('Patient/1' or a Reference object) or None.
        documents: per record, a reference to the note's DocumentReference ('DocumentReference/7') or None;
            Conditions cite it in `evidence.detail`.
    Returns:
        the Bundle as a JSON-ready dict: one Condition or Procedure per predicted code (record order, then score
        order), one OperationOutcome per record with an error.
    """
    systems = systems or {}
    entries = []
    for i, rec in enumerate(records):
        if "error" in rec:
            resources = [_outcome(rec)]
        else:
            subject = subject_reference(subjects[i] if subjects else None)
            doc = documents[i] if documents else None
            resources = [_resource(rec, p, subject, systems, doc) for p in rec.get("predicted", [])]
        entries += [{"fullUrl": f"urn:uuid:{uuid.uuid4()}", "resource": r} for r in resources]
    out: dict[str, Any] = {"resourceType": "Bundle", "meta": {"tag": [MACHINE_TAG]}, "type": "collection",
                           "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if entries:
        out["entry"] = entries
    return out


# ------------------------------------------------------------------ FHIR in
def note_from_document_reference(doc: Any) -> dict[str, Any]:
    """{'id', 'text', 'subject', 'document'} from a DocumentReference whose first attachment holds the note as base64
    `data` (text/plain, UTF-8 unless the contentType names another charset).

    Raises:
        DataFormatError: a message saying what is missing or wrong and how to fix it (never the note's text).
    """
    if not isinstance(doc, dict) or doc.get("resourceType") != "DocumentReference":
        got = doc.get("resourceType") if isinstance(doc, dict) else type(doc).__name__
        raise DataFormatError(f"expected a FHIR DocumentReference resource (resourceType 'DocumentReference'), got "
                              f"{str(got)[:40]!r}; send the note as DocumentReference.content[0].attachment.data.")
    content = doc.get("content")
    if not isinstance(content, list) or not content:
        raise DataFormatError("DocumentReference has no content; put the note in content[0].attachment.data (base64).")
    att = content[0].get("attachment") if isinstance(content[0], dict) else None
    if not isinstance(att, dict) or not isinstance(att.get("data"), str):
        raise DataFormatError("DocumentReference.content[0].attachment has no base64 'data'; put the note's text there "
                              "(a 'url' to fetch is not supported).")
    ctype = str(att.get("contentType") or "text/plain")
    mime, _, params = ctype.partition(";")
    if mime.strip().lower() != "text/plain":
        raise DataFormatError(f"attachment contentType {ctype[:60]!r} is not supported; send the note as text/plain.")
    charset = "utf-8"
    for p in params.split(";"):
        k, _, v = p.strip().partition("=")
        if k.lower() == "charset" and v:
            charset = v.strip().strip('"')
    try:
        raw = base64.b64decode(att["data"], validate=True)
    except (binascii.Error, ValueError):
        raise DataFormatError("attachment data is not valid base64; encode the note's bytes with base64 "
                              "(e.g. `base64 -w0 note.txt`).") from None
    try:
        text = raw.decode(charset)
    except (LookupError, UnicodeDecodeError):
        raise DataFormatError(f"attachment data does not decode as {charset[:20]}; send UTF-8 text or name its "
                              "charset in contentType.") from None
    rid = doc.get("id")
    subject = doc.get("subject")
    if subject is not None and not isinstance(subject, dict):
        raise DataFormatError("DocumentReference.subject must be a Reference object, e.g. "
                              "{\"reference\": \"Patient/1\"}.")
    return {"id": str(rid) if rid is not None else "0", "text": text, "subject": subject,
            "document": f"DocumentReference/{rid}" if isinstance(rid, str) and rid else None}
