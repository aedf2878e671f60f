"""Start-up checks and running: the token file, the address (bound before the model loads), uvicorn with the timed
protocol, and the graceful stop on SIGTERM or SIGINT (`run`)."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import logging
import os
import signal
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

from clinicode.checkpoint import resolve_checkpoint_dir
from clinicode.errors import ClinicodeError, ConfigError
from clinicode.predict import Predictor
from clinicode.serve.app import create_app
from clinicode.serve.parsing import Limits
from clinicode.serve.protocol import _protocol, compiled_available
from clinicode.serve.service import Service

log = logging.getLogger("clinicode.serve")


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(path: Path) -> str:
    """The bearer token in PATH, refused unless PATH is itself (not a link to) a regular file only its owner may
    read."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ConfigError(f"--token-file {path}: not found; write a long random token into it (e.g. "
                          "`python -c 'import secrets; print(secrets.token_urlsafe(32))' > "
                          f"{path}; chmod 600 {path}`).") from None
    except OSError as err:
        raise ConfigError(f"--token-file {path}: cannot be examined ({err.strerror}); give a file you may "
                          "read.") from None
    if stat.S_ISLNK(st.st_mode):  # never advise chmod on, nor read, whatever a link points to
        raise ConfigError(f"--token-file {path}: is a symbolic link; give the token file itself (a regular file of "
                          "mode 600 that you own), not a link to it.")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"--token-file {path}: not a regular file; give the file holding the token.")
    if os.name == "posix" and st.st_mode & 0o077:
        raise ConfigError(f"--token-file {path}: mode {stat.S_IMODE(st.st_mode):03o} lets others read or change it; "
                          f"run `chmod 600 {path}`.")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise ConfigError(f"--token-file {path}: cannot be read ({err.strerror}); run the server as the file's owner "
                          "or give a token file it may read.") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped since the check
            raise ConfigError(f"--token-file {path}: not a regular file; give the file holding the token.")
        raw = f.read(4097)
    if len(raw) > 4096:  # was cut at 4,096 bytes: clients sending the whole token were refused with no clue why
        raise ConfigError(f"--token-file {path}: is over 4,096 bytes; write one token of 16 to 4,096 characters.")
    try:
        token = raw.decode("utf-8-sig").strip()  # a byte-order mark (some editors write one) is no part of the token
    except UnicodeDecodeError:
        raise ConfigError(f"--token-file {path}: is not UTF-8 text; write the token as one line.") from None
    if len(token) < 16 or any(c.isspace() for c in token):
        raise ConfigError(f"--token-file {path}: expected one token of at least 16 characters without spaces; "
                          "e.g. from `python -c 'import secrets; print(secrets.token_urlsafe(32))'`.")
    return token


def check_bind(host: str, token_file: Path | None) -> str | None:
    """The token to require (None: none), or ConfigError when a non-loopback host would be served without one."""
    if token_file is None:
        if not is_loopback(host):
            raise ConfigError(f"--host {host}: serving beyond this machine needs --token-file (a bearer token clients "
                              "must send); add one, or bind --host 127.0.0.1.")
        return None
    return read_token(token_file)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on HOST:PORT ('[::1]' and '::1' alike), or ConfigError in one line (busy port, unknown
    host, no permission), before the model is loaded."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: expected 0-65535.")
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as err:
        raise ConfigError(f"--host {host}: not an address or a name this machine can resolve ({err}); give an IP "
                          "address such as 127.0.0.1 or ::1.") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and name in ("::", ""):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as err:
        sock.close()
        how = ("another process listens there; stop it or choose another --port" if err.errno == errno.EADDRINUSE
               else "ports below 1024 need privileges; choose --port 1024 or above" if err.errno == errno.EACCES
               else "give an address of this machine, e.g. 127.0.0.1")
        raise ConfigError(f"cannot listen on {host} port {port}: {err.strerror}; {how}.") from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    addr, port = sock.getsockname()[:2]
    return f"http://[{addr}]:{port}" if ":" in addr else f"http://{addr}:{port}"


def http_parser(http: str) -> str:
    """The HTTP parser `--http` names: "httptools" (compiled) or "h11"; "auto": httptools when it is installed (the
    `serve` extra), else h11. ConfigError for another name or a missing library."""
    choice = http.strip().lower()
    if choice not in ("auto", "httptools", "h11"):
        raise ConfigError(f"--http {http[:20]!r}: expected auto, httptools or h11.")
    if choice == "h11":
        return "h11"
    if compiled_available():
        return "httptools"
    if choice == "httptools":
        raise ConfigError("--http httptools needs the httptools package; run `pip install "
                          "\"clinicode[serve]\"`, or choose --http h11.")
    return "h11"


