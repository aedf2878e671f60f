"""`clinicode serve` against odd requests (#36), through FastAPI's TestClient: odd but legal JSON, odd HTTP, FHIR
edge cases, query strings, tokens, logs and metrics. Each test pins either a fix (it fails without it) or a behaviour
worth keeping: every refusal a 4xx JSON answer (an OperationOutcome on /fhir/ routes) without note text, every 200
Bundle a valid R4B Bundle, every JSON answer the records `Predictor.predict` gives for the same notes. The real
process's cases are in test_serve_process_odd_http.py."""

import base64
import codecs
import gzip
import json
import logging

import pandas as pd
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from clinicode.config import ServeConfig
from clinicode.errors import ConfigError
from clinicode.serve import create_app
from tests.helpers import SECRET

LOCAL = "http://127.0.0.1:8000"
JSON = {"content-type": "application/json"}
ANALYZE = "/fhir/DocumentReference/$analyze"
TOKEN = "recheck-" + "k" * 32


def _valid_bundle(b: dict) -> dict:
    from fhir.resources.R4B.bundle import Bundle

    Bundle.model_validate(b)
    return b


def _docref(text: str, **kw) -> dict:
    att = {"contentType": kw.pop("contentType", "text/plain"),
           "data": kw.pop("data", base64.b64encode(text.encode()).decode())}
    return {"resourceType": "DocumentReference", "id": "d1", "status": "current", "content": [{"attachment": att}],
            **kw}


def _refused(r, status, words, *, fhir=False):
    assert r.status_code == status, r.text
    body = r.json()
    msg = body["issue"][0]["diagnostics"] if fhir else body["error"]["message"]
    if fhir:
        from fhir.resources.R4B.operationoutcome import OperationOutcome

        OperationOutcome.model_validate(body)
    assert words in msg, msg
    assert SECRET not in r.text
    return msg


def _codes(bundle: dict) -> list[str]:
    return [e["resource"]["code"]["coding"][0]["code"] for e in bundle["entry"]
            if e["resource"]["resourceType"] in ("Condition", "Procedure")]


# ------------------------------------------------------------------ odd but legal JSON
@pytest.mark.parametrize("raw, words", [
    (b'{"notes": [{"id": "a", "text": "' + SECRET.encode() + b'", "text": "fever"}]}', "'text' twice"),
    (b'{"notes": [{"text": "chest pain"}], "notes": [{"text": "fever"}]}', "'notes' twice"),
    (b'{"notes": [{"text": "chest pain"}], "top_k": 5, "top_k": 1}', "'top_k' twice"),
    (b'{"notes": [{"text": "pain", "subject": {"reference": "Patient/1", "reference": "Patient/2"}}]}',
     "'reference' twice"),
])
def test_a_field_given_twice_is_refused_not_silently_resolved(client, raw, words):
    # RFC 8259 leaves duplicate names undefined; Python keeps the last, a proxy or a log reader may keep the first
    for fmt in ("", "?format=fhir"):
        _refused(client.post("/v1/predict" + fmt, content=raw, headers=JSON), 422, words)
    doc = (b'{"resourceType": "DocumentReference", "id": "d1", "id": "d2", "content": [{"attachment": '
           b'{"data": "cGFpbg=="}}]}')
    _refused(client.post(ANALYZE, content=doc, headers=JSON), 422, "'id' twice", fhir=True)


def test_legal_json_spellings_mean_what_they_say(client, note, predictor):
    want = predictor.predict([note], ids=["0"], attention=False)[0].to_dict()
    spellings = [
        b"\xef\xbb\xbf" + json.dumps({"notes": [{"text": note}]}).encode(),           # a UTF-8 byte-order mark
        json.dumps({"not\u0065s": [{"t\u0065xt": note}]}, ensure_ascii=True).encode(),
        ('{"n\\u006ftes": [{"\\u0074ext": ' + json.dumps(note) + "}]}").encode(),     # escapes inside field names
        ('\n\t {"notes": [{"text": ' + json.dumps(note) + "}] } \r\n").encode(),       # whitespace around
    ]
    for raw in spellings:
        r = client.post("/v1/predict", content=raw, headers=JSON)
        assert r.status_code == 200, r.text
        got = r.json()["results"][0]
        assert [p["code"] for p in got["predicted"]] == [p["code"] for p in want["predicted"]]


