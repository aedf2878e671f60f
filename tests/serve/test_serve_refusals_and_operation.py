"""`clinicode serve` against hostile-but-realistic clients and operators (#36), through FastAPI's TestClient:
subjects, ids, hostile JSON, charsets, Host and Origin checks, readiness, metrics, request ids, a full queue,
draining, binding and token files. Every refusal is a 4xx (or a 503 with Retry-After) with a JSON body (an
OperationOutcome on /fhir/ routes) that repeats no note text; every accepted FHIR answer is a valid R4B Bundle. The
real uvicorn process (timeouts, SIGTERM, binding, hang-ups) is in test_serve_process_slow_clients.py."""

import base64
import json
import logging
import os
import re
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from clinicode.config import ServeConfig
from clinicode.errors import ConfigError
from clinicode.predict import Predictor
from clinicode.serve import check_bind, create_app
from tests.helpers import SECRET

LOCAL = "http://127.0.0.1:8000"
JSON = {"content-type": "application/json"}
ANALYZE = "/fhir/DocumentReference/$analyze"


def _valid_bundle(b: dict) -> None:
    from fhir.resources.R4B.bundle import Bundle

    Bundle.model_validate(b)


def _docref(text: str, **kw) -> dict:
    att = {"contentType": kw.pop("contentType", "text/plain"),
           "data": kw.pop("data", base64.b64encode(text.encode()).decode())}
    return {"resourceType": "DocumentReference", "id": "d1", "status": "current", "content": [{"attachment": att}],
            **kw}


def _post(c, path, raw: bytes, headers=JSON):
    return c.post(path, content=raw, headers=headers)


def _refused(r, status, words, *, fhir=False):
    assert r.status_code == status, r.text
    body = r.json()
    msg = body["issue"][0]["diagnostics"] if fhir else body["error"]["message"]
    if fhir:
        from fhir.resources.R4B.operationoutcome import OperationOutcome

        OperationOutcome.model_validate(body)  # its issue code is one of FHIR's
    assert words in msg, msg
    assert SECRET not in r.text
    return msg


# ------------------------------------------------------------------ silently wrong: subjects and query options
@pytest.mark.parametrize("subject, words", [
    ({"foo": "bar"}, "unknown field 'foo'"),
    ("", "empty or blank string"),
    ("   ", "empty or blank string"),
    ("Patient/ 1", "holds spaces"),
    ({"reference": 5}, "reference must be a non-empty string"),
    ({"reference": ""}, "reference must be a non-empty string"),
    ({}, "empty object"),
    ({"identifier": "12"}, "identifier must be an object"),
    ({"reference": {"nested": SECRET}}, "reference must be a non-empty string"),
])
def test_a_subject_that_is_no_fhir_reference_is_refused_not_made_into_an_invalid_bundle(client, subject, words):
    body = {"notes": [{"id": "n1", "text": f"chest pain {SECRET}", "subject": subject}]}
    for fmt in ("", "?format=fhir"):  # the same rule whatever the output
        _refused(client.post("/v1/predict" + fmt, json=body), 422, words)
    doc = _docref(f"pain {SECRET}", subject=subject if isinstance(subject, dict) else {"display": subject})
    if isinstance(subject, dict):
        _refused(client.post(ANALYZE, json=doc), 422, words, fhir=True)


def test_an_empty_id_is_refused_not_made_into_an_invalid_bundle(client):
    for fmt in ("", "?format=fhir"):
        _refused(client.post("/v1/predict" + fmt, json={"notes": [{"id": "", "text": "pain"}]}), 422,
                 "notes[0].id is an empty string")
    doc = _docref("pain", id="")
    _refused(client.post(ANALYZE, json=doc), 422, "DocumentReference.id must be a FHIR id", fhir=True)


def test_nan_inside_a_subject_is_a_400_json_answer(client):
    raw = b'{"notes": [{"text": "chest pain", "subject": {"reference": NaN}}]}'
    _refused(_post(client, "/v1/predict?format=fhir", raw), 400, "NaN")
    raw = b'{"notes": [{"text": "chest pain"}], "threshold": Infinity}'
    _refused(_post(client, "/v1/predict", raw), 400, "Infinity")


@pytest.mark.parametrize("subject", ["Patient/1", {"reference": "Patient/2", "display": "A. Patient"},
                                     {"identifier": {"system": "urn:oid:1.2.36.146.595.217.0.1", "value": "12345"}},
                                     {"reference": "http://ehr.example/fhir/Patient/3", "type": "Patient"}])
