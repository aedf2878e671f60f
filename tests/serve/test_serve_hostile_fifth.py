"""`clinicode serve` against the fifth hostile round (#42), through FastAPI's TestClient: a browser page of an
--allow-origin origin can call the service (preflight and answers carry the CORS headers), $analyze's messages show
$analyze's example, FHIR messages give the true reason (an id too long, base64 padding missing), a note of emoji is
refused as what it is, /redoc is not served, and a FHIR answer with no code still names its note. The real process's
cases (slow bodies, absolute-form targets, a stop on an idle connection) are in test_serve_process_fifth.py."""

import base64

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from clinicode.config import ServeConfig
from clinicode.serve import create_app
from tests.helpers import SECRET

LOCAL = "http://127.0.0.1:8000"
JSON = {"content-type": "application/json"}
ANALYZE = "/fhir/DocumentReference/$analyze"
PAGE = "https://coding.example.org"
TOKEN = "fifth-round-" + "t" * 32


def _docref(data: str, rid: str = "d1") -> dict:
    return {"resourceType": "DocumentReference", "id": rid, "status": "current",
            "content": [{"attachment": {"contentType": "text/plain", "data": data}}]}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def cors(predictor):
    with TestClient(create_app(predictor, token=TOKEN, limits=ServeConfig(batch_wait_ms=1, allow_origins=(PAGE,))),
                    base_url=LOCAL) as c:
        yield c