@pytest.mark.parametrize("options, n_scores, n_predicted", [
    ({"threshold": 0}, 10, "all"),          # exactly 0: every code is predicted
    ({"threshold": 1}, 10, 0),              # exactly 1: no probability reaches it
    ({"threshold": -0.0}, 10, "all"),
    ({"top_k": 10 ** 30}, "all", None),     # more than the label set: all of them
    ({"top_k": "all", "threshold": 0, "explain": 20}, "all", "all"),
])
def test_boundary_options_are_honoured_and_equal_predict(client, predictor, note, options, n_scores, n_predicted):
    n = len(predictor.codes)
    r = client.post("/v1/predict", json={"notes": [{"text": note}], **options})
    assert r.status_code == 200, r.text
    got = r.json()["results"][0]
    assert len(got["scores"]) == (n if n_scores == "all" else n_scores)
    if n_predicted is not None:
        assert len(got["predicted"]) == (n if n_predicted == "all" else n_predicted)
    kw = {"top_k": None if options.get("top_k") == "all" else options.get("top_k", 10),
          "threshold": float(options["threshold"]) if "threshold" in options else None,
          "explain": options.get("explain", 0)}
    want = predictor.predict([note], ids=["0"], attention=False, **kw)[0].to_dict()
    assert [p["code"] for p in got["predicted"]] == [p["code"] for p in want["predicted"]]
    fhir = client.post("/v1/predict?format=fhir", json={"notes": [{"text": note}], **options})
    assert _codes(_valid_bundle(fhir.json())) == [p["code"] for p in want["predicted"]]


@pytest.mark.parametrize("raw, words", [
    (b'{"notes": [{"text": "pain"}], "top_k": 1e400}', "got inf"),        # legal JSON, too large for a double
    (b'{"notes": [{"text": "pain"}], "threshold": 1e400}', "got inf"),
    (b'{"notes": [{"text": "pain"}], "top_k": -0}', "got 0"),
    (b'{"notes": [{"text": "pain"}], "top_k": 5.0}', "got 5.0"),
    (b'{"notes": [{"text": "pain"}], "explain": false}', "got a boolean"),
    (b'{"notes": [{"text": "pain"}], "threshold": true}', "got a boolean"),
    (b'{"notes": [{"text": "pain"}], "notes2": []}', "unknown field 'notes2'"),
    (b'{"notes": [{"text": "pain"}], "top_k": {}}', "got an object"),
    (b'{"notes": [{"text": "pain"}], "threshold": "0.5"}', "got a string"),  # strings are numbers only in the query
])
def test_odd_numbers_and_booleans_for_options_are_422(client, raw, words):
    _refused(client.post("/v1/predict", content=raw, headers=JSON), 422, words)


@pytest.mark.parametrize("rid", ["a\x00b", "tab\there", "a\u2028b", "x" * 100_000, "\U0001F600", 10 ** 4000])
def test_odd_note_ids_come_back_unchanged_and_make_valid_bundles(client, rid):
    raw = json.dumps({"notes": [{"id": rid, "text": "chest pain"}, {"id": rid, "text": " "}], "threshold": 0})
    r = client.post("/v1/predict", content=raw, headers=JSON)
    assert r.status_code == 200 and [x["id"] for x in r.json()["results"]] == [str(rid)] * 2
    assert "error" in r.json()["results"][1]  # a blank note: an error record, as in predict
    b = _valid_bundle(client.post("/v1/predict?format=fhir", content=raw, headers=JSON).json())
    assert b["entry"][-1]["resource"]["resourceType"] == "OperationOutcome"


