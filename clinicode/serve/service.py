"""The state one app shares across requests (`Service`: model, batcher, readiness, draining, admission, metrics), and
`ServiceDep`, the dependency through which routes reach it (`app.state.service`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Annotated, Any, Callable, Iterator

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool

from clinicode import __version__
from clinicode.fhir import code_systems, predictor_source
from clinicode.predict import Predictor
from clinicode.serve.batcher import Batcher, ShuttingDown
from clinicode.serve.metrics import Metrics
from clinicode.serve.parsing import BadRequest, Limits, read_body

log = logging.getLogger("clinicode.serve")


class Service:
    """The state one app shares across requests: the model (once loaded), its batcher, readiness, draining, the
    count of admitted requests, and the metrics.

    LOAD, when given, makes the Predictor in a thread once the app starts (`start`); ON_LOADED is called with it once
    it is served (never when a stop began while it loaded), ON_LOAD_FAILURE with LOAD's exception."""

    def __init__(self, limits: Limits, *, load: Callable[[], Predictor] | None = None,
                 on_loaded: Callable[[Predictor], None] | None = None,
                 on_load_failure: Callable[[BaseException], None] | None = None) -> None:
        self.limits = limits
        self.predictor: Predictor | None = None
        self.info: dict[str, Any] = {}
        self.identity: list[tuple[bytes, bytes]] = []   # headers naming the checkpoint, on every answer once loaded
        self.source: dict[str, Any] | None = None
        self.systems: dict[str, tuple[str, str]] = {}
        self.family: Any = None                         # the checkpoint's code system, for its suggested codes (#43)
        self.batcher: Batcher | None = None
        self.failed: BaseException | None = None
        self.draining = False
        self.pending = 0
        self.reading = 0  # bytes of request bodies being read (not yet admitted)
        self.metrics = Metrics()
        self._load, self._on_loaded, self._on_load_failure = load, on_loaded, on_load_failure
        self._lock = threading.Lock()
        # orders "start serving" (a load ending) and "start stopping" (`drain`); reentrant: a second signal may
        # arrive while the first one's handler holds it
        self._stage = threading.RLock()

    def load(self, predictor: Predictor) -> None:
        self.source = predictor_source(predictor)
        name, sha = self.source["name"], self.source["checkpoint_sha256"]
        self.systems = code_systems(predictor.codes, predictor.code_system)
        self.family = predictor.code_system
        self.info = {"model": predictor.kind, "name": name, "n_codes": len(predictor.codes), "checkpoint_sha256": sha,
                     "clinicode_version": __version__}
        self.identity = [(b"x-clinicode-checkpoint", sha.encode()), (b"x-clinicode-model", predictor.kind.encode()),
                         (b"x-clinicode-version", __version__.encode())]
        self.batcher = Batcher(predictor, max_notes=self.limits.batch_notes, wait_ms=self.limits.batch_wait_ms)
        self.predictor = predictor  # last: readiness is "predictor is set"

    @property
    def ready(self) -> bool:
        return self.predictor is not None and self.batcher is not None and self.batcher.alive() and not self.draining

    def start(self) -> None:
        """The app starts: without a model yet, LOAD makes it in a thread (meanwhile /ready and the scoring routes
        answer 503)."""
        if self.predictor is None and self._load is not None:
            threading.Thread(target=self._background_load, name="clinicode-load", daemon=True).start()

    def stop(self) -> None:
        """The app stops: the micro-batching worker stops with it."""
        if self.batcher is not None:
            self.batcher.stop()

    def _background_load(self) -> None:
        try:
            self.serve_loaded(self._load(), self._on_loaded)
        except BaseException as err:  # reported by the caller in one line
            self.failed = err
            log.error("the model could not be loaded: %s", err)
            if self._on_load_failure is not None:
                self._on_load_failure(err)

    def serve_loaded(self, predictor: Predictor, announce: Callable[[Predictor], None] | None = None) -> bool:
        """Serve PREDICTOR (a load just ended) and call ANNOUNCE with it, unless a stop has begun: then the model is
        dropped, nothing is announced, and the answer is False. One lock orders this against `drain`, so "serving"
        is never announced after "stopping"."""
        with self._stage:
            if self.draining:
                log.info("the model finished loading after the stop began; it is not served")
                return False
            self.load(predictor)
            if announce is not None:
                announce(predictor)
            return True

    def drain(self, announce: Callable[[], None] | None = None) -> None:
        """Start a graceful stop: new requests get 503; admitted ones are scored for `grace` seconds, then the ones
        still waiting are answered with 503 (the batch being scored finishes). ANNOUNCE (the "stopping" line) is
        called first, under the lock `serve_loaded` takes."""
        with self._stage:
            if self.draining:
                return
            self.draining = True
            if announce is not None:
                announce()
            b = self.batcher
        if b is not None:
            timer = threading.Timer(self.limits.grace, b.refuse_waiting)
            timer.daemon = True
            timer.start()

    async def read(self, request: Any) -> bytes:
        """REQUEST's body, read before the request is admitted (`admitted`), so clients slow to send their bodies hold
        no place in the queue: each is bounded by `--read-timeout` and `--max-body-mb`, and the bytes of all bodies
        being read at once by `max_pending` x `max_body_bytes` (a body that would pass it gets 503). A client sending
        slowly holds only the bytes it has sent."""
        budget = self.limits.max_pending * self.limits.max_body_bytes
        held = [0]

        def take(n: int) -> None:
            with self._lock:
                if self.reading + n > budget:
                    raise BadRequest(503, f"the server is busy reading other requests ({self.reading:,} bytes of "
                                          f"bodies, the limit of --max-pending x --max-body-mb); retry in a second.",
                                     headers={"Retry-After": "1", "Connection": "close"})
                self.reading += n
                held[0] += n

        try:
            return await read_body(request, self.limits.max_body_bytes, self.limits.read_timeout, take)
        finally:
            with self._lock:
                self.reading -= held[0]

    @contextlib.contextmanager
    def admitted(self) -> Iterator[None]:
        """Count a request for the bounded queue: at `max_pending` requests, the next gets 503 with Retry-After. A
        request is counted once its body is read (`read`)."""
        with self._lock:
            if self.pending >= self.limits.max_pending:
                raise BadRequest(503, f"the server is busy: {self.pending:,} requests are being scored "
                                      f"(--max-pending {self.limits.max_pending:,}); retry in a second.",
                                 headers={"Retry-After": "1"})
            self.pending += 1
        try:
            yield
        finally:
            with self._lock:
                self.pending -= 1

    def scorer(self) -> Batcher:
        """The batcher, or a 503 while the model loads (or after it failed to)."""
        if self.predictor is None or self.batcher is None:
            if self.failed is not None:
                raise BadRequest(503, "the model could not be loaded; see the server's log.")
            raise BadRequest(503, "the model is still loading; retry in a few seconds (GET /ready answers 200 once "
                                  "it is loaded).", headers={"Retry-After": "2"})
        return self.batcher

    async def score(self, notes: list[dict[str, Any]], opts: dict[str, Any]) -> list[dict[str, Any]]:
        """NOTES scored with OPTS by the micro-batching worker: predict's records, in order."""
        b = self.scorer()
        with b.arriving():  # tokenised in a thread meanwhile; the worker may wait for this job to batch it
            prepared = await run_in_threadpool(b.predictor.prepare, [n["text"] for n in notes],
                                               ids=[n["id"] for n in notes], explain=opts["explain"])
            fut = b.submit(prepared, top_k=opts["top_k"], threshold=opts["threshold"], explain=opts["explain"])
        try:
            return await asyncio.wrap_future(fut)
        except ShuttingDown:
            raise BadRequest(503, "the server is shutting down and could not score this request in its grace "
                                  "period; retry.", headers={"Retry-After": "5", "Connection": "close"}) from None


async def current(request: Request) -> Service:
    """The app's `Service` (a FastAPI dependency: routes take `svc: ServiceDep`). Async, so FastAPI calls it on the
    event loop; a plain function would be run in its thread pool, which took ~400 us a request."""
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(current)]