# ------------------------------------------------------------------ --allow-origin: CORS for the origins it names
@pytest.mark.parametrize("path, methods", [("/v1/predict", "POST"), (ANALYZE, "POST"), ("/ready", "GET, HEAD")])
def test_a_preflight_from_an_allowed_origin_is_granted_without_a_token(cors, path, methods):
    r = cors.options(path, headers={"Origin": PAGE, "Access-Control-Request-Method": methods.split(",")[0],
                                    "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status_code == 204, r.text  # was: 405 with no Access-Control-* header (and would be 401 with a token)
    assert r.headers["access-control-allow-origin"] == PAGE
    assert r.headers["access-control-allow-methods"] == methods
    allowed = {h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "x-request-id"} <= allowed
    assert "Origin" in r.headers["vary"]


def test_the_answers_to_an_allowed_origin_carry_access_control_allow_origin(cors):
    auth = {"Authorization": f"Bearer {TOKEN}", "Origin": PAGE}
    r = cors.post("/v1/predict", json={"notes": [{"text": "chest pain"}]}, headers=auth)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == PAGE
    exposed = r.headers["access-control-expose-headers"].lower()
    assert "x-request-id" in exposed and "x-clinicode-checkpoint" in exposed
    bad = cors.post("/v1/predict", json={"notes": []}, headers=auth)  # the page can read why it was refused, too
    assert bad.status_code == 422 and bad.headers["access-control-allow-origin"] == PAGE
    fhir = cors.post(ANALYZE, json=_docref(_b64("chest pain")), headers=auth)
    assert fhir.status_code == 200 and fhir.headers["access-control-allow-origin"] == PAGE


@pytest.mark.parametrize("origin", ["https://evil.example", "http://coding.example.org", "null"])
def test_other_origins_are_still_refused_and_get_no_cors_headers(cors, origin):
    pre = cors.options("/v1/predict", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
    assert pre.status_code == 403 and "access-control-allow-origin" not in pre.headers
    r = cors.post("/v1/predict", json={"notes": [{"text": SECRET}]},
                  headers={"Authorization": f"Bearer {TOKEN}", "Origin": origin})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    assert "--allow-origin" in r.json()["error"]["message"] and SECRET not in r.text


def test_without_allow_origin_no_cors_header_is_ever_sent(client):
    r = client.post("/v1/predict", json={"notes": [{"text": "pain"}]}, headers={"Origin": LOCAL})  # its own origin
    assert r.status_code == 200 and not any(h.startswith("access-control-") for h in r.headers)
    pre = client.options("/v1/predict", headers={"Origin": PAGE, "Access-Control-Request-Method": "POST"})
    assert pre.status_code == 403 and not any(h.startswith("access-control-") for h in pre.headers)


# ------------------------------------------------------------------ $analyze's own example
@pytest.mark.parametrize("raw", [b"", b"  ", b"{not json", b"\xff\xfe"])
def test_analyze_refusals_of_its_body_show_a_documentreference_not_predicts_notes(client, raw):
    r = client.post(ANALYZE, content=raw, headers={"content-type": "application/fhir+json"})
    assert r.status_code == 400, r.text
    msg = r.json()["issue"][0]["diagnostics"]
    assert '"resourceType": "DocumentReference"' in msg and '"notes"' not in msg, msg  # was: /v1/predict's example
    assert '"notes"' in client.post("/v1/predict", content=raw, headers=JSON).json()["error"]["message"]


# ------------------------------------------------------------------ the true reason
def test_a_5000_character_id_is_too_long_in_fhir_not_empty_or_blank(client):
    r = client.post("/v1/predict?format=fhir", json={"notes": [{"id": "n" * 5000, "text": "chest pain"}]})
    assert r.status_code == 200
    [outcome] = [e["resource"] for e in r.json()["entry"] if e["resource"]["resourceType"] == "OperationOutcome"]
    msg = outcome["issue"][0]["diagnostics"]
    assert "too long (5,000 characters" in msg and "empty" not in msg, msg
    s = client.post("/v1/predict", json={"notes": [{"text": "pain", "subject": "Patient/" + "1" * 5000}]})
    assert s.status_code == 422 and "too long" in s.json()["error"]["message"]
    assert "empty" not in s.json()["error"]["message"]


@pytest.mark.parametrize("text", ["chest pain", "pain", "heart failure, new onset."])
def test_base64_without_its_padding_is_said_to_miss_its_padding(client, text):
    data = _b64(text).rstrip("=")
    assert len(data) % 4  # these texts need padding
    r = client.post(ANALYZE, json=_docref(data))
    assert r.status_code == 422
    msg = r.json()["issue"][0]["diagnostics"]
    assert "padding is missing" in msg and f"add {'=' * (4 - len(data) % 4)!r}" in msg, msg
    other = client.post(ANALYZE, json=_docref("not*base64!"))  # not base64 at all: no word of padding
    assert "not valid base64" in other.json()["issue"][0]["diagnostics"]
    assert "padding" not in other.json()["issue"][0]["diagnostics"]


def test_a_note_of_only_emoji_is_refused_as_having_no_letters(client):
    r = client.post("/v1/predict", json={"notes": [{"id": "e", "text": "\U0001f600\U0001f494 \U0001fac0"}]})
    assert r.status_code == 200
    err = r.json()["results"][0]["error"]
    assert "emoji" in err and "numbers and punctuation only" not in err, err  # was: "numbers and punctuation only"
    assert not r.json()["results"][0].get("predicted")


def test_redoc_is_not_served(client):
    r = client.get("/redoc")
    assert r.status_code == 404 and "no route /redoc" in r.json()["error"]["message"]
    assert client.get("/docs").status_code == 200


def test_a_fhir_answer_with_no_code_still_names_the_document_and_the_note(client):
    r = client.post(ANALYZE + "?threshold=1", json=_docref(_b64("chest pain"), rid="note-7"))
    assert r.status_code == 200
    from fhir.resources.R4B.bundle import Bundle

    Bundle.model_validate(r.json())
    kinds = [e["resource"]["resourceType"] for e in r.json()["entry"]]
    assert kinds == ["Device", "OperationOutcome"]  # was: the Device alone, no trace of the note
    outcome = r.json()["entry"][1]["resource"]
    assert outcome["issue"][0]["severity"] == "information"
    assert "DocumentReference/note-7" in outcome["issue"][0]["diagnostics"]
    assert outcome["extension"][0]["valueString"] == "note-7"
    many = client.post("/v1/predict?format=fhir", json={"notes": [{"id": "a", "text": "pain"},
                                                                  {"id": "b", "text": "fever"}], "threshold": 1})
    named = [e["resource"]["extension"][0]["valueString"] for e in many.json()["entry"]
             if e["resource"]["resourceType"] == "OperationOutcome"]
    assert named == ["a", "b"]