def _log_config() -> dict[str, Any]:
    from uvicorn.config import LOGGING_CONFIG

    cfg = json.loads(json.dumps(LOGGING_CONFIG))
    cfg["loggers"]["clinicode"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return cfg


def run(checkpoint: Path, *, host: str = "127.0.0.1", port: int = 8000, token_file: Path | None = None,
        limits: Limits = Limits(), device: str = "auto", on_ready: Any = None, http: str = "auto") -> None:
    """Check the token and the checkpoint folder, bind HOST:PORT, then serve (uvicorn) while the checkpoint loads in a
    thread (/ready answers 503 until it has); SIGTERM or SIGINT stop it gracefully (`Service.drain`).

    Raises:
        ClinicodeError: a bad token file, checkpoint or address, a busy port, or a checkpoint that failed to load
            (the server then stops).
    """
    import uvicorn

    parser = http_parser(http)
    token = check_bind(host, token_file)
    resolve_checkpoint_dir(checkpoint)  # a wrong folder is named at once, before anything listens
    sock = bind_socket(host, port)
    url = url_of(sock)
    failure: list[BaseException] = []

    def load() -> Predictor:
        predictor = Predictor.from_checkpoint(checkpoint, device=device)
        predictor.suggester  # the candidates are indexed before /ready, not on the first request
        return predictor

    def loaded(predictor: Predictor) -> None:
        if on_ready:
            on_ready(predictor, token is not None, url)

    def load_failed(err: BaseException) -> None:
        failure.append(err)
        server.should_exit = True

    app = create_app(token=token, limits=limits, host=host, load=load, on_load_failure=load_failed,
                     on_loaded=loaded)
    # clinicode's own access log (client, method, path, status, time, request id): no bodies, headers or note text.
    # ws="none": no route takes a WebSocket, and uvicorn's handshake refusal would be a bodiless text/plain 403 that
    # passes the Host, Origin and token checks unseen; an Upgrade request is then answered as plain HTTP (JSON).
    config = uvicorn.Config(app, log_config=_log_config(), access_log=False, server_header=False, lifespan="on",
                            ws="none", http=_protocol(limits.read_timeout, limits.write_timeout, parser),
                            # asyncio's loop: uvloop saved no CPU a note here (#43's profile) and ran Python's
                            # signal handlers up to 0.1 s late
                            loop="asyncio",
                            timeout_keep_alive=int(max(1, limits.idle_timeout)),
                            timeout_graceful_shutdown=int(limits.grace) + 30)
    log.info("HTTP/1.1 parser: %s", "httptools (compiled)" if parser == "httptools" else "h11")
    server = _Server(config, app.state.service)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not failure and any(t.name == "clinicode-load" and t.is_alive() for t in threading.enumerate()):
        # stopped while the checkpoint loads: the server is down and wrote nothing; ending the interpreter under the
        # loading thread would tear torch's thread pool down beneath it (`terminate called ...`, status -6)
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)
    if failure:
        err = failure[0]
        raise err if isinstance(err, ClinicodeError) else ConfigError(
            f"--checkpoint {checkpoint}: could not be loaded ({type(err).__name__}: {err}).")


def _server_class() -> type:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server whose SIGTERM/SIGINT start a graceful drain (`Service.drain`) and end with exit status 0
        (uvicorn re-raises the signal after its shutdown, which would end the process with 143 or a traceback)."""

        def __init__(self, config: Any, service: Service) -> None:
            super().__init__(config)
            self.service = service
            self.ended_grace = False

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            old = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in old.items():
                    signal.signal(sig, handler)

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.should_exit and sig == signal.SIGINT:
                b = self.service.batcher
                if self.ended_grace or b is None:
                    self.force_exit = True  # a third Ctrl-C: stop at once (uvicorn's force quit)
                    return
                # a second Ctrl-C (uvicorn's log invites it): end the grace period now; waiting requests get their
                # 503 at once and the stop stays graceful (a force quit cancels the app and logs a traceback)
                log.info("stopping now: requests not yet scored get 503 (Ctrl-C again to force quit)")
                self.ended_grace = True
                b.refuse_waiting()
                return
            svc = self.service

            def announce() -> None:
                if svc.predictor is None:  # the load goes on in its thread; its end is never announced as serving
                    log.info("stopping while the model loads: it will not be served")
                else:
                    log.info("stopping: new requests get 503; admitted ones have %g s to be scored", svc.limits.grace)

            svc.drain(announce)
            self.should_exit = True

    return Server


def _Server(config: Any, service: Service) -> Any:  # a class made on first use: uvicorn loads lazily
    return _server_class()(config, service)
