"""`serve --allow-origin`'s CORS, through FastAPI's TestClient: a browser page of an allowed origin can call the
service (a preflight is granted without a token; answers, refusals included, carry Access-Control-Allow-Origin),
other origins are refused with no CORS header, and without --allow-origin no CORS header is ever sent. Which values
--allow-origin takes is in test_serve_allow_origin.py."""

import base64

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from clinicode.config import ServeConfig
from clinicode.serve import create_app
from tests.helpers import SECRET

LOCAL = "http://127.0.0.1:8000"
ANALYZE = "/fhir/DocumentReference/$analyze"
PAGE = "https://coding.example.org"
TOKEN = "cors-" + "t" * 32


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