def test_odd_note_texts_get_exactly_predicts_records(client, predictor, note):
    texts = [note.replace("\n", "\r\n"), "\x00" + note + "\x00", "\u202e" + note, note + " \U0001F600" * 50,
             "\u00a0\u200b\u3000", "e\u0301" * 500 + note, note.upper(), "\ufeff" + note]
    ids = [f"odd-{i}" for i in range(len(texts))]
    r = client.post("/v1/predict", json={"notes": [{"id": i, "text": t} for i, t in zip(ids, texts)], "explain": 2,
                                         "top_k": "all"})
    assert r.status_code == 200
    want = [p.to_dict() for p in predictor.predict(texts, ids=ids, explain=2, top_k=None, attention=False)]
    for g, w in zip(r.json()["results"], want):
        assert set(g) == set(w) and g.get("error") == w.get("error")
        assert [p["code"] for p in g.get("predicted", [])] == [p["code"] for p in w.get("predicted", [])]
        assert all(abs(g["scores"][c] - s) <= 1e-5 for c, s in w.get("scores", {}).items())
        for part in ("spans", "codes"):  # the same offsets into the same text, whatever its characters
            g_ev, w_ev = g.get("evidence", {}).get(part), w.get("evidence", {}).get(part)
            if part == "spans":
                assert (g_ev is None and w_ev is None) or _offsets(g_ev) == _offsets(w_ev)
            else:
                assert (g_ev or {}).keys() == (w_ev or {}).keys()
                assert all(_offsets(g_ev[c]) == _offsets(w_ev[c]) for c in (w_ev or {}))


def _offsets(spans: list[dict]) -> list[tuple[int, int]]:
    return [(x["start"], x["end"]) for x in spans]


@pytest.mark.parametrize("rid", [" ", "\u2028", "\u00a0\u3000", "\n"])
def test_a_blank_note_id_is_refused_in_both_formats(client, rid):
    # FHIR strings are never blank ('\u2028' alone failed the validator on every entry of its note)
    for fmt in ("", "?format=fhir"):
        _refused(client.post("/v1/predict" + fmt, json={"notes": [{"id": rid, "text": "chest pain"}]}), 422,
                 "notes[0].id is a blank string")


# ------------------------------------------------------------------ odd HTTP
def test_a_compressed_body_is_a_415_naming_the_encoding(client, note):
    body = json.dumps({"notes": [{"text": note}]}).encode()
    r = client.post("/v1/predict", content=gzip.compress(body), headers={**JSON, "content-encoding": "gzip"})
    _refused(r, 415, "Content-Encoding 'gzip'")  # was: 400 "not UTF-8 text"
    # a plain body declared as gzip is refused too: never read as something it says it is not
    _refused(client.post("/v1/predict", content=body, headers={**JSON, "content-encoding": "gzip"}), 415, "gzip")
    doc = json.dumps(_docref(note)).encode()
    _refused(client.post(ANALYZE, content=gzip.compress(doc), headers={**JSON, "content-encoding": "gzip"}), 415,
             "Content-Encoding", fhir=True)
    assert client.post("/v1/predict", content=body, headers={**JSON, "content-encoding": "identity"}).status_code == 200


def test_chunked_bodies_and_expect_continue_are_read_whole(client, note):
    body = json.dumps({"notes": [{"text": note}]}).encode()

    def chunks():
        for i in range(0, len(body), 97):
            yield body[i:i + 97]

    a = client.post("/v1/predict", content=chunks(), headers=JSON)
    b = client.post("/v1/predict", content=body, headers={**JSON, "expect": "100-continue"})
    assert a.status_code == b.status_code == 200
    assert a.json()["results"] == b.json()["results"]


@pytest.mark.parametrize("headers, status", [
    ([("content-type", "text/plain"), ("content-type", "application/json")], 415),  # the first one counts
    ([("content-type", 'application/json; charset="UTF-8"')], 200),
    ([("content-type", "application/json;charset=utf8")], 200),
    ([("content-type", "application/json; charset=utf-16")], 415),
    ([("content-type", "application/json, text/plain")], 415),
])
def test_content_type_variants(client, headers, status):
    r = client.post("/v1/predict", content=b'{"notes": [{"text": "chest pain"}]}', headers=headers)
    assert r.status_code == status, r.text
    if status == 415:
        _refused(r, 415, "is not accepted here")


