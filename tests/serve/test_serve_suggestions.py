"""#43 in the service: a checkpoint with suggestion candidates answers `suggested` beside `predicted` in JSON, and in
FHIR one Condition per suggested code, unconfirmed and tagged suggested-from-title, apart from the model's codes."""

from __future__ import annotations

import base64

import pytest

from conftest import SERVE_BASE_URL

NOTE = "Seen for acute renal failure after surgery; air embolism suspected; hypertension."


@pytest.fixture(scope="module")
def client(tiny_run):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from clinicode.config import ServeConfig
    from clinicode.predict import Predictor
    from clinicode.serve import create_app

    pred = Predictor.from_checkpoint(tiny_run, device="cpu",
                                     titles={"584.8": "Acute renal failure", "999.1": "Air embolism"})
    with TestClient(create_app(pred, limits=ServeConfig(batch_wait_ms=1)), base_url=SERVE_BASE_URL) as c:
        yield c


def _tagged(bundle: dict) -> tuple[list[dict], list[dict]]:
    coded = [e["resource"] for e in bundle["entry"] if e["resource"]["resourceType"] in ("Condition", "Procedure")]
    tagged = [r for r in coded if any(t["code"] == "suggested-from-title" for t in r["meta"]["tag"])]
    return coded, tagged


def test_json_answers_carry_suggested_outside_predicted(client):
    res = client.post("/v1/predict", json={"notes": [{"id": "n1", "text": NOTE}]})
    assert res.status_code == 200, res.text
    [rec] = res.json()["results"]
    assert {s["code"] for s in rec["suggested"]} == {"584.8", "999.1"}
    assert all(s["source"] == "title" and s["reason"] and s["spans"] for s in rec["suggested"])
    assert not {s["code"] for s in rec["suggested"]} & ({p["code"] for p in rec["predicted"]} | set(rec["scores"]))


def test_fhir_answers_hold_suggested_codes_as_tagged_unconfirmed_conditions(client):
    res = client.post("/v1/predict?format=fhir", json={"notes": [{"id": "n1", "text": NOTE}]})
    assert res.status_code == 200, res.text
    coded, tagged = _tagged(res.json())
    assert {r["code"]["coding"][0]["code"] for r in tagged} == {"584.8", "999.1"}
    for r in tagged:
        assert r["resourceType"] == "Condition"
        assert r["verificationStatus"]["coding"][0]["code"] == "unconfirmed"
        assert r["code"]["coding"][0]["system"] == "http://hl7.org/fhir/sid/icd-9-cm"
        assert not any(x["url"].endswith("/score") for x in r["extension"])
    assert len(coded) - len(tagged) == len(client.post("/v1/predict", json={"notes": [{"id": "n1", "text": NOTE}]})
                                           .json()["results"][0]["predicted"])
    doc = {"resourceType": "DocumentReference", "id": "d1", "subject": {"reference": "Patient/7"},
           "content": [{"attachment": {"contentType": "text/plain",
                                       "data": base64.b64encode(NOTE.encode()).decode()}}]}
    res = client.post("/fhir/DocumentReference/$analyze", json=doc,
                      headers={"Content-Type": "application/fhir+json"})
    assert res.status_code == 200, res.text
    _, tagged = _tagged(res.json())
    assert {r["code"]["coding"][0]["code"] for r in tagged} == {"584.8", "999.1"}
    assert all(r["subject"] == {"reference": "Patient/7"} for r in tagged)
