"""`clinicode serve` as a real uvicorn process against slow, vanishing and many clients, and a SIGTERM under load
(#36). Bound to [::1] (127.0.0.1 without IPv6), with short timeouts so each case takes seconds. Every answer is JSON;
the log holds no traceback, no ERROR for a client's hang-up and no note text."""

import json
import signal
import socket
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from tests.helpers import SECRET, read_until_closed, serve_process, start_load  # noqa: E402

pytestmark = pytest.mark.slow


def _v6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


V6 = _v6()
ADDR = "::1" if V6 else "127.0.0.1"


@pytest.fixture(scope="module")
def server(tiny_run, tmp_path_factory):
    with serve_process(tiny_run, tmp_path_factory.mktemp("serve-hostile"), "--read-timeout", "1.5", "--idle-timeout",
                       "1", "--grace", "2", "--max-notes", "64", address=ADDR) as srv:
        yield srv


def _logs(server) -> str:
    return server["log"].read_text(encoding="utf-8", errors="replace")


def _connect(server) -> socket.socket:
    s = socket.create_connection((ADDR, server["port"]), timeout=10)
    return s


def test_a_bracketed_ipv6_host_is_served_and_the_start_line_names_the_real_address(server):
    logs = _logs(server)
    line = next(x for x in logs.splitlines() if x.startswith("serving "))
    assert f"on {server['base']} " in line


def test_a_half_sent_request_head_is_dropped_after_the_read_timeout(server):
    with _connect(server) as s:
        s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: " + ADDR.encode() + b"\r\nContent-Type: app")
        t0 = time.monotonic()
        closed, _ = read_until_closed(s, 8)
        assert closed and time.monotonic() - t0 < 6  # --read-timeout 1.5: was held open forever


def test_a_connection_that_sends_nothing_is_dropped(server):
    with _connect(server) as s:
        closed, _ = read_until_closed(s, 8)
        assert closed


def test_a_half_sent_body_gets_a_408_json_answer(server):
    with _connect(server) as s:
        s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"notes\": [{\"text\": \"" + SECRET.encode())
        closed, got = read_until_closed(s, 10)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and closed
    assert "--read-timeout" in json.loads(body)["error"]["message"] and SECRET.encode() not in got


@pytest.mark.parametrize("raw", [b"GARBAGE\r\n\r\n", b"GET /health HTTP/1.1\r\nHost localhost"])
def test_a_malformed_http_request_gets_a_json_400(server, raw):
    with _connect(server) as s:
        s.sendall(raw + b"\r\n\r\n")
        closed, got = read_until_closed(s, 10)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head.lower()
    assert "malformed HTTP request" in json.loads(body)["error"]["message"]


def test_client_hang_ups_are_not_logged_as_server_errors(server):
    before = len(_logs(server))
    for _ in range(5):
        with _connect(server) as s:
            s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 5000\r\n\r\n{\"notes\": [")
            time.sleep(0.05)
    with _connect(server) as s:  # and one that leaves while its notes are scored
        s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 40\r\n\r\n" + b'{"notes": [{"text": "chest pain x"}]}'.ljust(40))
    time.sleep(1)
    assert httpx.get(server["base"] + "/health").json()["status"] == "ok"
    new = _logs(server)[before:]
    assert "ERROR" not in new and "Traceback" not in new, new
    assert "client closed the connection" in new


def test_sigterm_under_load_answers_every_admitted_request_in_json_and_exits_0(server):
    base = server["base"]
    note = f"{SECRET} chest pain, hypertension, atrial fibrillation; cardiac catheterization. " * 300
    threads, results, transport = start_load(base, note, clients=10, notes=64)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(results) < 10:  # all ten admitted (or some done) before the signal
        pending = [x for x in httpx.get(base + "/metrics").text.splitlines()
                   if x.startswith("clinicode_pending_requests ")]
        if pending and float(pending[0].split()[1]) + len(results) >= 10:
            break
        time.sleep(0.05)
    server["proc"].send_signal(signal.SIGTERM)
    for t in threads:
        t.join(90)
    assert not transport, transport  # every admitted request got an answer, none a reset connection
    assert len(results) == 10
    for status, ctype, text in results:
        assert status in (200, 503), (status, text[:200])
        assert ctype.startswith("application/json")  # never uvicorn's text/plain 500
        body = json.loads(text)
        assert "results" in body or "shutting down" in body["error"]["message"]
        assert status == 200 or SECRET not in text
    assert server["proc"].wait(60) == 0
    logs = _logs(server)
    assert "Traceback" not in logs and "Exception in ASGI" not in logs and "ERROR" not in logs, logs[-3000:]
    assert SECRET not in logs