@pytest.mark.parametrize("host, ok", [("[::1]", True), ("localhost.:8000", True), ("127.0.0.1.", True),
                                      ("localhost:8000:1", False), ("[::ffff:127.0.0.1]:8000", False),
                                      ("127.1", False), ("0x7f000001", False), ("user@localhost", False)])
def test_host_spellings(client, host, ok):
    r = client.get("/ready", headers={"host": host})
    assert r.status_code == (200 if ok else 421), r.text


def test_a_request_id_of_10_kb_is_replaced_not_echoed(client):
    r = client.get("/health", headers={"x-request-id": "a" * 10_240})
    assert r.status_code == 200 and len(r.headers["x-request-id"]) == 32


# ------------------------------------------------------------------ FHIR in: edge cases
@pytest.mark.parametrize("encoding, charset", [
    ("utf-16-be", "utf-16"),   # no byte-order mark: RFC 2781 says big-endian (Python's codec would read it backwards)
    ("utf-16-le", "utf-16le"),
    ("utf-16", "UTF-16"),      # with a byte-order mark, either order
    ("utf-32-be", "utf-32"),
    ("utf-8-sig", "utf-8"),    # a UTF-8 byte-order mark is no text
    ("cp1252", "windows-1252"),
])
def test_an_attachment_is_read_in_its_charset_as_the_same_note(client, note, encoding, charset):
    text = note.encode("ascii", "ignore").decode()
    want = client.post(ANALYZE + "?threshold=0.05", json=_docref(text))
    got = client.post(ANALYZE + "?threshold=0.05", json=_docref(
        "", contentType=f"text/plain; charset={charset}", data=base64.b64encode(text.encode(encoding)).decode()))
    assert want.status_code == got.status_code == 200, got.text
    assert _codes(_valid_bundle(got.json())) == _codes(want.json()) and _codes(want.json())


def test_a_big_endian_attachment_without_bom_is_not_read_backwards():
    from clinicode.fhir import note_from_document_reference

    doc = _docref("", contentType="text/plain; charset=UTF-16", data=base64.b64encode(
        "chest pain".encode("utf-16-be")).decode())
    assert note_from_document_reference(doc)["text"] == "chest pain"  # was: '\u6300\u6800...' (scored as such)
    doc["content"][0]["attachment"]["data"] = base64.b64encode(codecs.BOM_UTF16_LE + "chest".encode("utf-16-le")
                                                               ).decode()
    assert note_from_document_reference(doc)["text"] == "chest"


@pytest.mark.parametrize("ctype", ["text/html", "application/pdf", "text/rtf", "application/octet-stream"])
def test_an_attachment_that_is_not_plain_text_is_a_422(client, ctype):
    _refused(client.post(ANALYZE, json=_docref(f"<p>{SECRET}</p>", contentType=ctype)), 422, "not supported",
             fhir=True)


@pytest.mark.parametrize("doc, words", [
    ({"resourceType": "Bundle", "type": "collection", "entry": []}, "got 'Bundle'"),
    ({"resourceType": "DocumentReference", "content": [{"attachment": {"url": "https://ehr.example/n/1"}}]},
     "a 'url' to fetch is not supported"),
    ({"resourceType": "DocumentReference", "content": {"attachment": {"data": "cGFpbg=="}}}, "has no content"),
    ({"resourceType": "DocumentReference", "content": [{"attachment": {"data": "//79"}}]}, "does not decode"),
])
def test_document_references_that_hold_no_usable_note_are_422(client, doc, words):
    _refused(client.post(ANALYZE, json=doc), 422, words, fhir=True)


