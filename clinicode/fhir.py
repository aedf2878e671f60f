"""FHIR R4 output: `clinicode predict` records -> a Bundle of unconfirmed, machine-generated Conditions and Procedures.

The one builder for `predict --format fhir` and `serve` (`bundle`), and FHIR input (`note_from_document_reference`)."""

from __future__ import annotations

import base64
import binascii
import codecs
import datetime as _dt
import json
import re
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
CHECKPOINT_SYSTEM = f"{NAMESPACE}/checkpoint"                 # + "/<sha256>": meta.source; Device.identifier.system
REQUEST_SYSTEM = f"{NAMESPACE}/request-id"                    # Bundle.identifier of a service answer
LOCAL_SYSTEM = f"{NAMESPACE}/CodeSystem/label"                # a checkpoint's own label that is no ICD code
MACHINE_TAG = {"system": TAG_SYSTEM, "code": "machine-generated",
               "display": "Suggested by clinicode (a statistical model); not reviewed by a person"}
# A code the checkpoint was not trained on, suggested because its title stands in the note (#43): no model score.
TITLE_TAG = {"system": TAG_SYSTEM, "code": "suggested-from-title",
             "display": "Suggested from the code's title found in the note; the model was not trained on this code"}
EXT_SUGGESTION = f"{NAMESPACE}/StructureDefinition/suggested-from-title"  # valueString: why (the suggester's reason)
# A predicted code no training note carried (`train --terminology`): scored from its title alone (#50).
TERMINOLOGY_TAG = {"system": TAG_SYSTEM, "code": "from-terminology",
                   "display": "Predicted from the code's title alone; no training note carried this code"}


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
_REFERENCE_KEYS = {"reference": str, "type": str, "display": str, "identifier": dict}
_SUBJECT_HOW = "give \"Patient/123\" or a Reference object such as {\"reference\": \"Patient/123\"}"


def _fhir_string(v: Any) -> bool:
    """A FHIR `string` value: non-empty, not only spaces, no control characters but tab and newlines."""
    return (isinstance(v, str) and 0 < len(v) <= 4096 and bool(v.strip())
            and not any(ord(c) < 32 and c not in "\t\r\n" for c in v))


def _fhir_uri(v: Any) -> bool:
    """A FHIR `uri` value (Reference.type, Identifier.system) or a literal reference: a string without whitespace."""
    return _fhir_string(v) and not any(c.isspace() for c in v)


def _check_reference(v: Any, where: str) -> None:
    if isinstance(v, str) and len(v) > 4096:
        raise DataFormatError(f"{where} is too long ({len(v):,} characters; a FHIR string holds at most 4,096); "
                              f"{_SUBJECT_HOW}.")
    if not _fhir_uri(v):
        raise DataFormatError(f"{where} is an empty or blank string, or holds spaces or control characters; "
                              f"{_SUBJECT_HOW}.")
    if v.startswith("#"):  # would point into each Condition's own `contained`, which holds nothing: a dangling link
        raise DataFormatError(f"{where} is a reference to a contained resource ('#...'), which cannot be carried into "
                              f"the Bundle; {_SUBJECT_HOW}.")


def check_subject(subject: Any, where: str) -> None:
    """Refuse a subject that would not make a valid FHIR Reference (Condition.subject of every resource built from it).

    Args:
        subject: None, a reference string ('Patient/123') or a Reference object with `reference`, `type`, `display`
            and/or `identifier` ({'system', 'value'}).
        where: the field's name for the message (e.g. 'notes[0].subject').
    Raises:
        DataFormatError: naming the field and what a subject may be (never its value).
    """
    if subject is None:
        return
    if isinstance(subject, str):
        _check_reference(subject, where)
        return
    if not isinstance(subject, dict):
        raise DataFormatError(f"{where} is not a string or an object; {_SUBJECT_HOW}.")
    unknown = sorted(k for k in subject if k not in _REFERENCE_KEYS)
    if unknown:
        raise DataFormatError(f"{where} has an unknown field {str(unknown[0])[:40]!r}; a Reference here has reference, "
                              f"type, display and identifier; {_SUBJECT_HOW}.")
    if not subject:
        raise DataFormatError(f"{where} is an empty object; {_SUBJECT_HOW}.")
    for key, value in subject.items():
        if key == "identifier":
            ok = (isinstance(value, dict) and value and set(value) <= {"system", "value"}
                  and all(_fhir_string(x) for x in value.values()) and _fhir_uri(value.get("system", "x")))
            if not ok:
                raise DataFormatError(f"{where}.identifier must be an object with string 'system' (a URI, no "
                                      "spaces) and/or 'value', e.g. {\"system\": \"urn:oid:1.2.36.146.595.217.0.1\", "
                                      "\"value\": \"12345\"}.")
        elif key == "reference" and _fhir_string(value):
            _check_reference(value, f"{where}.reference")
        elif key == "type" and isinstance(value, str) and not _fhir_uri(value):
            raise DataFormatError(f"{where}.type must be a resource type such as \"Patient\" (a URI: no spaces).")
        elif not _fhir_string(value):
            raise DataFormatError(f"{where}.{key} must be a non-empty string; {_SUBJECT_HOW}.")


