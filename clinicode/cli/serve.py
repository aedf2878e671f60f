"""`clinicode serve`: a checkpoint served over HTTP (`clinicode.serve.run`); its limits are one typed group,
ServeConfig's fields."""

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from clinicode.cli.options import given, opt, option_groups
from clinicode.cli.root import friendly
from clinicode.config import ServeConfig as _S, TrainConfig, default_of


@dataclass(frozen=True, kw_only=True)
class ServeLimits:
    """What one request, one batch and one connection may take, and the names the service answers to."""

    max_notes: Annotated[Optional[int], opt("Notes per request (more: 413).", default_of(_S, "max_notes"))] = None
    max_text_chars: Annotated[Optional[int], opt("Characters per note (more: 413).",
                                                 default_of(_S, "max_text_chars"))] = None
    max_body_mb: Annotated[Optional[float], opt("Request body size in MB (more: 413).",
                                                default_of(_S, "max_body_mb"))] = None
    batch_notes: Annotated[Optional[int], opt("Notes of concurrent requests scored together at most.",
                                              default_of(_S, "batch_notes"))] = None
    batch_wait_ms: Annotated[Optional[float], opt("How long the scorer waits for more notes to batch (ms).",
                                                  default_of(_S, "batch_wait_ms"))] = None
    max_pending: Annotated[Optional[int], opt("Requests being read or scored at once (more: 503, Retry-After).",
                                              default_of(_S, "max_pending"))] = None
    read_timeout: Annotated[Optional[float], opt("Seconds for a request's head and body to arrive (slow: 408).",
                                                 default_of(_S, "read_timeout"))] = None
    idle_timeout: Annotated[Optional[float], opt("Seconds an idle keep-alive connection stays open.",
                                                 default_of(_S, "idle_timeout"))] = None
    write_timeout: Annotated[Optional[float], opt("Seconds an answer may wait for its client to read it (then the "
                                                  "connection is closed).", default_of(_S, "write_timeout"))] = None
    grace: Annotated[Optional[float], opt("Seconds SIGTERM/SIGINT give admitted requests before 503.",
                                          default_of(_S, "grace"))] = None
    allow_host: Annotated[Optional[list[str]],
                          typer.Option(help="Host name to answer besides loopback and --host (repeat; '*': any).")
                          ] = None
    allow_origin: Annotated[Optional[list[str]],
                            typer.Option(help="Browser origin allowed to call the service, e.g. "
                                              "https://coding.example.org (repeat; '*': any).")] = None

    def config(self) -> _S:
        """The ServeConfig: the limits given, the rest config.py's defaults."""
        return _S(**given(max_notes=self.max_notes, max_text_chars=self.max_text_chars, max_body_mb=self.max_body_mb,
                          batch_notes=self.batch_notes, batch_wait_ms=self.batch_wait_ms,
                          max_pending=self.max_pending, read_timeout=self.read_timeout,
                          idle_timeout=self.idle_timeout, write_timeout=self.write_timeout, grace=self.grace,
                          allow_hosts=tuple(self.allow_host) if self.allow_host else None,
                          allow_origins=tuple(self.allow_origin) if self.allow_origin else None))


def _ready(pred: Any, secured: bool, url: str) -> None:
    typer.echo(f"serving {len(pred.codes):,} codes from {pred.checkpoint.path} on {url} "
               f"({'bearer token required' if secured else 'no token: loopback only'}); docs at /docs", err=True)


@friendly
@option_groups
def serve_cli(
    *,
    checkpoint: Annotated[Path, typer.Option(help="Run folder (or its checkpoint/) from `clinicode train`.")],
    host: Annotated[str, typer.Option(help="Address to bind; anything but loopback needs --token-file.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    token_file: Annotated[Optional[Path],
                          typer.Option(help="File (mode 600) holding the bearer token every "
                                            "route but /health requires.")] = None,
    limits: ServeLimits,
    device: Annotated[Optional[str], opt("auto, cpu or cuda.", default_of(TrainConfig, "device"))] = None,
    http: Annotated[str, typer.Option(help="HTTP/1.1 parser: auto (httptools, compiled, when installed; else h11), "
                                           "httptools or h11.")] = "auto",
) -> None:
    """Serve a checkpoint over HTTP: JSON records and FHIR R4 Bundles (docs/serve.md). Exit status: 0 after SIGTERM or
    Ctrl-C, 1 for a bad option, token file, checkpoint, address or busy port, 2 for a malformed command line."""
    from clinicode.serve import run

    run(checkpoint, host=host, port=port, token_file=token_file, limits=limits.config(), on_ready=_ready, http=http,
        **given(device=device))