def test_every_accepted_subject_gives_a_valid_bundle(client, note, subject):
    r = client.post("/v1/predict?format=fhir", json={"notes": [{"text": note, "subject": subject}], "threshold": 0})
    assert r.status_code == 200
    b = r.json()
    _valid_bundle(b)
    coded = [e["resource"] for e in b["entry"] if e["resource"]["resourceType"] != "Device"]
    assert coded and all(x["subject"] == ({"reference": subject} if isinstance(subject, str) else subject)
                         for x in coded)


def test_query_options_are_honoured_on_predict_as_on_the_fhir_route(client, note):
    r = client.post("/v1/predict?top_k=1", json={"notes": [{"text": note}]})
    assert r.status_code == 200 and len(r.json()["results"][0]["scores"]) == 1  # was: 10, the query ignored
    r = client.post("/v1/predict?top_k=2&explain=1", json={"notes": [{"text": note}]})
    rec = r.json()["results"][0]
    assert len(rec["scores"]) == 2 and "evidence" in rec
    # given in both places: they must agree
    assert client.post("/v1/predict?top_k=3", json={"notes": [{"text": note}], "top_k": 3}).status_code == 200
    _refused(client.post("/v1/predict?top_k=1", json={"notes": [{"text": note}], "top_k": 5}), 422,
             "top_k is given in the query (1) and in the body (5)")
    _refused(client.post("/v1/predict?topk=1", json={"notes": [{"text": note}]}), 422,
             "unknown query parameter 'topk'")
    _refused(client.post("/v1/predict?top_k=1&top_k=2", json={"notes": [{"text": note}]}), 422, "given 2 times")
    _refused(client.post("/v1/predict?threshold=nan", json={"notes": [{"text": note}]}), 422, "threshold must be")
    doc = _docref(note)
    _refused(client.post(ANALYZE + "?format=fhir", json=doc), 422, "unknown query parameter 'format'", fhir=True)
    _refused(client.post(ANALYZE + "?explain=1&explain=2", json=doc), 422, "given 2 times", fhir=True)


# ------------------------------------------------------------------ no 5xx for bad input
DEEP = b'{"notes": ' + b"[" * 1000 + b"]" * 1000 + b"}"
LONG = b'{"notes": [{"text": "ok"}], "top_k": ' + b"9" * 5000 + b"}"


@pytest.mark.parametrize("raw, status, words", [
    (LONG, 400, "over 4,300 digits"),
    (b'{"notes": [{"text": "ok", "id": ' + b"1" * 4400 + b"}]}", 400, "over 4,300 digits"),
    (DEEP, 400, "nested too deeply"),
    (b'{"notes": [{"id": "\\ud800", "text": "' + SECRET.encode() + b'"}]}', 422, "notes[0].id holds a lone"),
    (b'{"notes": [{"text": "pain \\udc00 ' + SECRET.encode() + b'"}]}', 422, "notes[0].text holds a lone"),
    (b'{"notes": [{"text": "pain", "subject": "Patient/\\ud83d"}]}', 422, "notes[0].subject holds a lone"),
    (b'{"notes": [{"text": "pain", "subject": {"reference": "\\udbff"}}]}', 422, "subject.reference holds a lone"),
    (b'{"notes": [{"text": "pain", "\\ud800": 1}]}', 422, "a field name in notes[0]"),
])
def test_hostile_json_is_a_4xx_json_answer(client, raw, status, words):
    for fmt in ("", "?format=fhir"):
        _refused(_post(client, "/v1/predict" + fmt, raw), status, words)
    assert client.get("/health").json()["status"] == "ok"


def test_a_paired_surrogate_escape_is_text_and_scored(client):
    r = _post(client, "/v1/predict", b'{"notes": [{"id": "\\ud83d\\ude00", "text": "chest pain \\ud83d\\ude00"}]}')
    assert r.status_code == 200 and r.json()["results"][0]["id"] == "\U0001F600"


@pytest.mark.parametrize("raw, words", [
    (LONG.replace(b'"notes": [{"text": "ok"}], "top_k"', b'"resourceType"'), "over 4,300 digits"),
    (b'{"resourceType": "DocumentReference", "x": ' + b"[" * 1000 + b"]" * 1000 + b"}", "nested too deeply"),
    (b'{"resourceType": "DocumentReference", "id": "\\ud800", "content": []}', "id holds a lone"),
    (b'{"resourceType": "DocumentReference", "subject": {"reference": NaN}, "content": []}', "NaN"),
])
def test_hostile_json_on_the_fhir_route_is_an_operation_outcome(client, raw, words):
    r = _post(client, ANALYZE, raw, headers={"content-type": "application/fhir+json"})
    assert r.status_code in (400, 422)
    _refused(r, r.status_code, words, fhir=True)


