"""`clinicode serve` as a real process, the cases the second hostile round left open (issue #36): a stop requested
while the model is still loading, and a client that sends a request and never reads the answer. On 127.0.0.1 with
short timeouts; every wait is bounded."""

import signal
import socket
import subprocess
import sys
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")


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