def subject_reference(subject: Any) -> dict[str, Any]:
    """The Reference for a note's subject: 'Patient/123' -> {'reference': ...}; a Reference object is kept as given;
    none -> the standard data-absent-reason 'unknown' (Condition.subject and Procedure.subject are required)."""
    if subject is None:
        return {"extension": [{"url": _ABSENT, "valueCode": "unknown"}]}
    if isinstance(subject, str):
        return {"reference": subject}
    return dict(subject)


def _span_ext(span: Mapping[str, Any]) -> dict[str, Any]:
    parts = [{"url": "start", "valueInteger": int(span["start"])}, {"url": "end", "valueInteger": int(span["end"])}]
    if "weight" in span:  # a suggestion's title spans have none
        parts.append({"url": "weight", "valueDecimal": float(span["weight"])})
    return {"url": EXT_EVIDENCE, "extension": parts}


def _suggested_resource(rec: Mapping[str, Any], sug: Mapping[str, Any], subject: dict[str, Any],
                        family: _cs.CodeSystem, document: str | None) -> dict[str, Any]:
    """A code suggested from its title: an unconfirmed Condition (or a Procedure of unknown status), tagged
    `suggested-from-title` beside machine-generated, with the reason and the title's spans; no score extension (the
    model gave it none)."""
    res = _resource(rec, {"code": sug["code"], "description": sug.get("title", "")}, subject,
                    code_systems([sug["code"]], family), document, title=sug)
    res["extension"].insert(0, {"url": EXT_SUGGESTION, "valueString": str(sug.get("reason") or "title in the note")})
    return res


def model_device(source: Mapping[str, Any]) -> dict[str, Any]:
    """A Device resource naming the model that made the suggestions: the checkpoint's hash (identifier), the run's
    name, the model kind and the clinicode version (SOURCE as `model_source` gives it)."""
    dev: dict[str, Any] = {"resourceType": "Device", "meta": {"tag": [MACHINE_TAG]},
                           "identifier": [{"system": CHECKPOINT_SYSTEM, "value": str(source["checkpoint_sha256"])}],
                           "manufacturer": "clinicode",
                           "type": {"text": f"clinicode {source['model']} model (automated ICD coding)"},
                           "version": [{"value": str(source["clinicode_version"])}]}
    if source.get("name"):
        dev["deviceName"] = [{"name": str(source["name"]), "type": "model-name"}]
    return dev


def predictor_source(predictor: Any) -> dict[str, Any]:
    """`model_source` of a loaded `Predictor`: its checkpoint's hash, its model kind, its run folder's name and this
    clinicode's version."""
    from pathlib import Path

    from clinicode import __version__

    return model_source(checkpoint_sha256=predictor.checkpoint.manifest_sha256, model=predictor.kind,
                        name=Path(predictor.checkpoint.path).resolve().parent.name, clinicode_version=__version__)


def model_source(*, checkpoint_sha256: str, model: str, name: str | None, clinicode_version: str) -> dict[str, Any]:
    """The identity of a checkpoint as `bundle` takes it (`source=`): every resource's `meta.source` becomes
    `<NAMESPACE>/checkpoint/<sha256>` and the Bundle holds one Device with the rest."""
    return {"checkpoint_sha256": checkpoint_sha256, "model": model, "name": name,
            "clinicode_version": clinicode_version}