@pytest.mark.parametrize("charset", ["undefined", "rot13", "unicode_escape", "base64", "hex", "no-such-charset"])
def test_a_charset_that_is_no_text_charset_is_a_422_operation_outcome(client, charset):
    doc = _docref(f"pain {SECRET}", contentType=f"text/plain; charset={charset}")
    _refused(client.post(ANALYZE, json=doc), 422, "charset", fhir=True)


def test_a_latin_1_attachment_is_read_by_its_charset(client):
    doc = _docref("", contentType="text/plain; charset=iso-8859-1",
                  data=base64.b64encode("Patient with caf\u00e9 chest pain".encode("latin-1")).decode())
    assert client.post(ANALYZE, json=doc).status_code == 200


def test_line_wrapped_base64_is_accepted_as_fhir_allows(client, note):
    flat = base64.b64encode(note.encode()).decode()
    wrapped = "\r\n".join(flat[i:i + 76] for i in range(0, len(flat), 76)) + "\n"  # MIME style, as some EHRs send
    a = client.post(ANALYZE + "?threshold=0", json=_docref(note, data=flat))
    b = client.post(ANALYZE + "?threshold=0", json=_docref(note, data=wrapped))
    assert a.status_code == b.status_code == 200
    codes = [[e["resource"]["code"]["coding"][0]["code"] for e in r.json()["entry"][1:]] for r in (a, b)]
    assert codes[0] == codes[1] and codes[0]


def test_head_on_health_and_ready_is_answered(client):
    for path in ("/health", "/ready"):
        r = client.head(path)
        assert r.status_code == 200 and r.content == b""


# ------------------------------------------------------------------ security: Content-Type, Host, Origin, redirects
@pytest.mark.parametrize("path, ctype, status", [
    ("/v1/predict", "text/plain", 415),                            # a web page's "simple request"
    ("/v1/predict", "application/x-www-form-urlencoded", 415),
    ("/v1/predict", "multipart/form-data; boundary=x", 415),
    ("/v1/predict", None, 415),
    ("/v1/predict", "application/json; charset=latin-1", 415),
    ("/v1/predict", "application/fhir+json", 415),
    ("/v1/predict", "application/json", 200),
    ("/v1/predict", "Application/JSON; charset=UTF-8", 200),
    (ANALYZE, "text/plain", 415),
    (ANALYZE, "application/fhir+json", 200),
    (ANALYZE, "application/fhir+json; fhirVersion=4.0", 200),
    (ANALYZE, "application/json", 200),
])
def test_content_type_is_checked(client, note, path, ctype, status):
    body = json.dumps(_docref(note) if path == ANALYZE else {"notes": [{"text": note}]}).encode()
    headers = {} if ctype is None else {"content-type": ctype}
    r = client.post(path, content=body, headers=headers)
    assert r.status_code == status, r.text
    if status == 415:
        _refused(r, 415, "is not accepted here", fhir=path == ANALYZE)


@pytest.mark.parametrize("host, ok", [("127.0.0.1:8000", True), ("localhost:8000", True), ("LOCALHOST.", True),
                                      ("[::1]:8000", True), ("evil.example", False), ("evil.example:8000", False),
                                      ("10.1.2.3:8000", False), ("127.0.0.1.evil.example", False)])
def test_host_header_is_checked_against_dns_rebinding(client, host, ok):
    r = client.post("/v1/predict", json={"notes": [{"text": "chest pain"}]}, headers={"host": host})
    assert (r.status_code == 200) is ok, r.text
    if not ok:
        _refused(r, 421, "--allow-host")
        r = client.get("/health", headers={"host": host})
        assert r.status_code == 421


def test_allowed_hosts_and_wildcard_binds(predictor):
    app = create_app(predictor, host="0.0.0.0", limits=ServeConfig(allow_hosts=("coder.example.org",)))
    with TestClient(app, base_url="http://10.1.2.3:8000") as c:  # bound to all addresses: any IP literal is fine
        assert c.get("/ready").status_code == 200
        assert c.get("/ready", headers={"host": "coder.example.org:8000"}).status_code == 200
        assert c.get("/ready", headers={"host": "other.example.org"}).status_code == 421
    with TestClient(create_app(predictor, limits=ServeConfig(allow_hosts=("*",))), base_url="http://any.example") as c:
        assert c.get("/ready").status_code == 200


