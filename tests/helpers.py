"""Helpers shared by test modules: the CLI's one-line failure contract, byte-level snapshots of folders, and a real
`clinicode serve` process with clients that load it."""

from __future__ import annotations

import hashlib
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from typer.testing import CliRunner

from clinicode.cli import app

SECRET = "SECRETNOTETEXT"  # planted in bad inputs; must never reach an error message


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # newer Click keeps stderr separate by default
        return CliRunner()


def fails(args: list, message: str):
    """Run the CLI; assert exit status 1, exactly one stderr line `error: ...` holding MESSAGE, no traceback."""
    res = runner().invoke(app, [str(a) for a in args])
    assert isinstance(res.exception, SystemExit), f"uncaught {res.exception!r}"
    assert res.exit_code == 1, (res.exit_code, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert message in lines[0], (message, lines[0])
    assert SECRET not in res.stderr
    return res


def succeeds(args: list):
    res = runner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (res.exception, res.stderr)
    return res


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ROOT (hidden ones too) -> SHA-256 of its bytes and its mode ('dir' for folders)."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = f"link->{p.readlink()}"
        elif p.is_dir():
            out[rel] = f"dir {oct(p.stat().st_mode & 0o777)}"
        elif not p.is_file():  # a FIFO, socket or device: its kind and mode, never its "bytes" (reading could block)
            out[rel] = f"special {oct(p.stat().st_mode)}"
        else:
            out[rel] = f"{hashlib.sha256(p.read_bytes()).hexdigest()} {oct(p.stat().st_mode & 0o777)}"
    return out


def wait_ready(proc, base: str, log: Path, *, seconds: float = 90) -> None:
    """Poll a `clinicode serve` process until its /ready answers 200 (the model is loaded); fail with its log if it
    exits first, or after SECONDS."""
    import time

    import httpx

    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(base + "/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, f"server not ready within {seconds:.0f} s"
        time.sleep(0.3)


@contextmanager
def serve_process(checkpoint: Path, folder: Path, *options: str, address: str = "127.0.0.1",
                  stop: int | None = None) -> Iterator[dict]:
    """A real `clinicode serve CHECKPOINT OPTIONS` on a free port of loopback ADDRESS ('::1' for IPv6), its output in
    FOLDER/server.log, ready (model loaded) when this yields {"base", "proc", "log", "port"}. At the end a process
    still running gets signal STOP and 30 s to exit (None: killed)."""
    import os
    import socket
    import subprocess
    import sys

    v6 = ":" in address
    with socket.socket(socket.AF_INET6 if v6 else socket.AF_INET) as s:
        s.bind((address, 0))
        port = s.getsockname()[1]
    host = f"[{address}]" if v6 else address
    base = f"http://{host}:{port}"
    log_path = folder / "server.log"
    with open(log_path, "w+b") as log:
        proc = subprocess.Popen([sys.executable, "-m", "clinicode", "serve", "--checkpoint", str(checkpoint),
                                 "--host", host, "--port", str(port), "--device", "cpu", *options],
                                stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"})
        try:
            wait_ready(proc, base, log_path)
            yield {"base": base, "proc": proc, "log": log_path, "port": port}
        finally:
            if proc.poll() is None:
                if stop is None:
                    proc.kill()
                else:
                    proc.send_signal(stop)
                proc.wait(30)


def start_load(base: str, note: str, *, clients: int, notes: int) -> tuple[list, list, list]:
    """CLIENTS threads, each POSTing one request of NOTES copies of NOTE (explain 3) to BASE/v1/predict.

    Returns:
        (threads, results, transport): the started threads; each answer as (status, content type, body); each
        transport error's repr (a reset or refused connection).
    """
    import threading

    import httpx

    results: list = []
    transport: list = []

    def client(i: int) -> None:
        try:
            with httpx.Client(timeout=60) as c:
                body = {"notes": [{"id": f"{i}-{j}", "text": note} for j in range(notes)], "explain": 3}
                r = c.post(base + "/v1/predict", json=body)
                results.append((r.status_code, r.headers.get("content-type", ""), r.text))
        except httpx.TransportError as err:
            transport.append(repr(err))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    return threads, results, transport


def read_until_closed(s: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """(whether the server closed or reset the connection within SECONDS, what it sent before)."""
    s.settimeout(seconds)
    got, t0 = b"", time.monotonic()
    try:
        while time.monotonic() - t0 < seconds:
            chunk = s.recv(65536)
            if not chunk:
                return True, got
            got += chunk
    except (TimeoutError, socket.timeout):
        return False, got
    except ConnectionResetError:
        return True, got
    return False, got
