"""One answer to a request's Host headers whichever HTTP parser serves (#51): two Host headers, or an HTTP/1.1 request
with none, is a 400 with a JSON body under h11 and httptools alike (RFC 9112 section 3.2; httptools passed them on and
the Host check read the first while a proxy may route by the last). Real processes on 127.0.0.1."""

import json
import socket

import pytest

pytest.importorskip("uvicorn")

from clinicode.serve.protocol import DUPLICATE_HOST, MISSING_HOST
from tests.helpers import SECRET, read_until_closed, serve_process

pytestmark = pytest.mark.slow

BODY = json.dumps({"notes": [{"id": "n1", "text": "chest pain " + SECRET}]}).encode()


@pytest.fixture(scope="module", params=["h11", "httptools"])
def server(request, tiny_run, tmp_path_factory):
    pytest.importorskip(request.param)
    with serve_process(tiny_run, tmp_path_factory.mktemp(f"serve-{request.param}"), "--http", request.param,
                       "--batch-wait-ms", "1") as srv:
        yield srv


def _ask(port: int, head: bytes) -> tuple[int, dict, bytes]:
    """(status, JSON body, raw answer) of POST /v1/predict with the header lines HEAD."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
        _, got = read_until_closed(s, 10)
    head_part, _, body = got.partition(b"\r\n\r\n")
    status = int(got[9:12]) if got.startswith(b"HTTP/1.1 ") else 0
    try:
        return status, json.loads(body), got
    except ValueError:
        return status, {}, got


@pytest.mark.parametrize("hosts", [
    [b"127.0.0.1", b"evil.example"], [b"evil.example", b"127.0.0.1"], [b"127.0.0.1", b"127.0.0.1"],
])
def test_two_host_headers_are_a_json_400_under_either_parser(server, hosts):
    head = b"POST /v1/predict HTTP/1.1\r\n" + b"".join(b"Host: " + h + b"\r\n" for h in hosts)
    status, body, raw = _ask(server["port"], head)
    assert status == 400, raw[:300]
    assert body == {"error": {"status": 400, "message": DUPLICATE_HOST}}, raw[:300]
    assert b"content-type: application/json" in raw.lower() and SECRET.encode() not in raw


def test_an_http_1_1_request_without_host_is_a_json_400_under_either_parser(server):
    status, body, raw = _ask(server["port"], b"POST /v1/predict HTTP/1.1\r\n")
    assert status == 400, raw[:300]
    assert body == {"error": {"status": 400, "message": MISSING_HOST}}, raw[:300]


def test_one_host_header_or_http_1_0_without_one_is_still_answered(server):
    status, body, raw = _ask(server["port"], b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n")
    assert status == 200 and body["results"][0]["id"] == "n1", raw[:300]
    with socket.create_connection(("127.0.0.1", server["port"]), timeout=10) as s:  # HTTP/1.0 needs no Host
        s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        _, got = read_until_closed(s, 10)
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