def _resource(rec: Mapping[str, Any], pred: Mapping[str, Any], subject: dict[str, Any],
              systems: Mapping[str, tuple[str, str]], document: str | None, *,
              title: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One Condition or Procedure of a predicted code (PRED), or of a title suggestion (TITLE: no score, its word
    spans as evidence without weight, tagged TITLE_TAG)."""
    code = pred["code"]
    kind, system = systems.get(code) or code_systems([code], _cs.MIXED)[code]  # alone, as the registry reads it
    coding = {"system": system, "code": code}
    if pred.get("description"):
        coding["display"] = pred["description"]
    if title is None:
        ext = [{"url": EXT_SCORE, "valueDecimal": float(pred["score"])}, *_note_id(rec)]
        ext += [_span_ext(s) for s in ((rec.get("evidence") or {}).get("codes") or {}).get(code, [])]
    else:
        ext = [*_note_id(rec), *({"url": EXT_EVIDENCE, "extension": [{"url": "start", "valueInteger": int(s["start"])},
                                                                      {"url": "end", "valueInteger": int(s["end"])}]}
                                 for s in title.get("spans", []))]
    res: dict[str, Any] = {"resourceType": "Condition" if kind == DIAGNOSIS else "Procedure",
                           "meta": {"tag": [MACHINE_TAG, TITLE_TAG] if title is not None else
                                    [MACHINE_TAG, TERMINOLOGY_TAG] if pred.get("source") == "terminology" else
                                    [MACHINE_TAG]},
                           "extension": ext}
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


def _note_id(rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The note-id extension, when the id is a FHIR string (an id of only spaces such as '\u2028' is none)."""
    rid = str(rec["id"])
    return [{"url": EXT_NOTE_ID, "valueString": rid}] if _fhir_string(rid) else []


def _bad_id(rec: Mapping[str, Any]) -> str:
    """Why the note's id is no FHIR string (so no resource can name it), and how to fix it."""
    rid = str(rec["id"])
    if len(rid) > 4096:
        return (f"the note's id is too long ({len(rid):,} characters; a FHIR string holds at most 4,096), so its codes "
                "cannot be carried into FHIR; give each note a shorter id.")
    return ("the note's id is empty, blank or holds control characters, so its codes cannot be carried into FHIR; "
            "give each note an id of visible characters.")


def _nothing_predicted(rec: Mapping[str, Any], document: str | None) -> dict[str, Any]:
    """An informational OperationOutcome for a note scored with no code over the threshold: the Bundle still names
    the note (its id, and its DocumentReference when it came as one)."""
    what = f"{document} (note {str(rec['id'])[:64]!r})" if document else f"note {str(rec['id'])[:64]!r}"
    out = {"resourceType": "OperationOutcome", "meta": {"tag": [MACHINE_TAG]},
           "issue": [{"severity": "information", "code": "informational",
                      "diagnostics": f"{what} was scored; no code reached the threshold, so none is suggested."}],
           "extension": _note_id(rec)}
    return out


def _outcome(rec: Mapping[str, Any], message: str | None = None) -> dict[str, Any]:
    out = {"resourceType": "OperationOutcome", "meta": {"tag": [MACHINE_TAG]},
           "issue": [{"severity": "error", "code": "invalid", "diagnostics": message or str(rec["error"])}]}
    if ext := _note_id(rec):
        out["extension"] = ext
    return out


def bundle(records: Sequence[Mapping[str, Any]], *, systems: Mapping[str, tuple[str, str]] | None = None,
           subjects: Sequence[Any] | None = None, documents: Sequence[str | None] | None = None,
           source: Mapping[str, Any] | None = None, request_id: str | None = None,
           family: _cs.CodeSystem | None = None) -> dict[str, Any]:
    """A FHIR R4 `collection` Bundle of the predicted codes of RECORDS (as `Prediction.to_dict()` gives them), and of
    their `suggested` codes, tagged `suggested-from-title` (a coder tells them apart by the tag).

    Per code one resource: a `Condition` for a diagnosis (ICD-9-CM or ICD-10-CM), a `Procedure` for a procedure
    (ICD-9-CM volume 3 or ICD-10-PCS), coded with the standard system URIs (from the checkpoint's `CodeSystem`). Each
    is marked as a suggestion no person has reviewed: `meta.tag` machine-generated, `Condition.verificationStatus`
    unconfirmed, `Procedure.status` unknown. The score, the note id and the code's evidence spans travel in the
    extensions docs/serve.md defines. A record that could not be scored becomes an `OperationOutcome` entry.

    Args:
        systems: `code_systems(predictor.codes)`; codes missing from it are classified alone by the registry
            (`codes.systems.REGISTRY`, in its order).
        subjects: per record, the note's subject ('Patient/1' or a Reference object) or None.
        documents: per record, a reference to the note's DocumentReference ('DocumentReference/7') or None;
            Conditions cite it in `evidence.detail`.
        source: the checkpoint's identity (`model_source`): each resource's `meta.source` names the checkpoint and
            the Bundle's first entry is a Device describing it.
        request_id: the service's request id, kept as the Bundle's `identifier`.
        family: the checkpoint's code system, for suggested codes (not in SYSTEMS); default every registered system
            (`codes.systems.MIXED`: each code classified alone, in the registry's order).
    Returns:
        the Bundle as a JSON-ready dict: one Condition or Procedure per predicted code (record order, then score
        order), then one per suggested code (tagged TITLE_TAG, no score), one OperationOutcome per record with an
        error.
    """
    systems = systems or {}
    entries = []
    if source is not None:
        entries.append({"fullUrl": f"urn:uuid:{uuid.uuid4()}", "resource": model_device(source)})
    for i, rec in enumerate(records):
        if "error" in rec:
            resources = [_outcome(rec)]
        elif not _note_id(rec):  # every resource would name a note id that is no FHIR string: an invalid Bundle
            resources = [_outcome(rec, _bad_id(rec))]
        else:
            subject = subject_reference(subjects[i] if subjects else None)
            doc = documents[i] if documents else None
            resources = [_resource(rec, p, subject, systems, doc) for p in rec.get("predicted", [])]
            resources += [_suggested_resource(rec, p, subject, family or _cs.MIXED, doc)
                          for p in rec.get("suggested", [])]
            if not resources:
                resources = [_nothing_predicted(rec, doc)]
        if source is not None:
            for r in resources:
                r["meta"]["source"] = f"{CHECKPOINT_SYSTEM}/{source['checkpoint_sha256']}"
        entries += [{"fullUrl": f"urn:uuid:{uuid.uuid4()}", "resource": r} for r in resources]
    out: dict[str, Any] = {"resourceType": "Bundle", "meta": {"tag": [MACHINE_TAG]}, "type": "collection",
                           "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if request_id is not None:
        out["identifier"] = {"system": REQUEST_SYSTEM, "value": request_id}
    if source is not None:
        out["meta"]["source"] = f"{CHECKPOINT_SYSTEM}/{source['checkpoint_sha256']}"
    if entries:
        out["entry"] = entries
    return out


# ------------------------------------------------------------------ FHIR in
_BASE64 = re.compile(r"[A-Za-z0-9+/]*")
_FHIR_ID = re.compile(r"[A-Za-z0-9\-.]{1,64}")
# Text charsets a DocumentReference may name (Python's codec names, after `codecs.lookup`): the Unicode forms, ASCII,
# the ISO-8859 family and the Windows/Mac code pages. Python's other codecs are no text charsets ('undefined' always
# fails, 'rot13' and 'unicode_escape' transform text, 'base64' is bytes to bytes).
_CHARSETS = re.compile(r"(utf[-_](8|16|32)([-_](le|be))?|utf[-_]8[-_]sig|ascii|latin[-_]1|iso8859[-_]\d+|"
                       r"cp\d+|mac[-_][a-z]+|koi8[-_][a-z]+|gb2312|gbk|gb18030|big5|shift_jis|euc[-_][a-z]+)")


_BOMS = {"utf-16": (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE), "utf-32": (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)}


def _text_codec(charset: str) -> str | None:
    """Python's codec for the IANA CHARSET if it is a text charset, else None."""
    try:
        name = codecs.lookup(charset).name
    except (LookupError, ValueError):
        return None
    return name if _CHARSETS.fullmatch(name) else None


_ACCEPTED = ("text/plain with base64 'data' (UTF-8, or the IANA text charset its contentType names, e.g. "
             "'text/plain; charset=iso-8859-1')")


def _attachment_text(att: Any) -> str:
    """The text of one DocumentReference attachment, or DataFormatError saying why it cannot be read as text."""
    if not isinstance(att, dict) or not isinstance(att.get("data"), str):
        raise DataFormatError("has no base64 'data' (a 'url' to fetch is not supported)")
    ctype = str(att.get("contentType") or "text/plain")
    mime, _, params = ctype.partition(";")
    if mime.strip().lower() != "text/plain":
        raise DataFormatError(f"has contentType {_shown(ctype)}, which is not supported")
    charset = "utf-8"
    for p in params.split(";"):
        k, _, v = p.strip().partition("=")
        if k.lower() == "charset" and v:
            charset = v.strip().strip('"')
    codec = _text_codec(charset)
    if codec is None:
        raise DataFormatError(f"names charset {_shown(charset, 20)}, which is not a text charset known here (send "
                              "UTF-8 or another IANA text charset, e.g. iso-8859-1, windows-1252, utf-16)")
    data = "".join(att["data"].split())  # base64Binary may be wrapped in lines (MIME style): whitespace is no data
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        if len(data) % 4 in (2, 3) and _BASE64.fullmatch(data):  # all base64, only the final '=' are missing
            missing = 4 - len(data) % 4
            raise DataFormatError(f"has base64 data whose '=' padding is missing ({len(data):,} characters, not a "
                                  f"multiple of 4; add {'=' * missing!r} at its end, or encode with `base64 -w0 "
                                  "note.txt`)") from None
        raise DataFormatError("has data that is not valid base64 (encode the note's bytes with base64, e.g. "
                              "`base64 -w0 note.txt`)") from None
    if codec in ("utf-16", "utf-32") and not raw.startswith(_BOMS[codec]):
        codec += "-be"  # no byte-order mark: big-endian (RFC 2781 4.3); Python's codec would read it little-endian
    try:  # a byte-order mark is no text: kept, it would shift every evidence offset by one
        return raw.decode(codec).removeprefix("\ufeff")
    except UnicodeError:  # UnicodeDecodeError, and the plain UnicodeError some codecs raise
        raise DataFormatError(f"has data that does not decode as {_shown(charset, 20)} (send UTF-8 text or name its "
                              "charset in contentType)") from None


def _shown(value: str, limit: int = 60) -> str:
    """A client's contentType or charset, cut and quoted for a message (escaped: no line breaks, no raw quotes)."""
    return json.dumps(value[:limit])


def note_from_document_reference(doc: Any) -> dict[str, Any]:
    """{'id', 'text', 'subject', 'document'} from a DocumentReference: the note is the first `content` attachment
    that can be read as text (text/plain with base64 `data`, UTF-8 unless the contentType names another text
    charset); attachments before it that cannot (a PDF rendition, a URL) are passed over.

    Raises:
        DataFormatError: a message saying what is missing or wrong and how to fix it (never the note's text); when no
            attachment can be read, it names each one's contentType and why, and what is accepted.
    """
    if not isinstance(doc, dict) or doc.get("resourceType") != "DocumentReference":
        got = doc.get("resourceType") if isinstance(doc, dict) else type(doc).__name__
        raise DataFormatError(f"expected a FHIR DocumentReference resource (resourceType 'DocumentReference'), got "
                              f"{str(got)[:40]!r}; send the note as DocumentReference.content[0].attachment.data.")
    content = doc.get("content")
    if not isinstance(content, list) or not content:
        raise DataFormatError("DocumentReference has no content; put the note in content[0].attachment.data (base64).")
    text, reasons = None, []
    for i, item in enumerate(content):
        att = item.get("attachment") if isinstance(item, dict) else None
        try:
            text = _attachment_text(att)
            break
        except DataFormatError as err:
            reasons.append(f"content[{i}].attachment {err}")
    if text is None:
        given = [str(a.get("contentType") or "text/plain") if isinstance(a, dict) else "none"
                 for a in (c.get("attachment") if isinstance(c, dict) else None for c in content)]
        shown = ", ".join(_shown(g, 40) for g in dict.fromkeys(given[:10]))
        more = f" and {len(content) - 10:,} more" if len(content) > 10 else ""
        why = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3:,} more" if len(reasons) > 3 else "")
        raise DataFormatError(f"no DocumentReference attachment could be read as text ({why}). contentTypes given: "
                              f"{shown}{more}; accepted: {_ACCEPTED}.")
    rid = doc.get("id")
    if rid is not None and not (isinstance(rid, str) and _FHIR_ID.fullmatch(rid)):
        raise DataFormatError("DocumentReference.id must be a FHIR id (1-64 letters, digits, '-' or '.'), or left "
                              "out.")
    subject = doc.get("subject")
    if subject is not None and not isinstance(subject, dict):
        raise DataFormatError("DocumentReference.subject must be a Reference object, e.g. "
                              "{\"reference\": \"Patient/1\"}.")
    check_subject(subject, "DocumentReference.subject")
    return {"id": str(rid) if rid is not None else "0", "text": text, "subject": subject,
            "document": f"DocumentReference/{rid}" if isinstance(rid, str) and rid else None}