@pytest.mark.parametrize("origin, ok", [(None, True), ("http://127.0.0.1:8000", True),
                                        ("https://evil.example", False), ("null", False),
                                        ("http://127.0.0.1:9999", False), ("http://localhost:8000", False)])
def test_cross_origin_browsers_are_refused(client, origin, ok):
    headers = {**JSON, **({"origin": origin} if origin else {})}
    r = client.post("/v1/predict", content=b'{"notes": [{"text": "chest pain"}]}', headers=headers)
    assert (r.status_code == 200) is ok, r.text
    if not ok:
        _refused(r, 403, "--allow-origin")
        assert "access-control-allow-origin" not in r.headers


def test_allowed_origins(predictor):
    app = create_app(predictor, limits=ServeConfig(allow_origins=("https://coding.example.org",)))
    with TestClient(app, base_url=LOCAL) as c:
        ok = c.post("/v1/predict", json={"notes": [{"text": "pain"}]}, headers={"origin": "https://coding.example.org"})
        assert ok.status_code == 200
        assert c.get("/ready", headers={"origin": "https://other.example.org"}).status_code == 403


def test_a_trailing_slash_is_no_redirect_built_from_the_host_header(client):
    for host in ("evil.example", "127.0.0.1:8000"):
        r = client.post("/v1/predict/", json={"notes": [{"text": "pain"}]}, headers={"host": host},
                        follow_redirects=False)
        assert r.status_code in (404, 421) and "location" not in r.headers
    r = client.get("/health/", follow_redirects=False)
    assert r.status_code == 404 and "no trailing slash" in r.json()["error"]["message"]


# ------------------------------------------------------------------ operators: ready, metrics, identity, request id
def test_ready_is_503_until_the_model_is_loaded_while_health_answers(predictor):
    release = threading.Event()

    def load():
        release.wait(60)
        return predictor

    with TestClient(create_app(load=load), base_url=LOCAL) as c:
        assert c.get("/health").status_code == 200 and c.get("/health").json()["status"] == "loading"
        r = c.get("/ready")
        assert r.status_code == 503 and r.json()["status"] == "loading" and r.headers["retry-after"]
        r = c.post("/v1/predict", json={"notes": [{"text": "pain"}]})
        _refused(r, 503, "still loading")
        assert r.headers["retry-after"] == "2"
        release.set()
        for _ in range(200):
            if c.get("/ready").status_code == 200:
                break
            threading.Event().wait(0.05)
        assert c.get("/ready").json()["status"] == "ready"
        assert c.post("/v1/predict", json={"notes": [{"text": "pain"}]}).status_code == 200


def test_a_model_that_fails_to_load_is_reported(tmp_path):
    seen = []

    def load():
        raise RuntimeError("no weights")

    with TestClient(create_app(load=load, on_load_failure=seen.append), base_url=LOCAL) as c:
        for _ in range(100):
            if seen:
                break
            threading.Event().wait(0.05)
        assert c.get("/ready").json()["status"] == "failed to load"
        _refused(c.post("/v1/predict", json={"notes": [{"text": "pain"}]}), 503, "could not be loaded")
    assert isinstance(seen[0], RuntimeError)


def _metric(text: str, name: str, **labels) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} " if labels else f"{name} "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in /metrics")


def test_metrics_in_prometheus_text(predictor):
    with TestClient(create_app(predictor), base_url=LOCAL) as c:
        for _ in range(3):
            assert c.post("/v1/predict", json={"notes": [{"text": "chest pain"}, {"text": "fever"}]}).status_code == 200
        c.post("/v1/predict", content=b"{", headers=JSON)
        c.post("/v1/predict", content=b"{}", headers={"content-type": "text/plain"})
        r = c.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = r.text
    # every sample line is `name{labels} value` and every metric has HELP and TYPE
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or re.fullmatch(
            r'[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+]+', line), line
    assert _metric(text, "clinicode_requests_total", route="/v1/predict", method="POST", status=200) == 3
    assert _metric(text, "clinicode_requests_total", route="/v1/predict", method="POST", status=400) == 1
    assert _metric(text, "clinicode_requests_total", route="/v1/predict", method="POST", status=415) == 1
    assert _metric(text, "clinicode_notes_scored_total") == 6
    assert _metric(text, "clinicode_errors_total") == 0 and _metric(text, "clinicode_ready") == 1
    buckets = [float(m) for m in re.findall(
        r'clinicode_request_duration_seconds_bucket\{route="/v1/predict",le="[^"]+"\} (\S+)', text)]
    assert buckets == sorted(buckets) and buckets[-1] == 5
    assert _metric(text, "clinicode_request_duration_seconds_count", route="/v1/predict") == 5


