"""`clinicode serve` through FastAPI's TestClient (#36): which attachment of a DocumentReference is the note (the
first readable as text), and `Accept` headers. Each test fails without its fix; every refusal is a 4xx JSON answer
(an OperationOutcome on /fhir/ routes) without note text. The real process's cases are in
test_serve_process_stop_and_write_timeout.py."""

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


# ------------------------------------------------------------------ Accept
FHIR_DOC = _doc(_att("text/plain", b"chest pain, hypertension"))


@pytest.mark.parametrize("accept, status", [
    ("application/fhir+xml", 406),                                       # was: 200 with JSON
    ("application/xml", 406),
    ("text/html", 406),
    ("text/*", 406),
    ("application/fhir+xml, application/xml;q=0.9", 406),
    ("application/fhir+json;q=0, application/json;q=0, */*", 406),    # excluded by name; */* does not undo that
    ("*/*;q=0", 406),
    (None, 200),
    ("", 200),
    ("*/*", 200),
    ("*", 200),
    ("application/*", 200),
    ("application/fhir+json", 200),
    ("application/fhir+json; fhirVersion=4.0", 200),
    ("Application/FHIR+JSON;q=0.5", 200),
    ("application/json", 200),
    ("application/json; charset=utf-8", 200),
    ("application/fhir+xml;q=1.0, application/fhir+json;q=0.1", 200),
    ("application/fhir+xml, */*;q=0.1", 200),
    ("application/fhir+json;q=0, application/json", 200),
    ("application/fhir+json;q=oops", 200),                              # an unreadable range is ignored
])
def test_accept_on_the_fhir_route(client, accept, status):
    headers = {"content-type": "application/fhir+json"} | ({"accept": accept} if accept is not None else {})
    r = client.post(ANALYZE, json=FHIR_DOC, headers=headers)
    if status == 406:
        msg = _outcome(r, 406)
        assert "answers only application/fhir+json (and application/json)" in msg, msg
        assert r.json()["issue"][0]["code"] == "not-supported"
    else:
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/fhir+json")
        _valid_bundle(r.json())


@pytest.mark.parametrize("method, path, accept, status", [
    ("POST", "/v1/predict", "application/xml", 406),
    ("POST", "/v1/predict", "application/fhir+json", 406),             # the JSON format is application/json
    ("POST", "/v1/predict?format=fhir", "application/fhir+json", 200),
    ("POST", "/v1/predict?format=fhir", "application/xml", 406),
    ("POST", "/v1/predict", "application/json", 200),
    ("POST", "/v1/predict", "*/*", 200),
    ("POST", "/v1/predict", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", 200),  # a browser's
    ("GET", "/health", "text/html", 406),
    ("HEAD", "/health", "text/html", 406),
    ("GET", "/health", "application/json", 200),
    ("GET", "/ready", "application/xml", 406),
    ("GET", "/ready", "*/*", 200),
    ("GET", "/openapi.json", "text/html", 406),
    ("GET", "/metrics", "application/json", 406),
    # Prometheus' own Accept
    ("GET", "/metrics", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", 200),
    ("GET", "/docs", "text/html", 200),
    ("GET", "/v1/predict", "application/xml", 405),                    # the wrong method is named first
    ("GET", "/nowhere", "application/xml", 404),
])
def test_accept_on_the_other_routes_is_the_same_rule(client, method, path, accept, status):
    body = {"notes": [{"id": "a", "text": "chest pain"}]} if method == "POST" else None
    r = client.request(method, path, json=body, headers={"accept": accept})
    assert r.status_code == status, r.text
    if status == 406 and method != "HEAD":
        assert r.headers["content-type"].startswith("application/json")
        msg = r.json()["error"]["message"]
        assert "answers only" in msg and "leave Accept out" in msg, msg


def test_a_406_needs_the_token_first(predictor):
    from fastapi.testclient import TestClient

    from clinicode.serve import create_app

    with TestClient(create_app(predictor, token="t" * 32), base_url="http://127.0.0.1:8000") as c:
        r = c.post("/v1/predict", json={"notes": [{"text": "pain"}]}, headers={"accept": "application/xml"})
        assert r.status_code == 401


@pytest.mark.parametrize("value", [0, -1, 3601, float("nan"), float("inf")])
def test_a_write_timeout_that_is_no_bound_is_refused_at_start(value):
    from clinicode.config import ServeConfig
    from clinicode.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--write-timeout must be in \(0, 3600\] seconds"):
        ServeConfig(write_timeout=value)


@pytest.mark.parametrize("accept", [None, "application/fhir+json"])
def test_a_repeated_format_is_the_routes_422_not_a_406(client, accept):
    # serve.md: an option given twice is a 422; Accept negotiation must not answer first with a misleading 406
    headers = {"accept": accept} if accept else {}
    r = client.post("/v1/predict?format=fhir&format=fhir", json={"notes": [{"id": "a", "text": "chest pain"}]},
                    headers=headers)
    assert r.status_code == 422, r.text
    assert "format" in r.json()["error"]["message"]