@pytest.mark.parametrize("data", ["", base64.b64encode(b" \r\n\t ").decode()])
def test_an_attachment_that_decodes_to_an_empty_note_is_an_outcome_in_a_valid_bundle(client, data):
    r = client.post(ANALYZE, json=_docref("", data=data))
    assert r.status_code == 200
    b = _valid_bundle(r.json())
    assert [e["resource"]["resourceType"] for e in b["entry"]] == ["Device", "OperationOutcome"]


def test_only_the_first_content_is_the_note(client, note):
    one = client.post(ANALYZE + "?threshold=0", json=_docref(note))
    doc = _docref(note)
    doc["content"].append({"attachment": {"contentType": "text/plain", "data": base64.b64encode(b"fever").decode()}})
    two = client.post(ANALYZE + "?threshold=0", json=doc)
    assert _codes(_valid_bundle(two.json())) == _codes(one.json())
    assert len(_valid_bundle(two.json())["entry"]) == len(one.json()["entry"])


@pytest.mark.parametrize("subject, words", [
    ("#p1", "contained"),                                    # a local reference would dangle in every Condition
    ({"reference": "#p1"}, "contained"),
    ({"reference": "Patient/1 2"}, "spaces"),                # as a string subject: no spaces in a reference
    ({"reference": "Patient/1", "type": "Pat ient"}, "type"),  # a FHIR uri holds no whitespace
    ({"identifier": {"system": "urn:oid:1 2", "value": "7"}}, "identifier"),
    ("Patient/" + "1" * 5000, "4,096"),
    ("Patient/1\x01", "control"),
])
def test_subjects_that_would_make_an_invalid_reference_are_422(client, subject, words):
    body = {"notes": [{"text": f"chest pain {SECRET}", "subject": subject}]}
    for fmt in ("", "?format=fhir"):
        _refused(client.post("/v1/predict" + fmt, json=body), 422, words)
    if isinstance(subject, dict):
        doc = _docref(f"pain {SECRET}", subject=subject, contained=[{"resourceType": "Patient", "id": "p1"}])
        _refused(client.post(ANALYZE, json=doc), 422, words, fhir=True)


@pytest.mark.parametrize("subject", [{"reference": "https://ehr.example/fhir/Patient/1/_history/2"},
                                     {"reference": "urn:uuid:6f1c7b3e-0b8e-4a2b-9a0e-2f8f4c1d0a11"},
                                     {"display": "A. Patient\nward 3"},
                                     {"identifier": {"value": "MRN 0042"}, "type": "Patient"}])
def test_absolute_and_logical_subjects_are_kept_and_valid(client, note, subject):
    r = client.post(ANALYZE + "?threshold=0", json=_docref(note, subject=subject))
    assert r.status_code == 200
    coded = [e["resource"] for e in _valid_bundle(r.json())["entry"][1:]]
    assert coded and all(x["subject"] == subject for x in coded)


# ------------------------------------------------------------------ query strings
@pytest.mark.parametrize("query, status, n_scores", [
    ("?top%5Fk=1", 200, 1),          # a percent-encoded name is its name
    ("?%74op_k=2", 200, 2),
    ("?&", 200, 10),
    ("?top_k=3&", 200, 3),
    ("?top_k=", 422, None),
    ("?top_k", 422, None),
    ("?=1", 422, None),
    ("?top_k=%ff", 422, None),
    ("?threshold=-0", 200, 10),
    ("?top_k=" + "9" * 5000, 422, None),
    ("?format=FHIR", 422, None),
])
def test_query_string_spellings(client, note, query, status, n_scores):
    r = client.post("/v1/predict" + query, json={"notes": [{"text": note}]})
    assert r.status_code == status, r.text
    if status == 200:
        assert len(r.json()["results"][0]["scores"]) == n_scores
    else:
        _refused(r, 422, "")


