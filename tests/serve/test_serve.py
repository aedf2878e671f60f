"""`clinicode serve`: the route matrix through FastAPI's TestClient (JSON records equal `clinicode predict`'s, FHIR
Bundles valid R4B, DocumentReference in, every bad input a 4xx JSON answer, bearer tokens), the micro-batching worker,
and the start-up checks. The real uvicorn process is in test_serve_process.py."""

import base64
import json
import os
import threading
import time

import pandas as pd
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from clinicode.config import ServeConfig
from clinicode.errors import ConfigError
from clinicode.predict import Predictor
from clinicode.serve import Batcher, check_bind, create_app, is_loopback
from tests.helpers import SECRET, fails, succeeds

TOKEN = "t0ken-" + "x" * 30
LOCAL = "http://127.0.0.1:8000"  # a Host the service answers (TestClient's default, testserver, is refused)


@pytest.fixture(scope="module")
def predictor(tiny_run):
    return Predictor.from_checkpoint(tiny_run, device="cpu")


@pytest.fixture(scope="module")
def notes(demo_data):
    rows = pd.read_parquet(demo_data / "test.parquet").head(16)
    return [{"id": str(i), "text": t} for i, t in zip(rows["id"], rows["text"])]


@pytest.fixture(scope="module")
def client(predictor):
    limits = ServeConfig(max_notes=20, max_text_chars=60_000, max_body_mb=1.0, batch_wait_ms=2)
    with TestClient(create_app(predictor, limits=limits), base_url=LOCAL) as c:
        yield c


def _healthy(c):
    r = c.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_health_names_the_model(client, predictor, tiny_run):
    h = client.get("/health").json()
    assert h["model"] == "leam" and h["name"] == tiny_run.name and h["n_codes"] == len(predictor.codes)
    assert len(h["checkpoint_sha256"]) == 64
    assert client.get("/openapi.json").json()["paths"]["/v1/predict"]["post"]
    assert client.get("/docs").status_code == 200


def test_json_results_equal_clinicode_predict(client, notes, tiny_run, tmp_path):
    src = tmp_path / "notes.jsonl"
    src.write_text("".join(json.dumps(n) + "\n" for n in notes))
    out = tmp_path / "pred.jsonl"
    succeeds(["predict", "--checkpoint", tiny_run, "--input", src, "--output", out, "--explain", "3", "--top-k", "7",
              "--no-progress"])
    want = [json.loads(x) for x in open(out)]
    r = client.post("/v1/predict", json={"notes": notes, "explain": 3, "top_k": 7})
    assert r.status_code == 200
    got = r.json()["results"]
    assert [g["id"] for g in got] == [w["id"] for w in want]
    for g, w in zip(got, want):
        assert set(g) == set(w)  # the same record fields
        assert [p["code"] for p in g["predicted"]] == [p["code"] for p in w["predicted"]]
        assert list(g["scores"]) == list(w["scores"])
        for code, s in w["scores"].items():
            assert abs(g["scores"][code] - s) <= 1e-4
        assert g["evidence"]["codes"].keys() == w["evidence"]["codes"].keys()


