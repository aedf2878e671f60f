"""The HTTP/1.1 protocol the server speaks: uvicorn's (httptools, compiled, when installed; else h11), with a deadline
for a request's head and one for its answer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
from typing import Any

log = logging.getLogger("clinicode.serve")


MAX_HEAD = 16 * 1024  # request line and headers, as h11's default bound (`send_400_response` names it)
_SMUGGLING = "the request has both Transfer-Encoding and Content-Length; send one of them."
# RFC 9112 section 3.2: a request with more than one Host header, or an HTTP/1.1 one with none, is a 400. h11 refuses
# both while parsing, httptools passes them on (the app refuses them then, `gate._Front`): one answer either way.
DUPLICATE_HOST = ("the request has more than one Host header (a proxy may route by another than the one this server "
                  "checks); send exactly one.")
MISSING_HOST = "an HTTP/1.1 request must have a Host header naming the server; send one (e.g. Host: 127.0.0.1:8000)."
_H11_REASONS = {"Found multiple Host: headers": DUPLICATE_HOST, "Missing mandatory Host: header": MISSING_HOST}


def compiled_available() -> bool:
    """Whether httptools (the compiled HTTP parser, llhttp) can be imported."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return False
    return True


def _protocol(read_timeout: float, write_timeout: float = 30.0, parser: str = "h11") -> type:
    """uvicorn's HTTP/1.1 protocol (PARSER: "h11", pure Python, or "httptools", llhttp compiled) with a deadline for a
    request's head (READ_TIMEOUT seconds) and one for its answer (WRITE_TIMEOUT seconds): `_Timed`. Both parsers
    answer a malformed request with the same JSON 400 and bound a request's head to 16 KB (h11 by its own limit; for
    httptools, which has none, by counting: `_HttpToolsBounds`)."""
    deadlines = {"read_timeout": read_timeout, "write_timeout": write_timeout}
    if parser != "httptools":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return type("Timed", (_H11Reasons, _Timed, H11Protocol), deadlines)
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    return type("TimedHttpTools", (_HttpToolsBounds, _Timed, HttpToolsProtocol),
                {**deadlines, "parser_upgrade": httptools.HttpParserUpgrade, "parser_error": httptools.HttpParserError})


class _Timed:
    """uvicorn's HTTP/1.1 protocol (a subclass made by `_protocol`) with a deadline for a request's head: a connection
    whose request line and headers have not all arrived within `read_timeout` seconds of its first byte (or of the
    connection) is closed. uvicorn times only idle keep-alive connections; a half-sent request would be held forever.

    And one for answers: a connection whose answer has waited `write_timeout` seconds in the server's send buffer (the
    client does not read it, or too slowly) is reset. uvicorn waits for such a client forever, even to close the
    connection (asyncio's close first sends what is buffered), and a graceful stop waits for it too. A malformed
    request gets a JSON 400."""

    read_timeout: float = 30.0
    write_timeout: float = 30.0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._write_deadline = 0.0
        self._lost = False
        self._arm()

    def _watch_writes(self) -> None:
        """Start the answer's deadline when bytes wait in the send buffer (checked until they are all sent)."""
        if self._write_timer is None and not self._lost and self.transport.get_write_buffer_size() > 0:
            self._write_deadline = self.loop.time() + self.write_timeout
            self._write_timer = self.loop.call_later(min(0.25, self.write_timeout), self._check_writes)

    def _check_writes(self) -> None:
        self._write_timer = None
        if self._lost or self.transport.get_write_buffer_size() == 0:
            return  # all sent: the next answer gets its own deadline
        left = self._write_deadline - self.loop.time()
        if left > 0:
            self._write_timer = self.loop.call_later(min(0.25, left), self._check_writes)
            return
        log.info("closed a connection whose client did not read its answer within %g s (--write-timeout)",
                 self.write_timeout)
        with contextlib.suppress(OSError, AttributeError):  # a reset: the kernel drops what it still holds too
            self.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                               struct.pack("ii", 1, 0))
        self.transport.abort()

    def pause_writing(self) -> None:  # the send buffer is over its high-water mark
        super().pause_writing()
        self._watch_writes()

    def on_response_complete(self) -> None:
        self._watch_writes()
        self._disarm()      # idle now: uvicorn's keep-alive timeout (--idle-timeout) takes over
        super().on_response_complete()

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.read_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        self._feed(data)
        if self.cycle is not cycle:
            self._disarm()  # a request's head arrived: the app times its body (read_body)
        elif self.cycle is None or self.cycle.response_complete:
            self._arm()     # bytes of the next request's head: it must be complete in time

    def _feed(self, data: bytes) -> None:
        super().data_received(data)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            log.info("closed a connection whose request head did not arrive within %g s (--read-timeout)",
                     self.read_timeout)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._disarm()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().connection_lost(exc)

    def _unsupported_upgrade_warning(self) -> None:  # uvicorn's would advise installing a WebSocket library
        log.info("an Upgrade request (WebSocket, h2c) is answered as plain HTTP; this service speaks HTTP/1.1 only")

    def send_400_response(self, msg: str) -> None:  # a malformed request: JSON too, not uvicorn's plain text
        msg = _H11_REASONS.get(getattr(self, "_reason", ""), msg)  # h11's reason, kept by `_H11Reasons`
        message = msg if msg in (_SMUGGLING, DUPLICATE_HOST, MISSING_HOST) else (
            "malformed HTTP request (bad request line or headers, or headers over 16 KB); send an HTTP/1.1 "
            "request.")
        body = json.dumps({"error": {"status": 400, "message": message}}).encode()
        self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: "
                             + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
        self.transport.close()