def test_a_non_integer_query_option_is_called_not_an_integer(client):
    msg = _refused(client.post("/v1/predict?explain=1.0", json={"notes": [{"text": "pain"}]}), 422, "explain")
    assert "must be an integer" in msg and "not a number" not in msg  # was: "'1.0' is not a number"
    msg = _refused(client.post("/v1/predict?threshold=high", json={"notes": [{"text": "pain"}]}), 422, "threshold")
    assert "must be a number" in msg and "'high'" in msg


# ------------------------------------------------------------------ tokens
@pytest.fixture(scope="module")
def guarded(predictor):
    with TestClient(create_app(predictor, token=TOKEN), base_url=LOCAL) as c:
        yield c


@pytest.mark.parametrize("headers, status", [
    ({"authorization": f"bearer {TOKEN}"}, 200),            # the scheme is case-insensitive (RFC 9110)
    ({"authorization": f"Basic {TOKEN}"}, 401),
    ({"authorization": f"Bearer {TOKEN[:-1]}"}, 401),
    ({"authorization": f"Bearer {TOKEN}x"}, 401),
    ({"authorization": f"Bearer wrong, Bearer {TOKEN}"}, 401),
    ({"cookie": f"token={TOKEN}"}, 401),
    ([("authorization", "Bearer wrong"), ("authorization", f"Bearer {TOKEN}")], 401),  # two: ambiguous, refused
    ([("authorization", f"Bearer {TOKEN}"), ("authorization", f"Bearer {TOKEN}")], 401),
])
def test_only_one_well_formed_bearer_header_opens_the_service(guarded, headers, status):
    hdrs = [*(headers.items() if isinstance(headers, dict) else headers), ("content-type", "application/json")]
    r = guarded.post("/v1/predict", content=b'{"notes": [{"text": "pain"}]}', headers=hdrs)
    assert r.status_code == status, r.text
    if status == 401:
        _refused(r, 401, "bearer token")


def test_a_token_in_the_query_opens_nothing_and_is_no_parameter(guarded):
    r = guarded.post(f"/v1/predict?access_token={TOKEN}", json={"notes": [{"text": "pain"}]})
    _refused(r, 401, "bearer token")
    assert TOKEN not in r.text
    assert guarded.get(f"/metrics?access_token={TOKEN}").status_code == 401
    for path in ("/ready", "/health"):  # probes need no token, with or without one
        assert guarded.get(path).status_code == 200
    assert guarded.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert guarded.head("/metrics").status_code == 401


# ------------------------------------------------------------------ logs and metrics stay one line, bounded
def test_a_path_cannot_forge_access_log_lines(client, caplog):
    with caplog.at_level(logging.INFO, logger="clinicode.serve"):
        r = client.get("/nowhere%0D%0AERROR%20forged%20line%22%20200")
        assert r.status_code == 404
    lines = [x for x in caplog.text.splitlines() if "nowhere" in x or "forged" in x]
    assert len(lines) == 1 and "\\r\\nERROR forged line" in lines[0], caplog.text  # escaped, on one line


def test_arbitrary_methods_do_not_grow_the_metrics(client):
    for i in range(20):
        client.request(f"X{i}" * 50, "/v1/predict")
    text = client.get("/metrics").text
    assert "X1X1" not in text
    methods = {part.split('"')[1] for part in text.split("method=")[1:]}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other"}, methods
    r = client.request("X" * 5000, "/health")
    assert r.status_code == 405 and len(r.json()["error"]["message"]) < 300


# ------------------------------------------------------------------ an operator's options
@pytest.mark.parametrize("value", [float("inf"), 1e308, float("nan")])
def test_a_body_limit_that_is_no_size_is_refused_at_start(value):
    with pytest.raises(ConfigError, match="--max-body-mb"):
        ServeConfig(max_body_mb=value)  # inf was accepted and every request then failed with a 500


