"""`clinicode serve` as a real uvicorn process against odd HTTP (#36): a request framed two ways, WebSocket upgrades,
Expect: 100-continue over the limit, /metrics under load and Ctrl-C pressed twice. On 127.0.0.1 with short timeouts;
every loop is bounded in count and time. Every answer is JSON and the log holds no traceback."""

import json
import signal
import socket
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from tests.helpers import SECRET, read_until_closed, serve_process, start_load  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tiny_run, tmp_path_factory):
    with serve_process(tiny_run, tmp_path_factory.mktemp("serve-recheck"), "--read-timeout", "2", "--idle-timeout",
                       "1", "--grace", "20", "--max-body-mb", "1") as srv:
        yield srv


def _logs(server) -> str:
    return server["log"].read_text(encoding="utf-8", errors="replace")


def _exchange(server, data: bytes, seconds: float = 5.0) -> tuple[bytes, bool]:
    """(what the server sent within SECONDS, whether it closed the connection)."""
    with socket.create_connection(("127.0.0.1", server["port"]), timeout=seconds) as s:
        s.sendall(data)
        closed, got = read_until_closed(s, seconds)
    return got, closed


def _answers(got: bytes) -> list[tuple[int, dict]]:
    """(status, JSON body) of each HTTP response in GOT (Content-Length framed)."""
    out = []
    while got.startswith(b"HTTP/1.1 "):
        head, _, rest = got.partition(b"\r\n\r\n")
        status = int(head[9:12])
        length = next(int(x.split(b":")[1]) for x in head.lower().split(b"\r\n") if x.startswith(b"content-length:"))
        out.append((status, json.loads(rest[:length]) if length else {}))
        got = rest[length:]
    return out


BODY = b'{"notes": [{"text": "chest pain ' + SECRET.encode() + b'"}]}'
HEAD = b"Host: 127.0.0.1\r\nContent-Type: application/json\r\n"


def test_a_body_framed_two_ways_is_refused_and_the_connection_closed(server):
    chunked = b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n"
    smuggled = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"  # what a proxy reading Content-Length would miss
    got, closed = _exchange(server, b"POST /v1/predict HTTP/1.1\r\n" + HEAD + b"Content-Length: 4\r\n"
                            b"Transfer-Encoding: chunked\r\n\r\n" + chunked + smuggled)
    answers = _answers(got)
    assert [s for s, _ in answers] == [400] and closed, got[:300]  # was: 200, and the next request answered too
    assert "Transfer-Encoding and Content-Length" in answers[0][1]["error"]["message"]


@pytest.mark.parametrize("host, status", [("127.0.0.1", 200), ("evil.example", 421)])
def test_a_websocket_upgrade_is_answered_as_http_in_json(server, host, status):
    got, _ = _exchange(server, b"GET /health HTTP/1.1\r\nHost: " + host.encode() + b"\r\nUpgrade: websocket\r\n"
                       b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       b"Sec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1\r\n\r\n", seconds=3)
    answers = _answers(got)  # was: a bodiless text/plain 403 from uvicorn's WebSocket handshake, past the Host check
    assert answers and answers[0][0] == status, got[:300]
    assert "WebSocket library" not in _logs(server)  # uvicorn's advice to install one is no operator's business


def test_expect_continue_over_the_limit_gets_413_without_inviting_the_body(server):
    got, _ = _exchange(server, b"POST /v1/predict HTTP/1.1\r\n" + HEAD + b"Expect: 100-continue\r\n"
                       b"Content-Length: 5000000\r\n\r\n", seconds=3)
    assert not got.startswith(b"HTTP/1.1 100") and got.startswith(b"HTTP/1.1 413"), got[:200]
    assert "--max-body-mb" in _answers(got)[0][1]["error"]["message"]


def test_the_real_access_log_cannot_be_forged_by_a_path_or_a_forwarded_address(server):
    got, _ = _exchange(server, b"GET /x%0D%0ACRITICAL%20forged%22 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"X-Forwarded-For: 6.6.6.6 \"spoofed\r\nConnection: close\r\n\r\n", seconds=3)
    assert _answers(got)[0][0] == 404
    time.sleep(0.3)
    lines = [x for x in _logs(server).splitlines() if "forged" in x]
    assert len(lines) == 1 and lines[0].startswith("INFO:"), lines  # was: a second line "CRITICAL forged" 404 ..."
    assert '\\r\\nCRITICAL forged\\"' in lines[0] and '6.6.6.6 \\"spoofed' in lines[0], lines[0]


def test_ctrl_c_twice_under_load_answers_everyone_in_json_without_a_traceback(server):
    base = server["base"]
    note = f"{SECRET} chest pain, hypertension, atrial fibrillation; cardiac catheterization. " * 150
    threads, results, transport = start_load(base, note, clients=8, notes=48)
    time.sleep(0.5)
    for _ in range(5):  # /metrics stays answered while the scorer is busy
        t0 = time.monotonic()
        assert httpx.get(base + "/metrics", timeout=5).status_code == 200
        assert time.monotonic() - t0 < 3
    server["proc"].send_signal(signal.SIGINT)
    time.sleep(0.3)
    server["proc"].send_signal(signal.SIGINT)  # "(CTRL+C to force quit)", uvicorn's log says
    for t in threads:
        t.join(90)
    assert not transport and len(results) == 8, transport
    for status, ctype, text in results:
        assert status in (200, 503) and ctype.startswith("application/json"), (status, text[:200])
        assert status == 200 or "shutting down" in json.loads(text)["error"]["message"]
    assert server["proc"].wait(60) == 0
    logs = _logs(server)
    assert "Traceback" not in logs and "ERROR" not in logs, logs[-3000:]  # was: the lifespan's CancelledError
    assert SECRET not in logs