class _H11Reasons:
    """The h11 side: uvicorn answers every request h11 refuses "Invalid HTTP request received."; h11's reason is kept
    here, so a request with two Host headers or none is answered as under httptools (`DUPLICATE_HOST`, `MISSING_HOST`,
    by `_Timed.send_400_response`).
    """

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._reason = ""
        conn = self.conn
        next_event = conn.next_event

        def kept() -> Any:
            try:
                return next_event()
            except Exception as err:  # h11.RemoteProtocolError: the request is malformed
                self._reason = str(err)
                raise

        conn.next_event = kept


class _HttpToolsBounds:
    """The httptools side: its parser has no bound on a head's size (counted here, as h11 does: 16 KB), stops
    at an Upgrade header (the request is then read on as plain HTTP), and reads an absolute-form target as its
    path alone (its authority is kept in `raw_path` for the app's Host check)."""

    parser_upgrade: type[Exception]  # httptools.HttpParserUpgrade and HttpParserError, set by `_protocol`
    parser_error: type[Exception]

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._head_bytes = self._head_raw = 0  # the head's url and headers; the bytes fed while in it
        self._in_head = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes, self._head_raw = True, 0, 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._count(len(name) + len(value) + 4)

    def _count(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > MAX_HEAD:
            raise ValueError("head over 16 KB")  # httptools: HttpParserCallbackError, answered with a 400

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()
        target = self.url.partition(b"?")[0]
        if target[:8].lower().startswith((b"http://", b"https://")) and self.scope.get("path") is not None:
            self.scope["raw_path"] = target  # the app reads the authority (gate._absolute_form)

    def _feed(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self.parser is None:
            return
        if self._in_head and self._head_raw > MAX_HEAD:  # one header growing inside httptools, never complete
            self.send_400_response("head over 16 KB")
            return
        try:
            self.parser.feed_data(data)
        except self.parser_upgrade:
            self._unsupported_upgrade_warning()
            self._after_upgrade(data)
        except self.parser_error as err:
            self.send_400_response(_SMUGGLING if "Transfer-Encoding can't be present with Content-Length"
                                   in str(err) else str(err))
            return
        if self._in_head:
            self._head_raw += len(data)

    def _after_upgrade(self, data: bytes) -> None:
        """After an Upgrade head (no WebSocket here) the parser stops reading; what follows the head in DATA, and
        later data, would be lost: the request is answered and the connection closed after it."""
        if self.cycle is not None:
            self.cycle.keep_alive = False
            if not self.cycle.response_complete:
                self.cycle.more_body = False
                self.cycle.message_event.set()
        self.parser = _Closed()


class _Closed:
    """A parser that ignores what it is fed: the connection closes after its current answer."""

    def feed_data(self, data: bytes) -> None:
        pass
