"""The h11 protocol the server speaks: uvicorn's, with a deadline for a request's head and one for its answer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
from typing import Any

log = logging.getLogger("clinicode.serve")


def _protocol(read_timeout: float, write_timeout: float = 30.0) -> type:
    """uvicorn's h11 protocol with a deadline for a request's head: a connection whose request line and headers have
    not all arrived within READ_TIMEOUT seconds of its first byte (or of the connection) is closed. uvicorn times only
    idle keep-alive connections; a half-sent request would be held forever.

    And one for answers: a connection whose answer has waited WRITE_TIMEOUT seconds in the server's send buffer (the
    client does not read it, or too slowly) is reset. uvicorn waits for such a client forever, even to close the
    connection (asyncio's close first sends what is buffered), and a graceful stop waits for it too."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11(H11Protocol):
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
                self._write_deadline = self.loop.time() + write_timeout
                self._write_timer = self.loop.call_later(min(0.25, write_timeout), self._check_writes)

        def _check_writes(self) -> None:
            self._write_timer = None
            if self._lost or self.transport.get_write_buffer_size() == 0:
                return  # all sent: the next answer gets its own deadline
            left = self._write_deadline - self.loop.time()
            if left > 0:
                self._write_timer = self.loop.call_later(min(0.25, left), self._check_writes)
                return
            log.info("closed a connection whose client did not read its answer within %g s (--write-timeout)",
                     write_timeout)
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
                self._head_timer = self.loop.call_later(read_timeout, self._head_timed_out)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:
                self._disarm()  # a request's head arrived: the app times its body (read_body)
            elif self.cycle is None or self.cycle.response_complete:
                self._arm()     # bytes of the next request's head: it must be complete in time

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
                log.info("closed a connection whose request head did not arrive within %g s (--read-timeout)",
                         read_timeout)
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
            import h11

            body = json.dumps({"error": {"status": 400, "message": "malformed HTTP request (bad request line or "
                                         "headers, or headers over 16 KB); send an HTTP/1.1 request."}}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                       (b"connection", b"close")]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                          h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return TimedH11