def test_fhir_format_is_a_valid_bundle_with_subjects(client, notes):
    from fhir.resources.R4B.bundle import Bundle

    body = {"notes": [{**notes[0], "subject": "Patient/1"}, {**notes[1], "subject": {"reference": "Patient/2"}}],
            "threshold": 0.05, "explain": 2}
    r = client.post("/v1/predict?format=fhir", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/fhir+json")
    b = r.json()
    Bundle.model_validate(b)
    res = [e["resource"] for e in b["entry"] if e["resource"]["resourceType"] != "Device"]
    assert {x["subject"]["reference"] for x in res} == {"Patient/1", "Patient/2"}
    assert {x["resourceType"] for x in res} <= {"Condition", "Procedure"}
    plain = client.post("/v1/predict", json=body).json()["results"]
    assert len(res) == sum(len(p["predicted"]) for p in plain)


def test_document_reference_analyze(client, notes):
    from fhir.resources.R4B.bundle import Bundle

    doc = {"resourceType": "DocumentReference", "id": "d7", "status": "current", "subject": {"reference": "Patient/5"},
           "content": [{"attachment": {"contentType": "text/plain",
                                       "data": base64.b64encode(notes[2]["text"].encode()).decode()}}]}
    r = client.post("/fhir/DocumentReference/$analyze?threshold=0.05&explain=1", json=doc)
    assert r.status_code == 200
    b = r.json()
    Bundle.model_validate(b)
    plain = client.post("/v1/predict", json={"notes": [{"id": "d7", "text": notes[2]["text"]}],
                                             "threshold": 0.05}).json()
    device, *coded = b["entry"]  # the model that suggested the codes, then the codes
    assert device["resource"]["resourceType"] == "Device"
    assert ([e["resource"]["code"]["coding"][0]["code"] for e in coded]
            == [p["code"] for p in plain["results"][0]["predicted"]])
    assert all(e["resource"]["subject"] == {"reference": "Patient/5"} for e in coded)
    bad = client.post("/fhir/DocumentReference/$analyze", json={**doc,
                                                                "content": [{"attachment": {"data": "%%" + SECRET}}]})
    assert bad.status_code == 422 and bad.json()["resourceType"] == "OperationOutcome"
    assert "base64" in bad.json()["issue"][0]["diagnostics"] and SECRET not in bad.text
    assert client.post("/fhir/DocumentReference/$analyze?top_k=0", json=doc).status_code == 422


BAD = [  # (body bytes or JSON, query, status, words of the message)
    (b'{"notes": [{"text": "' + SECRET.encode() + b'"', "", 400, "not valid JSON"),
    (b"", "", 400, "empty"),
    (b"\xff\xfe" + SECRET.encode(), "", 400, "not UTF-8"),
    ([{"text": SECRET}], "", 422, "request body is a list"),
    ({"note": [{"text": SECRET}]}, "", 422, "unknown field 'note'"),
    ({"notes": []}, "", 422, "'notes' is empty"),
    ({"notes": SECRET}, "", 422, "'notes' is a string"),
    ({"notes": [SECRET]}, "", 422, "notes[0] is a string"),
    ({"notes": [{"id": "a"}]}, "", 422, "notes[0] has no 'text'"),
    ({"notes": [{"text": None}]}, "", 422, "has no 'text'"),
    ({"notes": [{"text": "ok"}, {"text": 42}]}, "", 422, "notes[1].text is a number"),
    ({"notes": [{"text": ["a"]}]}, "", 422, "notes[0].text is a list"),
    ({"notes": [{"text": "ok", "txt": SECRET}]}, "", 422, "unknown field 'txt'"),
    ({"notes": [{"text": "ok", "id": [1]}]}, "", 422, "notes[0].id is a list"),
    ({"notes": [{"text": "ok", "subject": 5}]}, "", 422, "notes[0].subject is a number"),
    ({"notes": [{"text": "ok"}], "top_k": 0}, "", 422, "top_k must be a positive integer"),
    ({"notes": [{"text": "ok"}], "top_k": -3}, "", 422, "top_k must be a positive integer"),
    ({"notes": [{"text": "ok"}], "top_k": True}, "", 422, "top_k must be a positive integer"),
    ({"notes": [{"text": "ok"}], "top_k": "many"}, "", 422, "top_k must be a positive integer"),
    ({"notes": [{"text": "ok"}], "explain": -1}, "", 422, "explain must be an integer"),
    ({"notes": [{"text": "ok"}], "explain": 10_000}, "", 422, "explain must be an integer from 0 to 20"),
    ({"notes": [{"text": "ok"}], "threshold": 1.5}, "", 422, "threshold must be a number in [0, 1]"),
    ({"notes": [{"text": "ok"}]}, "?format=xml", 422, "use format=json"),
    ({"notes": [{"text": SECRET}] * 21}, "", 413, "the limit is 20"),
    ({"notes": [{"text": SECRET * 5000}]}, "", 413, "the limit is 60,000"),
    ({"notes": [{"text": "a " * 200_000}] * 3}, "", 413, "bytes; the limit is 1,048,576"),
]


@pytest.mark.parametrize("body, query, status, words", BAD, ids=[f"{s}-{w[:24]}" for _, _, s, w in BAD])
def test_bad_input_is_a_4xx_json_answer_and_the_server_stays_healthy(client, body, query, status, words):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = client.post("/v1/predict" + query, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    msg = r.json()["error"]["message"]
    assert words in msg and SECRET not in r.text
    _healthy(client)


def test_streamed_body_over_the_limit_is_refused(client):
    def chunks():  # no Content-Length: the limit is counted while reading
        for _ in range(40):
            yield b"x" * 50_000

    r = client.post("/v1/predict", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "over the limit" in r.json()["error"]["message"]
    _healthy(client)


def test_wrong_method_and_unknown_route(client):
    r = client.get("/v1/predict")
    assert r.status_code == 405 and "use POST" in r.json()["error"]["message"]
    r = client.post("/health")
    assert r.status_code == 405 and "use GET" in r.json()["error"]["message"]
    r = client.put("/fhir/DocumentReference/$analyze")
    assert r.status_code == 405 and r.json()["resourceType"] == "OperationOutcome"
    r = client.get("/v2/whatever")
    assert r.status_code == 404 and "/v1/predict" in r.json()["error"]["message"]
    _healthy(client)


def test_blank_note_is_a_record_with_an_error_as_in_predict(client):
    r = client.post("/v1/predict", json={"notes": [{"id": "b", "text": "   "}, {"id": "ok", "text": "chest pain"}]})
    assert r.status_code == 200
    bad, ok = r.json()["results"]
    assert bad == {"id": "b", "error": "note 'b': empty text; nothing to code"} and "scores" in ok


def test_bearer_token_guards_every_route_but_health_ready_and_the_api_description(predictor, notes):
    with TestClient(create_app(predictor, token=TOKEN), base_url=LOCAL) as c:
        for path in ("/health", "/ready", "/docs", "/openapi.json"):  # no note data in them: no token needed
            assert c.get(path).status_code == 200, path
        # /docs is usable: its page offers "Authorize" for the bearer token, which its requests then carry
        spec = c.get("/openapi.json").json()
        assert spec["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
        assert spec["security"] == [{"bearer": []}]
        for method, path in (("post", "/v1/predict"), ("get", "/metrics"),
                             ("post", "/fhir/DocumentReference/$analyze"), ("get", "/nowhere")):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                            {"Authorization": f"Basic {TOKEN}"}):
                r = c.request(method.upper(), path, headers=headers, json={"notes": notes[:1]})
                assert r.status_code == 401, (path, headers)
                assert r.headers["www-authenticate"] == "Bearer" and "Authorization: Bearer" in r.text
        ok = c.post("/v1/predict", json={"notes": notes[:1]}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and ok.json()["results"][0]["id"] == notes[0]["id"]


def test_batcher_scores_concurrent_requests_together_in_order(predictor, notes):
    b = Batcher(predictor, max_notes=32, wait_ms=300)
    try:
        parts = [notes[i:i + 2] for i in range(0, 12, 2)]
        with b.arriving():  # more requests are being tokenised: the worker waits for them (up to wait_ms)
            futs = [b.submit(predictor.prepare([n["text"] for n in p], ids=[n["id"] for n in p]), top_k=5,
                             threshold=None, explain=0) for p in parts]
        results = [f.result(timeout=60) for f in futs]
        assert b.batches == 1  # six requests arrived within the wait: one forward batch
        alone = [r.to_dict() for r in predictor.predict([n["text"] for n in notes[:12]],
                                                        ids=[n["id"] for n in notes[:12]],
                                                          top_k=5, attention=False)]
        flat = [r for rs in results for r in rs]
        assert [r["id"] for r in flat] == [r["id"] for r in alone]
        for g, w in zip(flat, alone):
            assert g["scores"].keys() == w["scores"].keys()
            assert all(abs(g["scores"][k] - w["scores"][k]) <= 1e-4 for k in w["scores"])
        # different options are never mixed: each group is scored with its own
        f1 = b.submit(predictor.prepare([notes[0]["text"]], ids=["a"]), top_k=1, threshold=None, explain=0)
        f2 = b.submit(predictor.prepare([notes[0]["text"]], ids=["b"]), top_k=3, threshold=None, explain=0)
        assert len(f1.result(timeout=60)[0]["scores"]) == 1 and len(f2.result(timeout=60)[0]["scores"]) == 3
    finally:
        b.stop()
    assert not b.alive()


def test_concurrent_clients_all_answered(client, notes):
    out, errors = {}, []

    def worker(i):
        try:
            r = client.post("/v1/predict", json={"notes": [notes[i % len(notes)]]})
            out[i] = (r.status_code, r.json()["results"][0]["id"])
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and all(out[i] == (200, notes[i % len(notes)]["id"]) for i in range(12))


@pytest.mark.parametrize("host, loop", [("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.5.0.1", True),
                                        ("0.0.0.0", False), ("10.0.0.5", False), ("::", False), ("example.org", False)])
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_start_up_refuses_open_binds_and_loose_token_files(tmp_path, tiny_run):
    with pytest.raises(ConfigError, match="needs --token-file"):
        check_bind("0.0.0.0", None)
    assert check_bind("127.0.0.1", None) is None
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    os.chmod(tok, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        check_bind("0.0.0.0", tok)
    os.chmod(tok, 0o600)
    assert check_bind("0.0.0.0", tok) == TOKEN
    short = tmp_path / "short"
    short.write_text("abc")
    os.chmod(short, 0o600)
    with pytest.raises(ConfigError, match="at least 16 characters"):
        check_bind("127.0.0.1", short)
    # the CLI: one line, exit status 1, before the checkpoint is even read
    fails(["serve", "--checkpoint", tiny_run, "--host", "0.0.0.0"], "needs --token-file")
    os.chmod(tok, 0o640)
    fails(["serve", "--checkpoint", tiny_run, "--host", "0.0.0.0", "--token-file", tok], "lets others read")
    fails(["serve", "--checkpoint", tiny_run, "--token-file", tmp_path / "missing"], "not found")
    fails(["serve", "--checkpoint", tiny_run, "--max-notes", "0"], "--max-notes must be >= 1")
    fails(["serve", "--checkpoint", tmp_path / "no-run"], "")


def test_docker_image_serves_a_mounted_run_with_a_token_and_documents_the_app():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    docker = (root / "Dockerfile").read_text(encoding="utf-8")
    cmd = [line for line in docker.splitlines() if line.startswith("CMD ")][-1]
    assert "clinicode serve" in cmd and "$CLINICODE_RUN" in cmd and "--token-file" in cmd and "--host 0.0.0.0" in cmd
    assert "ENV" in docker and "CLINICODE_RUN=/runs/" in docker and "127.0.0.1:8000/health" in docker
    assert '".[app,serve]"' in docker  # both commands' dependencies are in the image
    for doc in (root / "docs" / "serve.md", root / "docs" / "app.md"):
        assert "streamlit run app_streamlit/main.py" in doc.read_text(encoding="utf-8")


def test_an_unexpected_failure_is_a_500_without_note_text_and_the_worker_survives(predictor, notes, caplog):
    import logging

    from clinicode.predict import Predictor as P

    class Broken(P):
        def prepare(self, texts, **kw):
            if any(SECRET in t for t in texts):
                raise ValueError(f"cannot handle {texts[0]}")  # a bug whose message would hold note text
            return super().prepare(texts, **kw)

    broken = Broken(predictor.checkpoint, device="cpu")
    with caplog.at_level(logging.INFO), TestClient(create_app(broken), raise_server_exceptions=False,
                                                   base_url=LOCAL) as c:
        r = c.post("/v1/predict", json={"notes": [{"text": f"pain {SECRET}"}]})
        assert r.status_code == 500 and "a bug" in r.json()["error"]["message"] and SECRET not in r.text
        assert c.post("/v1/predict", json={"notes": notes[:1]}).status_code == 200
        _healthy(c)
    assert "ValueError" in caplog.text and SECRET not in caplog.text


def test_a_request_whose_client_left_is_skipped_and_the_worker_goes_on(predictor, notes):
    b = Batcher(predictor, max_notes=32, wait_ms=1000)
    try:
        lone = b.submit(predictor.prepare([notes[2]["text"]], ids=["lone"]), top_k=5, threshold=None, explain=0)
        t0 = time.perf_counter()
        assert lone.result(timeout=60)[0]["id"] == "lone"
        assert time.perf_counter() - t0 < 0.9  # nothing else on its way: scored without waiting 1 s for company
        with b.arriving():
            gone = b.submit(predictor.prepare([notes[0]["text"]], ids=["gone"]), top_k=5, threshold=None, explain=0)
            assert gone.cancel()  # still waiting in the queue: its client disconnected
        kept = b.submit(predictor.prepare([notes[1]["text"]], ids=["kept"]), top_k=5, threshold=None, explain=0)
        assert kept.result(timeout=60)[0]["id"] == "kept"
        assert b.alive() and b.scored == 2
    finally:
        b.stop()
