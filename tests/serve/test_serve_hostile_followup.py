"""`clinicode serve` through FastAPI's TestClient, the cases the second hostile round left open (issue #36): a
DocumentReference whose readable text is not its first attachment, and `Accept` headers. Each test fails without
its fix; every refusal is a 4xx JSON answer (an OperationOutcome on /fhir/ routes) without note text. The real
process's cases are in test_serve_process_followup.py."""

import base64

import pytest

pytest.importorskip("fastapi")

from tests.helpers import SECRET

ANALYZE = "/fhir/DocumentReference/$analyze"
JSON = {"content-type": "application/json"}


def _valid_bundle(b: dict) -> dict:
    from fhir.resources.R4B.bundle import Bundle

    Bundle.model_validate(b)
    return b


def _outcome(r, status: int) -> str:
    from fhir.resources.R4B.operationoutcome import OperationOutcome

    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/fhir+json")
    OperationOutcome.model_validate(r.json())
    assert SECRET not in r.text
    return r.json()["issue"][0]["diagnostics"]


def _att(ctype: str | None, data: bytes | None = None, **kw) -> dict:
    att = dict(kw)
    if ctype is not None:
        att["contentType"] = ctype
    if data is not None:
        att["data"] = base64.b64encode(data).decode()
    return {"attachment": att}


def _doc(*content: dict) -> dict:
    return {"resourceType": "DocumentReference", "id": "d1", "status": "current", "content": list(content)}


def _codes(bundle: dict) -> list[str]:
    return [e["resource"]["code"]["coding"][0]["code"] for e in bundle["entry"]
            if e["resource"]["resourceType"] in ("Condition", "Procedure")]


# ------------------------------------------------------------------ DocumentReference: the first readable attachment
@pytest.mark.parametrize("before", [
    [_att("application/pdf", b"%PDF-1.7 " + SECRET.encode())],                         # a PDF rendition first
    [_att("text/html", b"<p>" + SECRET.encode() + b"</p>"), _att(None, url="https://ehr.example/n/1")],
    [_att("text/plain; charset=rot13", SECRET.encode())],                             # no text charset
    [_att("text/plain", None, url="https://ehr.example/n/1")],                        # text, but only a URL
    [{"attachment": "not an object"}, "not an object either"],
])
def test_the_first_attachment_readable_as_text_is_the_note(client, note, before):
    want = client.post(ANALYZE + "?threshold=0.05", json=_doc(_att("text/plain", note.encode())))
    got = client.post(ANALYZE + "?threshold=0.05", json=_doc(*before, _att("text/plain; charset=utf-8",
                                                                           note.encode())))
    assert want.status_code == 200 and got.status_code == 200, got.text  # was: 422 "not supported"
    assert _codes(_valid_bundle(got.json())) == _codes(want.json()) and _codes(want.json())


def test_a_readable_attachment_after_the_note_is_not_read(client, note):
    one = client.post(ANALYZE + "?threshold=0", json=_doc(_att("application/pdf", b"%PDF"),
                                                           _att("text/plain", note.encode())))
    two = client.post(ANALYZE + "?threshold=0", json=_doc(_att("application/pdf", b"%PDF"),
                                                           _att("text/plain", note.encode()),
                                                           _att("text/plain", b"fever")))
    assert one.status_code == two.status_code == 200
    assert _codes(_valid_bundle(two.json())) == _codes(one.json())


def test_no_readable_attachment_is_a_422_naming_the_types_given_and_accepted(client):
    msg = _outcome(client.post(ANALYZE, json=_doc(_att("application/pdf", b"%PDF " + SECRET.encode()),
                                                   _att("image/png", b"\x89PNG" + SECRET.encode()),
                                                   _att("text/plain; charset=rot13", SECRET.encode()))), 422)
    assert "no DocumentReference attachment could be read as text" in msg
    assert 'contentTypes given: "application/pdf", "image/png", "text/plain; charset=rot13"' in msg
    assert "accepted: text/plain" in msg
    for words in ("content[0].attachment has contentType", "content[2].attachment names charset"):
        assert words in msg, msg


def test_a_content_type_with_a_line_break_is_escaped_in_the_message(client):
    msg = _outcome(client.post(ANALYZE, json=_doc(_att("application/pdf\r\nX-Evil: 1", b"%PDF"))), 422)
    assert "\r" not in msg and "\n" not in msg and "application/pdf\\r\\nX-Evil" in msg