def test_every_answer_names_the_checkpoint_and_fhir_carries_it(client, predictor, note, tiny_run):
    sha = predictor.checkpoint.manifest_sha256
    answers = [client.get("/health"), client.get("/ready"), client.get("/metrics"),
               client.post("/v1/predict", json={"notes": [{"text": note}]}),
               client.post("/v1/predict", content=b"{", headers=JSON), client.get("/nowhere"),
               client.post(ANALYZE, json=_docref(note))]
    for r in answers:
        assert r.headers["x-clinicode-checkpoint"] == sha and r.headers["x-clinicode-model"] == "leam"
        assert r.headers["x-clinicode-version"]
    assert answers[3].json()["model"] == {"model": "leam", "name": tiny_run.name, "n_codes": len(predictor.codes),
                                          "checkpoint_sha256": sha,
                                          "clinicode_version": answers[3].headers["x-clinicode-version"]}
    b = client.post("/v1/predict?format=fhir", json={"notes": [{"text": note}], "threshold": 0}).json()
    _valid_bundle(b)
    device = b["entry"][0]["resource"]
    assert device["resourceType"] == "Device" and device["identifier"][0]["value"] == sha
    assert device["deviceName"][0] == {"name": tiny_run.name, "type": "model-name"}
    assert all(e["resource"]["meta"]["source"].endswith("/checkpoint/" + sha) for e in b["entry"][1:])


def test_a_request_id_is_kept_or_made_and_logged(client, caplog):
    with caplog.at_level(logging.INFO, logger="clinicode.serve.access"):
        r = client.post("/v1/predict", json={"notes": [{"text": "pain"}]}, headers={"x-request-id": "abc-123.x"})
        assert r.headers["x-request-id"] == "abc-123.x"
        for bad in ("two words", "x" * 65, "<script>"):
            r = client.get("/health", headers={"x-request-id": bad})
            assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
        made = client.post("/v1/predict?format=fhir", json={"notes": [{"text": "pain"}]})
        rid = made.headers["x-request-id"]
        assert made.json()["identifier"]["value"] == rid
    assert "request_id=abc-123.x" in caplog.text and f"request_id={rid}" in caplog.text
    assert '"POST /v1/predict" 200' in caplog.text


# ------------------------------------------------------------------ bounded work and a graceful stop
class _Blocking(Predictor):
    gate = threading.Event()

    def prepare(self, texts, **kw):
        self.gate.wait(60)
        return super().prepare(texts, **kw)


