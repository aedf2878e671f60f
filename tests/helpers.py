"""Helpers shared by test modules: the CLI's one-line failure contract and byte-level snapshots of folders."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
