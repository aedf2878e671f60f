"""The FastAPI app: the state shared across requests (`Service`: model, batcher, readiness, draining, admission,
metrics) and `create_app` with its routes and error answers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from typing import Any, Callable, Iterator

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from clinicode import __version__
from clinicode.config import PREDICT
from clinicode.errors import DataFormatError
from clinicode.fhir import bundle, code_systems, note_from_document_reference, predictor_source
from clinicode.formats import SERVICE_ENVELOPE, WRITERS, service_formats
from clinicode.predict import Predictor
from clinicode.serve.batcher import Batcher, ShuttingDown
from clinicode.serve.gate import (
    _JSON_ROUTES,
    ANALYZE,
    FHIR_JSON,
    Gate,
    _Accept,
    _BearerAuth,
    _error,
    _Front,
    _loggable,
    check_content_type,
)
from clinicode.serve.metrics import Metrics
from clinicode.serve.parsing import (
    _OPTION_KEYS,
    ANALYZE_EXAMPLE,
    BadRequest,
    ClientGone,
    Limits,
    merge_options,
    parse_json,
    parse_predict,
    query_options,
    read_body,
)

log = logging.getLogger("clinicode.serve")


class Service:
    """The state one app shares across requests: the model (once loaded), its batcher, readiness, draining, the
    count of admitted requests, and the metrics."""

    def __init__(self, limits: Limits) -> None:
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


def create_app(predictor: Predictor | None = None, *, token: str | None = None, limits: Limits = Limits(),
               host: str = "127.0.0.1", load: Callable[[], Predictor] | None = None,
               on_load_failure: Callable[[BaseException], None] | None = None,
               on_loaded: Callable[[Predictor], None] | None = None) -> FastAPI:
    """The service around one Predictor: given, or made by LOAD in a thread once the app starts (meanwhile /ready and
    the scoring routes answer 503). Its micro-batching worker starts with the model and stops with the app.

    Args:
        host: the address the server is bound to (Host headers naming it are accepted; see `Gate`).
        on_load_failure: called with LOAD's exception (the CLI stops the server with it).
        on_loaded: called with LOAD's predictor once it is served (the CLI's "serving" line); never when a stop
            began while it loaded (`Service.serve_loaded`).
    """
    from contextlib import asynccontextmanager

    svc = Service(limits)
    if predictor is not None:
        svc.load(predictor)

    def background_load() -> None:
        try:
            svc.serve_loaded(load(), on_loaded)
        except BaseException as err:  # reported by the caller in one line
            svc.failed = err
            log.error("the model could not be loaded: %s", err)
            if on_load_failure is not None:
                on_load_failure(err)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if svc.predictor is None and load is not None:
            threading.Thread(target=background_load, name="clinicode-load", daemon=True).start()
        yield
        if svc.batcher is not None:
            svc.batcher.stop()

    app = FastAPI(title="clinicode", version=__version__, lifespan=lifespan, redirect_slashes=False,
                  redoc_url=None,  # one API page (/docs); ReDoc would fetch its script from a CDN
                  description="ICD code suggestions for clinical notes (LEAM). Suggestions are unconfirmed: a coder "
                              "reviews them. See docs/serve.md.")
    app.state.service = svc
    app.state.limits = limits

    def is_fhir(request: Request) -> bool:
        return request.url.path.startswith("/fhir/")

    @app.exception_handler(BadRequest)
    async def _bad(request: Request, err: BadRequest) -> JSONResponse:
        return _error(err.status, err.message, fhir=is_fhir(request), headers=err.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        path, method = request.url.path, request.method
        if err.status_code == 405:
            allowed = (err.headers or {}).get("Allow", "")
            msg = f"{method[:20]} is not allowed on {path[:80]}; use {allowed or 'another method'} (see /docs)."
        elif err.status_code == 404:
            msg = (f"no route {path[:80]}; the routes are /health, /ready, /metrics, /v1/predict and {ANALYZE} "
                   "(see /docs; no trailing slash).")
        else:
            msg = str(err.detail)[:200]
        return _error(err.status_code, msg, fhir=is_fhir(request), headers=err.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        where = ", ".join(".".join(str(x) for x in e.get("loc", ())) for e in err.errors()[:3])  # never the input
        return _error(422, f"invalid request at {where or 'the body'}; see /docs for the expected shape.",
                      fhir=is_fhir(request))

    @app.exception_handler(Exception)
    async def _bug(request: Request, err: Exception) -> JSONResponse:
        log.error("%s %s failed: %s (note text is not logged)", _loggable(request.method, 20),
                  _loggable(request.url.path), type(err).__name__)
        return _error(500, "the server failed on this request (a bug, logged without note text); please report it.",
                      fhir=is_fhir(request))

    def guarded(route: Any) -> Any:
        """An unexpected failure -> a 500 JSON answer and a log line naming only the exception's type (Starlette
        would re-raise it to uvicorn, whose traceback would print the exception's message); a client that hung up
        is logged as such, not as the server's error."""
        @functools.wraps(route)
        async def wrapper(request: Request) -> Any:
            try:
                return await route(request)
            except BadRequest:
                raise
            except ClientGone:
                log.info("%s %s: the client closed the connection before sending its whole request",
                         _loggable(request.method, 20), _loggable(request.url.path))
                return JSONResponse({"error": {"status": 499, "message": "client closed the connection"}},
                                    status_code=499)
            except Exception as err:
                return await _bug(request, err)
        return wrapper

    def scorer() -> Batcher:
        if svc.predictor is None or svc.batcher is None:
            if svc.failed is not None:
                raise BadRequest(503, "the model could not be loaded; see the server's log.")
            raise BadRequest(503, "the model is still loading; retry in a few seconds (GET /ready answers 200 once "
                                  "it is loaded).", headers={"Retry-After": "2"})
        return svc.batcher

    async def score(notes: list[dict[str, Any]], opts: dict[str, Any]) -> list[dict[str, Any]]:
        b = scorer()
        with b.arriving():  # tokenised in a thread meanwhile; the worker may wait for this job to batch it
            prepared = await run_in_threadpool(b.predictor.prepare, [n["text"] for n in notes],
                                               ids=[n["id"] for n in notes], explain=opts["explain"])
            fut = b.submit(prepared, top_k=opts["top_k"], threshold=opts["threshold"], explain=opts["explain"])
        try:
            return await asyncio.wrap_future(fut)
        except ShuttingDown:
            raise BadRequest(503, "the server is shutting down and could not score this request in its grace "
                                  "period; retry.", headers={"Retry-After": "5", "Connection": "close"}) from None

    @app.head("/health", include_in_schema=False)
    @app.get("/health", summary="Liveness and the loaded model (no token needed)")
    async def health() -> JSONResponse:
        b = svc.batcher
        if b is not None and not b.alive() and not svc.draining:
            return JSONResponse({**svc.info, "status": "scoring worker stopped"}, status_code=503)
        status = ("shutting down" if svc.draining else "ok" if svc.predictor is not None
                  else "failed to load" if svc.failed is not None else "loading")
        return JSONResponse({"status": status, **svc.info, "notes_scored": b.scored if b else 0,
                             "batches": b.batches if b else 0})

    @app.head("/ready", include_in_schema=False)
    @app.get("/ready", summary="Readiness: 200 once the model is loaded (no token)")
    async def ready() -> JSONResponse:
        if svc.ready:
            return JSONResponse({"status": "ready", **svc.info})
        why = ("shutting down" if svc.draining else "failed to load" if svc.failed is not None
               else "loading" if svc.predictor is None else "scoring worker stopped")
        return JSONResponse({"status": why}, status_code=503, headers={"Retry-After": "2"})

    @app.head("/metrics", include_in_schema=False)
    @app.get("/metrics", summary="Prometheus metrics (text format 0.0.4)")
    async def metrics() -> PlainTextResponse:
        b = svc.batcher
        text = svc.metrics.text(scored=b.scored if b else 0, batches=b.batches if b else 0,
                                failures=b.failures if b else 0, pending=svc.pending, ready=svc.ready)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/predict", summary="Score notes: predict's JSON records, or a FHIR R4 Bundle with ?format=fhir",
              openapi_extra={"requestBody": {"required": True,
                                             "content": {"application/json": {"schema": _PREDICT_SCHEMA}}},
                             "parameters": [{"name": "format", "in": "query", "required": False,
                                             "schema": {"type": "string", "enum": service_formats(),
                                                        "default": SERVICE_ENVELOPE}}]
                                           + [{"name": n, "in": "query", "required": False, "schema": {"type": t},
                                               "description": "As the body's field of that name; given in both, "
                                                              "they must agree."}
                                              for n, t in (("top_k", "string"), ("explain", "integer"),
                                                           ("threshold", "number"))]})
    @guarded
    async def predict(request: Request) -> JSONResponse:
        query = query_options(request, ("format", *_OPTION_KEYS))
        fmt = query.get("format", SERVICE_ENVELOPE)
        if fmt not in service_formats():  # its envelope, or a writer offered to serve (`Writer.serve`)
            choices = " or ".join(f"format={n}" + (" (the default)" if n == SERVICE_ENVELOPE else "")
                                  for n in service_formats())
            raise BadRequest(422, f"format={fmt[:20]!r} is not known; use {choices}.")
        check_content_type(request, _JSON_ROUTES["/v1/predict"])
        scorer()
        body = await svc.read(request)
        with svc.admitted():
            notes, opts = parse_predict(parse_json(body), limits, query)
            records = await score(notes, opts)
        if fmt != SERVICE_ENVELOPE:
            w = WRITERS[fmt]
            context = {"systems": svc.systems, "source": svc.source, "family": svc.family,
                       "request_id": request.scope.get("clinicode.request_id")}
            if w.subjects:
                context["subjects"] = [n["subject"] for n in notes]
            answer = w.document(records, context)
            media = w.document_type or w.media_type
            return (Response(answer, media_type=media) if isinstance(answer, bytes)
                    else JSONResponse(answer, media_type=media))
        return JSONResponse({"results": records, "model": svc.info})

    @app.post(ANALYZE, summary="Score a FHIR DocumentReference (base64 text/plain attachment) into a FHIR R4 Bundle",
              openapi_extra={"requestBody": {"required": True,
                                             "content": {FHIR_JSON: {"schema": {"type": "object"}},
                                                         "application/json": {"schema": {"type": "object"}}}},
                             "parameters": [{"name": n, "in": "query", "required": False, "schema": {"type": t}}
                                            for n, t in (("top_k", "string"), ("explain", "integer"),
                                                         ("threshold", "number"))]})
    @guarded
    async def analyze(request: Request) -> JSONResponse:
        query = query_options(request, _OPTION_KEYS)
        opts = merge_options({}, query, limits)
        check_content_type(request, _JSON_ROUTES[ANALYZE])
        scorer()
        body = await svc.read(request)
        with svc.admitted():
            try:
                note = note_from_document_reference(parse_json(body, ANALYZE_EXAMPLE))
            except DataFormatError as err:
                raise BadRequest(422, str(err)) from None
            if len(note["text"]) > limits.max_text_chars:
                raise BadRequest(413,
                                 f"the note has {len(note['text']):,} characters; the limit is "
                                 f"{limits.max_text_chars:,} (--max-text-chars); shorten or split the note.")
            records = await score([note], opts)
        return JSONResponse(bundle(records, systems=svc.systems, subjects=[note["subject"]],
                                   documents=[note["document"]], source=svc.source,
                                   request_id=request.scope.get("clinicode.request_id"), family=svc.family),
                            media_type=FHIR_JSON)

    if token is not None:  # /docs then offers "Authorize": its requests carry the token the user types in
        base_openapi = app.openapi

        def openapi_with_bearer() -> dict[str, Any]:
            if app.openapi_schema is None:
                schema = base_openapi()
                schema.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http",
                                                                                    "scheme": "bearer"}}
                schema["security"] = [{"bearer": []}]
                app.openapi_schema = schema
            return app.openapi_schema

        app.openapi = openapi_with_bearer  # type: ignore[method-assign]
    app.add_middleware(_Accept)  # inside the token check: a 401 comes first
    app.add_middleware(_BearerAuth, token=token)
    app.add_middleware(_Front, service=svc, gate=Gate(host, limits.allow_hosts, limits.allow_origins))  # outermost
    return app


_NOTE_SCHEMA = {"type": "object", "required": ["text"], "additionalProperties": False, "properties": {
    "id": {"type": "string", "description": "Your id for the note (default: its position)."},
    "text": {"type": "string", "description": "The note's text."},
    "subject": {"description": "FHIR subject, e.g. \"Patient/123\" or a Reference object; "
                               "carried into the FHIR output.",
                "oneOf": [{"type": "string"}, {"type": "object"}]}}}
_PREDICT_SCHEMA = {"type": "object", "required": ["notes"], "additionalProperties": False, "properties": {
    "notes": {"type": "array", "minItems": 1, "items": _NOTE_SCHEMA},
    "top_k": {"description": "Codes listed in `scores`: a positive integer or \"all\".", "default": PREDICT.top_k,
              "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "enum": ["all"]}]},
    "explain": {"type": "integer", "minimum": 0, "default": PREDICT.explain,
                "description": "N > 0: the N highest-attention spans, up to N evidence spans per predicted code."},
    "threshold": {"type": "number", "minimum": 0, "maximum": 1,
                  "description": "Override the checkpoint's tuned threshold."}}}