def test_a_full_queue_answers_503_with_retry_after(predictor):
    blocking = _Blocking(predictor.checkpoint, device="cpu")
    _Blocking.gate.clear()
    with TestClient(create_app(blocking, limits=ServeConfig(max_pending=2)), base_url=LOCAL) as c:
        done = []
        threads = [threading.Thread(target=lambda: done.append(c.post("/v1/predict",
                                                                      json={"notes": [{"text": "pain"}]})))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for _ in range(200):
            if c.app.state.service.pending == 2:
                break
            threading.Event().wait(0.02)
        r = c.post("/v1/predict", json={"notes": [{"text": "pain"}]})
        _refused(r, 503, "--max-pending 2")
        assert r.headers["retry-after"] == "1"
        r = c.post(ANALYZE, json=_docref("pain"))
        assert r.status_code == 503 and r.json()["resourceType"] == "OperationOutcome"
        _Blocking.gate.set()
        for t in threads:
            t.join(60)
        assert [x.status_code for x in done] == [200, 200]
        assert c.post("/v1/predict", json={"notes": [{"text": "pain"}]}).status_code == 200


def test_draining_refuses_new_work_in_json_and_answers_waiting_work(predictor):
    with TestClient(create_app(predictor, limits=ServeConfig(grace=0.2)), base_url=LOCAL) as c:
        svc = c.app.state.service
        svc.batcher.refuse_waiting()  # the grace period is over: a job still queued is answered, never dropped
        r = c.post("/v1/predict", json={"notes": [{"text": "pain"}]})
        _refused(r, 503, "shutting down")
        svc.drain()
        r = c.post(ANALYZE, json=_docref("pain"))
        _refused(r, 503, "shutting down", fhir=True)
        assert r.headers["retry-after"] and r.headers["connection"] == "close"
        assert c.get("/health").json()["status"] == "shutting down" and c.get("/ready").status_code == 503


# ------------------------------------------------------------------ start-up: addresses, ports and token files
def test_a_busy_port_is_one_line_and_status_1_before_the_model_loads(tiny_run):
    from tests.helpers import fails

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        res = fails(["serve", "--checkpoint", tiny_run, "--port", port], f"cannot listen on 127.0.0.1 port {port}")
        assert "another --port" in res.stderr and "serving" not in res.stderr + res.stdout
        assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("host, words", [("no-such-host.invalid", "not an address or a name"),
                                         ("[::1", "not an address or a name"),
                                         ("192.0.2.1", "give an address of this machine")])
def test_an_address_that_cannot_be_bound_is_one_line(tiny_run, host, words):
    from tests.helpers import fails

    token = tiny_run.parent / "bind-token"
    token.write_text("k" * 40)
    os.chmod(token, 0o600)
    fails(["serve", "--checkpoint", tiny_run, "--host", host, "--port", "0", "--token-file", token], words)


def test_bracketed_ipv6_binds():
    from clinicode.serve import bind_socket, url_of

    try:
        sock = bind_socket("[::1]", 0)
    except ConfigError:
        pytest.skip("no IPv6 loopback here")
    with sock:
        assert url_of(sock).startswith("http://[::1]:")


def test_a_token_file_link_is_refused_without_advice_about_its_target(tmp_path):
    target = tmp_path / "shadow"
    target.write_text("k" * 40)
    os.chmod(target, 0o644)
    link = tmp_path / "token"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="symbolic link") as err:
        check_bind("127.0.0.1", link)
    assert "chmod" not in str(err.value) and "shadow" not in str(err.value)
    etc = tmp_path / "etc-link"
    etc.symlink_to("/etc/shadow")
    with pytest.raises(ConfigError, match="symbolic link") as err:
        check_bind("127.0.0.1", etc)
    assert "chmod" not in str(err.value)


def test_an_unreadable_token_file_is_called_unreadable(tmp_path, monkeypatch):
    import clinicode.serve.server as server  # read_token's module

    tok = tmp_path / "token"
    tok.write_text("k" * 40)
    os.chmod(tok, 0o600)
    real_open = os.open

    def denied(path, flags, *a, **kw):  # as for a file of another owner (root reads any file, so chmod 000 won't do)
        if str(path) == str(tok):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(server.os, "open", denied)
    with pytest.raises(ConfigError, match="cannot be read \\(Permission denied\\)") as err:
        check_bind("127.0.0.1", tok)
    assert "UTF-8" not in str(err.value)
    monkeypatch.undo()
    tok.write_bytes(b"\xff\xfe" + b"k" * 40)
    with pytest.raises(ConfigError, match="is not UTF-8"):
        check_bind("127.0.0.1", tok)


def test_docs_list_every_option_route_metric_and_exit_status():
    from pathlib import Path

    from clinicode.cli import app
    from clinicode.serve import ROUTES
    from tests.helpers import runner

    root = Path(__file__).resolve().parents[2]
    serve_md = (root / "docs" / "serve.md").read_text(encoding="utf-8")
    cli_md = (root / "docs" / "cli.md").read_text(encoding="utf-8")
    help_text = runner().invoke(app, ["serve", "--help"], terminal_width=200).stdout
    options = set(re.findall(r"(--[a-z][a-z-]+)", help_text)) - {"--help"}
    assert len(options) >= 16
    for opt in options:
        assert f"| `{opt} " in serve_md, opt
    for route in ROUTES:
        assert f"`GET {route}" in serve_md or f"`POST {route}" in serve_md or f"`GET /openapi.json`, `GET {route}" \
            in serve_md, route
    for name in ("clinicode_requests_total", "clinicode_request_duration_seconds", "clinicode_notes_scored_total",
                 "clinicode_errors_total", "clinicode_pending_requests", "clinicode_ready"):
        assert name in serve_md
    section = cli_md[cli_md.index("## `serve`"):]
    section = section[:section.index("\n## ", 5)]
    assert [int(x) for x in re.findall(r"^\| (\d+) \|", section, flags=re.M)] == [0, 1, 2]
    for status in (400, 403, 404, 405, 408, 413, 415, 421, 422, 503):
        assert re.search(rf"\| {status}( |$)", serve_md, flags=re.M), status
