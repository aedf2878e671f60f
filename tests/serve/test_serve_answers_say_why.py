"""`clinicode serve`'s answers say why, through FastAPI's TestClient: $analyze's refusals show $analyze's example,
FHIR messages give the true reason (an id too long, base64 padding missing), a note of emoji is refused as what it
is, /redoc is not served, and a FHIR answer with no code still names its note. CORS is in test_serve_cors.py; the
real process's cases (slow bodies, absolute-form targets, a stop on an idle connection) are in
test_serve_process_pending_bodies_and_stacks.py."""

import base64

import pytest

pytest.importorskip("fastapi")

JSON = {"content-type": "application/json"}
ANALYZE = "/fhir/DocumentReference/$analyze"


def _docref(data: str, rid: str = "d1") -> dict:
    return {"resourceType": "DocumentReference", "id": rid, "status": "current",
            "content": [{"attachment": {"contentType": "text/plain", "data": data}}]}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


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