# ------------------------------------------------------------------ concurrency and limits
def test_concurrent_requests_with_different_options_each_get_predicts_answer(predictor, demo_data):
    import threading

    texts = [str(t) for t in pd.read_parquet(demo_data / "test.parquet")["text"].iloc[:12]]
    options = [{"top_k": 1 + i % 4, "threshold": [None, 0.0, 0.3, 1.0][i % 4], "explain": i % 3} for i in range(12)]
    got: dict[int, dict] = {}
    app = create_app(predictor, limits=ServeConfig(batch_wait_ms=50, batch_notes=64))
    with TestClient(app, base_url=LOCAL) as c:
        def send(i):
            body = {"notes": [{"id": "same", "text": texts[i]}, {"id": "same", "text": texts[(i + 1) % 12]}],
                    **{k: v for k, v in options[i].items() if v is not None}}
            got[i] = c.post("/v1/predict", json=body).json()

        threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert c.app.state.service.batcher.batches < 12 * 2  # some were scored together
    for i in range(12):
        want = predictor.predict([texts[i], texts[(i + 1) % 12]], ids=["same", "same"], attention=False,
                                 **options[i])
        for g, w in zip(got[i]["results"], want):
            w = w.to_dict()
            assert [p["code"] for p in g["predicted"]] == [p["code"] for p in w["predicted"]]
            assert list(g["scores"]) == list(w["scores"]) and set(g) == set(w)


def test_limits_are_inclusive_on_both_routes(predictor):
    limits = ServeConfig(max_notes=3, max_text_chars=50)
    with TestClient(create_app(predictor, limits=limits), base_url=LOCAL) as c:
        ok = c.post("/v1/predict", json={"notes": [{"text": "p" * 50}] * 3})
        assert ok.status_code == 200 and len(ok.json()["results"]) == 3
        _refused(c.post("/v1/predict", json={"notes": [{"text": "p" * 50}] * 4}), 413, "the limit is 3")
        _refused(c.post("/v1/predict", json={"notes": [{"text": "p" * 51}]}), 413, "the limit is 50")
        assert c.post(ANALYZE, json=_docref("\u00e9" * 50)).status_code == 200  # characters, not bytes
        _refused(c.post(ANALYZE, json=_docref("p" * 51)), 413, "the limit is 50", fhir=True)


def test_the_largest_fhir_answer_is_a_valid_bundle(client, note):
    doc = _docref(note, subject={"reference": "Patient/9"})
    r = client.post(ANALYZE + "?top_k=all&threshold=0&explain=20", json=doc)
    assert r.status_code == 200
    b = _valid_bundle(r.json())
    conditions = [e["resource"] for e in b["entry"] if e["resource"]["resourceType"] == "Condition"]
    assert conditions and all(x["evidence"] == [{"detail": [{"reference": "DocumentReference/d1"}]}]
                              for x in conditions)


def test_a_token_file_is_read_as_the_token_its_owner_wrote(tmp_path):
    from clinicode.serve import check_bind

    tok = tmp_path / "token"
    tok.write_bytes(b"\xef\xbb\xbf" + b"k" * 40 + b"\r\n")  # an editor's byte-order mark and line end
    tok.chmod(0o600)
    assert check_bind("127.0.0.1", tok) == "k" * 40  # was: '\ufeffkkk...', which no client could send
    tok.write_text("k" * 5000)
    with pytest.raises(ConfigError, match="over 4,096 bytes"):  # was: cut to 4,096, every client refused
        check_bind("127.0.0.1", tok)


