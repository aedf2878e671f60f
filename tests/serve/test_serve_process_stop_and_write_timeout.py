"""`clinicode serve` as a real process (#36): a stop requested while the model is still loading, and a client that
sends a request and never reads the answer. On 127.0.0.1 with short timeouts; every wait is bounded."""

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")


from tests.helpers import SECRET, serve_process  # noqa: E402

pytestmark = pytest.mark.slow

# `clinicode serve` whose model load, once done, returns only when the file argv[1] exists (at most 60 s later), so a
# test can signal the process while the model is still loading and let the load end right after; everything else is
# the real command line.
SLOW_LOAD = """
import os, sys, time
import clinicode.predict as p
real, go = p.Predictor.from_checkpoint.__func__, sys.argv[1]
def slow(cls, *a, **kw):
    predictor = real(cls, *a, **kw)
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.02)
    return predictor
p.Predictor.from_checkpoint = classmethod(slow)
from clinicode.cli import main
sys.argv = ["clinicode", *sys.argv[2:]]
main()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_while_the_model_loads_exits_0_and_never_announces_serving(tiny_run, tmp_path, sig):
    port, go = _free_port(), tmp_path / "go"
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", SLOW_LOAD, str(go), "serve", "--checkpoint", str(tiny_run),
                                 "--port", str(port), "--device", "cpu"], stdout=log, stderr=subprocess.STDOUT,
                                env={"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1",
                                     "TOKENIZERS_PARALLELISM": "false"})
        try:
            deadline = time.monotonic() + 60
            while True:  # listening, and the model still loading
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "the server never answered /health"
                try:
                    if httpx.get(base + "/health", timeout=2).json()["status"] == "loading":
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            proc.send_signal(sig)
            go.touch()  # the model finishes loading just after the stop was asked for, while the server stops
            status = proc.wait(30)
        finally:
            go.touch()
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    logs = log_path.read_text(encoding="utf-8", errors="replace")
    assert status == 0, logs
    assert "stopping" in logs, logs
    assert "serving " not in logs, logs  # was: "serving 50 codes ..." after "stopping"
    assert "Traceback" not in logs and "ERROR" not in logs, logs


@pytest.fixture(scope="module")
def server(tiny_run, tmp_path_factory):
    with serve_process(tiny_run, tmp_path_factory.mktemp("serve-followup"), "--write-timeout", "2", "--idle-timeout",
                       "1", "--read-timeout", "5") as srv:
        yield srv


def _logs(server) -> str:
    return server["log"].read_text(encoding="utf-8", errors="replace")


def test_a_client_that_never_reads_its_answer_is_dropped_after_the_write_timeout(server, note):
    base, dropped = server["base"], "did not read its answer within 2 s (--write-timeout)"
    # every code of 64 notes as a Condition with 20 evidence spans: megabytes, more than the socket buffers hold
    url = "/v1/predict?format=fhir&threshold=0&explain=20"
    body = json.dumps({"notes": [{"id": f"n{i}", "text": f"{SECRET} {note}"} for i in range(64)]}).encode()
    head = (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (url.encode(), len(body)))
    t0 = time.monotonic()
    r = httpx.post(base + url, content=body, headers={"content-type": "application/json"}, timeout=60)
    took = time.monotonic() - t0  # to score and send it
    assert r.status_code == 200 and len(r.content) > 5_000_000, len(r.content)  # Linux: 4 MB at most
    size = len(r.content)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a tiny window, and then never read
    s.settimeout(10)
    s.connect(("127.0.0.1", server["port"]))
    try:
        s.sendall(head + body)
        t0 = time.monotonic()
        while dropped not in _logs(server):  # was: held open as long as the client lived
            assert time.monotonic() - t0 < took + 2 + 8, _logs(server)[-2000:]  # scored, then 2 s to be read
            t = time.monotonic()  # meanwhile everyone else is served
            assert httpx.get(base + "/health", timeout=5).json()["status"] == "ok"
            assert time.monotonic() - t < 3
            time.sleep(0.2)
        got, reset = b"", False
        try:
            while chunk := s.recv(1 << 20):
                got += chunk
        except ConnectionResetError:
            reset = True
        assert reset or len(got) < size  # the connection is gone, the answer cut short
    finally:
        s.close()
    r = httpx.post(base + "/v1/predict", json={"notes": [{"text": note}]}, timeout=60)
    assert r.status_code == 200 and r.json()["results"][0]["id"] == "0"
    logs = _logs(server)
    assert "Traceback" not in logs and "ERROR" not in logs and SECRET not in logs, logs[-3000:]
