"""Start the app with `streamlit run` on a free loopback port, for tests, screenshots and benchmarks.

Not part of the app itself (no page imports it); stdlib only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# the flags Debian's chromium needs here: no sandbox as root, no background networking on a closed network
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(runs: Path, *, timeout: float = 90.0) -> Iterator[str]:
    """Run the app with CLINICODE_RUNS=runs; yields its URL once /_stcore/health answers, always stops it.

    Raises:
        RuntimeError: the server exited or did not become healthy within `timeout` seconds.
    """
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app_streamlit/main.py", "--server.headless=true",
         "--server.address=127.0.0.1", f"--server.port={port}", "--browser.gatherUsageStats=false",
         "--server.fileWatcherType=none"],
        cwd=ROOT, env={**os.environ, "CLINICODE_RUNS": str(Path(runs).resolve())},
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not become healthy on port {port} (exit code {proc.poll()})")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