def test_probes_and_metrics_while_loading_and_draining(predictor):
    import threading

    release = threading.Event()

    def load():
        release.wait(30)
        return predictor

    bearer = {"authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(load=load, token=TOKEN), base_url=LOCAL) as c:
        assert c.get("/metrics").status_code == 401
        assert "clinicode_ready 0" in c.get("/metrics", headers=bearer).text.splitlines()
        assert c.get("/ready").status_code == 503 and c.get("/ready").headers["retry-after"]
        assert c.post("/v1/predict", json={"notes": [{"text": "x"}]}).status_code == 401  # the token comes first
        r = c.post(ANALYZE, json=_docref("x"), headers=bearer)
        _refused(r, 503, "still loading", fhir=True)
        release.set()
    with TestClient(create_app(predictor), base_url=LOCAL) as c:
        c.app.state.service.drain()
        assert [c.get(p).status_code for p in ("/health", "/metrics", "/ready")] == [200, 200, 503]
        assert c.get("/metrics", headers={"host": "evil.example"}).status_code == 421  # checks hold while stopping


@pytest.mark.parametrize("method, path, status", [
    ("POST", ANALYZE + "/", 404), ("POST", "/fhir/Patient/$analyze", 404), ("GET", ANALYZE, 405),
    ("PUT", ANALYZE, 405), ("POST", ANALYZE + "?_format=xml", 422),
])
def test_errors_under_fhir_are_valid_operation_outcomes(client, note, method, path, status):
    r = client.request(method, path, json=_docref(note), headers={"content-type": "application/fhir+json"})
    assert r.headers["content-type"].startswith("application/fhir+json")
    _refused(r, status, "", fhir=True)


def test_a_percent_encoded_route_is_the_route(client, note):
    r = client.post("/fhir/DocumentReference/%24analyze", json=_docref(note))
    assert r.status_code == 200 and _valid_bundle(r.json())["type"] == "collection"


# ------------------------------------------------------------------ mutated requests: no 5xx, no invalid Bundle
_ODD = [None, True, False, 0, -1, 1, 2 ** 63, 1.5, -0.0, "", " ", "all", "\x00", "#x", "Patient/1", [], [1], {},
        {"reference": "Patient/1"}, "x" * 5000, "\u2028", "\U0001F600", 1e308]
_FIELDS = ["notes", "top_k", "explain", "threshold", "id", "text", "subject", "reference", "display", "type",
           "identifier", "system", "value", "content", "attachment", "data", "contentType", "extra"]


def _mutate(obj, rng):
    """OBJ with one random change somewhere: a value swapped for an odd one, a field dropped or added."""
    if isinstance(obj, dict):
        obj, op = dict(obj), rng.random()
        if op < 0.3 and obj:
            k = rng.choice(list(obj))
            obj[k] = rng.choice(_ODD) if rng.random() < 0.7 else _mutate(obj[k], rng)
        elif op < 0.5 and obj:
            obj.pop(rng.choice(list(obj)))
        elif op < 0.7:
            obj[rng.choice(_FIELDS)] = rng.choice(_ODD)
        else:
            obj = {k: _mutate(v, rng) if rng.random() < 0.5 else v for k, v in obj.items()}
        return obj
    if isinstance(obj, list):
        obj = list(obj)
        if obj and rng.random() < 0.5:
            i = rng.randrange(len(obj))
            obj[i] = _mutate(obj[i], rng)
        else:
            obj.append(rng.choice(_ODD))
        return obj
    return rng.choice(_ODD) if rng.random() < 0.5 else obj


def test_mutated_requests_get_a_json_4xx_or_a_valid_answer(client):
    import random

    rng = random.Random(36)
    body = {"notes": [{"id": "n1", "text": "chest pain and hypertension", "subject": {
        "reference": "Patient/1", "identifier": {"system": "urn:x", "value": "1"}}}, {"text": "fever"}],
        "top_k": 3, "threshold": 0.2, "explain": 1}
    doc = _docref("chest pain", subject={"reference": "Patient/1"})
    seen = set()
    for i in range(240):
        path = (ANALYZE + "?threshold=0", "/v1/predict?format=fhir", "/v1/predict")[i % 3]
        sent = _mutate(doc if path.startswith("/fhir/") else body, rng)
        r = client.post(path, content=json.dumps(sent).encode(), headers=JSON)
        seen.add(r.status_code)
        assert r.status_code in (200, 413, 422), (r.status_code, r.text[:300])
        answer = r.json()
        if r.status_code == 200 and "fhir" in path:
            _valid_bundle(answer)
        elif r.status_code != 200 and path.startswith("/fhir/"):
            assert answer["resourceType"] == "OperationOutcome"
    assert seen >= {200, 422}  # both kinds were exercised
