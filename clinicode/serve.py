"""`clinicode serve`: an HTTP scoring service (FastAPI on uvicorn) with JSON and FHIR R4 output.

    GET  /health                            model name, code count, checkpoint hash (no token needed)
    POST /v1/predict[?format=fhir]          {"notes": [{"id", "text", "subject"?}], "top_k", "explain", "threshold"}
    POST /fhir/DocumentReference/$analyze   a DocumentReference (base64 text/plain attachment) -> a FHIR Bundle
    GET  /openapi.json, /docs               the API's description

The checkpoint is loaded once. Requests are scored by one worker thread that collects the notes of concurrent
requests (up to `Limits.batch_notes` notes, waiting at most `Limits.batch_wait_ms` for more) and scores them in one
batch, so many clients sending one note each get close to batch throughput. Each request's work is bounded by its
limits (notes per request, characters per note, body bytes), so one request delays the others by at most one such
batch. Bad input gets a 4xx with a JSON body saying what was wrong and how to fix it; note text is never logged and
never echoed in a message. Security model and limits: docs/serve.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import hmac
import ipaddress
import json
import logging
import os
import queue
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from clinicode import __version__
from clinicode.config import PREDICT, ServeConfig
from clinicode.errors import ConfigError, DataFormatError
from clinicode.fhir import bundle, code_systems, note_from_document_reference
from clinicode.predict import Predictor, Prepared

log = logging.getLogger(__name__)
FHIR_JSON = "application/fhir+json"
ANALYZE = "/fhir/DocumentReference/$analyze"


Limits = ServeConfig  # the per-request limits and batching bounds


class BadRequest(Exception):
    """A client error: HTTP status and a one-line message (what was wrong, what was expected, how to fix it)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


# ------------------------------------------------------------------ micro-batching
@dataclass
class _Job:
    key: tuple[Any, ...]
    prepared: Prepared
    future: concurrent.futures.Future


class Batcher:
    """One worker thread scoring the prepared notes of concurrent requests together.

    Jobs with the same options (top_k, threshold, explain) are merged into one `Predictor.finish` call of up to
    `max_notes` notes: those already queued when the worker takes a job, and those of requests still being
    tokenised (`arriving`), for which it waits at most `wait_ms`. With nothing else on its way it scores at once,
    so a lone client pays no wait.
    """

    def __init__(self, predictor: Predictor, *, max_notes: int, wait_ms: float) -> None:
        self.predictor = predictor
        self.max_notes, self.wait_s = max_notes, wait_ms / 1000.0
        self.queue: queue.Queue[_Job | None] = queue.Queue()
        self.batches = 0       # finish calls so far (tests and /health read them)
        self.scored = 0        # notes scored so far
        self._arriving = 0     # requests between `arriving()` and their submit
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="clinicode-batcher", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """Mark a request whose notes are being tokenised: the worker may wait for its job (up to wait_ms)."""
        with self._lock:
            self._arriving += 1
        try:
            yield
        finally:
            with self._lock:
                self._arriving -= 1

    def submit(self, prepared: Prepared, *, top_k: int | None, threshold: float | None,
               explain: int) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self.queue.put(_Job((top_k, threshold, explain), prepared, fut))
        return fut

    def stop(self) -> None:
        self.queue.put(None)
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            jobs, n, stop = [job], len(job.prepared.ids), False
            deadline = time.monotonic() + self.wait_s
            while n < self.max_notes:
                try:
                    nxt = self.queue.get_nowait()
                except queue.Empty:
                    remaining = deadline - time.monotonic()
                    if self._arriving == 0 or remaining <= 0:  # nothing on its way, or waited long enough
                        break
                    try:
                        nxt = self.queue.get(timeout=min(remaining, 0.001))
                    except queue.Empty:
                        continue
                if nxt is None:
                    stop = True
                    break
                jobs.append(nxt)
                n += len(nxt.prepared.ids)
            try:
                self._score(jobs)
            except Exception as err:  # never let one batch end the worker: later requests would wait forever
                log.error("scoring worker: %s (note text is not logged)", type(err).__name__)
            if stop:
                return

    def _score(self, jobs: list[_Job]) -> None:
        groups: dict[tuple[Any, ...], list[_Job]] = {}
        for j in jobs:
            if j.future.set_running_or_notify_cancel():  # False: its client went away; nothing to score
                groups.setdefault(j.key, []).append(j)
        for (top_k, threshold, explain), group in groups.items():
            try:
                merged = _merge([j.prepared for j in group])
                records = [p.to_dict() for p in self.predictor.finish(merged, top_k=top_k, threshold=threshold,
                                                                      explain=explain, attention=False)]
            except Exception as err:  # a bug, not bad input: every waiting request gets a 500, the worker lives on
                log.error("scoring failed: %s (note text is not logged)", type(err).__name__)
                for j in group:
                    j.future.set_exception(RuntimeError("scoring failed"))
                continue
            self.batches += 1
            self.scored += len(records)
            start = 0
            for j in group:
                end = start + len(j.prepared.ids)
                j.future.set_result(records[start:end])
                start = end


def _merge(parts: list[Prepared]) -> Prepared:
    """One Prepared holding the notes of several, in order (their encodings are already computed)."""
    if len(parts) == 1:
        return parts[0]
    ids: list[str] = []
    errors: dict[int, str] = {}
    good: list[int] = []
    texts: list[str] = []
    encs: list[Any] = []
    for p in parts:
        off = len(ids)
        ids += p.ids
        errors.update({off + i: e for i, e in p.errors.items()})
        good += [off + i for i in p.good]
        texts += p.texts
        encs += p.encs or []
    return Prepared(ids, errors, good, texts, encs if good and any(p.encs is not None for p in parts) else None)


# ------------------------------------------------------------------ request parsing
_NOTE_KEYS = {"id", "text", "subject"}
_BODY_KEYS = {"notes", "top_k", "explain", "threshold"}
_EXAMPLE = 'send {"notes": [{"id": "n1", "text": "..."}]} as application/json'


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body is {int(declared):,} bytes; the limit is {limit:,} (--max-body-mb); "
                              "send fewer or shorter notes per request.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body is over the limit of {limit:,} bytes (--max-body-mb); send fewer or "
                                  "shorter notes per request.")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes) -> Any:
    if not body.strip():
        raise BadRequest(400, f"request body is empty; {_EXAMPLE}.")
    try:
        text = body.decode("utf-8-sig")  # JSON over HTTP is UTF-8 (RFC 8259); json.loads would guess UTF-16 from bytes
    except UnicodeDecodeError:
        raise BadRequest(400, f"request body is not UTF-8 text; {_EXAMPLE}.") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:  # its message names a position, never the text
        raise BadRequest(400, f"request body is not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                              f"{_EXAMPLE}.") from None


def _kind(v: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object",
            type(None): "null"}.get(type(v), type(v).__name__)


def parse_options(top_k: Any, explain: Any, threshold: Any, limits: Limits, *,
                  from_query: bool = False) -> dict[str, Any]:
    """top_k (a positive integer or "all"), explain (0..max_explain) and threshold ([0, 1]) checked, as `predict` takes
    them; absent ones take `predict`'s defaults."""
    def as_number(name: str, v: Any, kind: type) -> Any:
        if from_query and isinstance(v, str):
            try:
                return kind(v)
            except ValueError:
                raise BadRequest(422, f"{name}={v[:20]!r} is not a number.") from None
        return v

    opts: dict[str, Any] = {"top_k": PREDICT.top_k, "explain": PREDICT.explain, "threshold": None}
    if top_k is not None:
        if top_k == "all":
            opts["top_k"] = None
        else:
            top_k = as_number("top_k", top_k, int)
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
                shown = repr(top_k) if isinstance(top_k, (int, float)) else _kind(top_k)
                raise BadRequest(422, f"top_k must be a positive integer or \"all\", got {shown}; e.g. \"top_k\": 5.")
            opts["top_k"] = top_k
    if explain is not None:
        explain = as_number("explain", explain, int)
        if isinstance(explain, bool) or not isinstance(explain, int) or not 0 <= explain <= limits.max_explain:
            shown = repr(explain) if isinstance(explain, (int, float)) else _kind(explain)
            raise BadRequest(422, f"explain must be an integer from 0 to {limits.max_explain}, got {shown}; "
                                  "e.g. \"explain\": 3 for three evidence spans per code.")
        opts["explain"] = explain
    if threshold is not None:
        threshold = as_number("threshold", threshold, float)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            shown = repr(threshold) if isinstance(threshold, (int, float)) else _kind(threshold)
            raise BadRequest(422, f"threshold must be a number in [0, 1], got {shown}; leave it out to use the "
                                  "checkpoint's tuned threshold.")
        opts["threshold"] = float(threshold)
    return opts


def parse_predict(obj: Any, limits: Limits) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(notes, options) of a /v1/predict body, or BadRequest naming the first problem (never a note's text)."""
    if not isinstance(obj, dict):
        raise BadRequest(422, f"request body is {_kind(obj)}; {_EXAMPLE}.")
    unknown = sorted(set(obj) - _BODY_KEYS)
    if unknown:
        raise BadRequest(422, f"unknown field {unknown[0][:40]!r}; the fields are notes, top_k, explain and threshold.")
    notes = obj.get("notes")
    if not isinstance(notes, list) or not notes:
        got = "missing" if "notes" not in obj else "empty" if notes == [] else _kind(notes)
        raise BadRequest(422, f"'notes' is {got}; expected a non-empty list of notes: {_EXAMPLE}.")
    if len(notes) > limits.max_notes:
        raise BadRequest(413, f"{len(notes):,} notes in one request; the limit is {limits.max_notes:,} (--max-notes); "
                              "split them over several requests.")
    out = []
    for i, note in enumerate(notes):
        if not isinstance(note, dict):
            raise BadRequest(422, f"notes[{i}] is {_kind(note)}; expected an object {{\"id\": ..., \"text\": ...}}.")
        unknown = sorted(set(note) - _NOTE_KEYS)
        if unknown:
            raise BadRequest(422,
                             f"notes[{i}] has an unknown field {unknown[0][:40]!r}; a note has id, text and subject.")
        if "text" not in note or note["text"] is None:
            raise BadRequest(422, f"notes[{i}] has no 'text'; give each note its text as a string.")
        if not isinstance(note["text"], str):
            raise BadRequest(422, f"notes[{i}].text is {_kind(note['text'])}; expected the note's text as a string.")
        if len(note["text"]) > limits.max_text_chars:
            raise BadRequest(413, f"notes[{i}].text has {len(note['text']):,} characters; the limit is "
                                  f"{limits.max_text_chars:,} (--max-text-chars); shorten or split the note.")
        rid = note.get("id", str(i))
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            raise BadRequest(422, f"notes[{i}].id is {_kind(rid)}; expected a string (or leave it out).")
        subject = note.get("subject")
        if subject is not None and not (isinstance(subject, str) or
                                        (isinstance(subject, dict) and all(isinstance(k, str) for k in subject))):
            raise BadRequest(422,
                             f"notes[{i}].subject is {_kind(subject)}; expected a reference such as \"Patient/123\" "
                                  "or a FHIR Reference object.")
        out.append({"id": str(rid), "text": note["text"], "subject": subject})
    return out, parse_options(obj.get("top_k"), obj.get("explain"), obj.get("threshold"), limits)


# ------------------------------------------------------------------ app
def _error(status: int, message: str, *, fhir: bool = False, headers: dict[str, str] | None = None) -> JSONResponse:
    if fhir:
        code = {401: "login", 404: "not-found", 405: "not-supported", 413: "too-costly"}.get(status, "invalid")
        body = {"resourceType": "OperationOutcome",
                "issue": [{"severity": "error", "code": code, "diagnostics": message}]}
        return JSONResponse(body, status_code=status, media_type=FHIR_JSON, headers=headers)
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status, headers=headers)


class _BearerAuth:
    """ASGI middleware: with a token, every route but /health needs `Authorization: Bearer <token>` (else 401)."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.token = token.encode("utf-8") if token else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.token is None or scope["type"] != "http" or scope.get("path") == "/health":
            return await self.app(scope, receive, send)
        given = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, cred = value.partition(b" ")
                given = cred.strip() if scheme.lower() == b"bearer" else b""
        if hmac.compare_digest(given, self.token):
            return await self.app(scope, receive, send)
        msg = ("missing or wrong bearer token; send the header 'Authorization: Bearer <token>' with the token from the "
               "server's --token-file.")
        resp = _error(401, msg, fhir=scope.get("path", "").startswith("/fhir/"), headers={"WWW-Authenticate": "Bearer"})
        await resp(scope, receive, send)


def create_app(predictor: Predictor, *, token: str | None = None, limits: Limits = Limits()) -> FastAPI:
    """The service around one loaded Predictor (its micro-batching worker starts with the app and stops with it)."""
    from contextlib import asynccontextmanager

    systems = code_systems(predictor.codes, predictor.code_system)
    info = {"status": "ok", "model": predictor.kind, "name": Path(predictor.checkpoint.path).resolve().parent.name,
            "n_codes": len(predictor.codes), "checkpoint_sha256": predictor.checkpoint.manifest_sha256,
            "clinicode_version": __version__}
    state: dict[str, Batcher] = {}

    def batcher() -> Batcher:
        if "b" not in state:  # also when the app runs without its lifespan (tests' plain TestClient)
            state["b"] = Batcher(predictor, max_notes=limits.batch_notes, wait_ms=limits.batch_wait_ms)
        return state["b"]

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        batcher()
        yield
        state.pop("b").stop()

    app = FastAPI(title="clinicode", version=__version__, lifespan=lifespan,
                  description="ICD code suggestions for clinical notes (LEAM). Suggestions are unconfirmed: a coder "
                              "reviews them. See docs/serve.md.")
    app.state.batcher = batcher
    app.state.limits = limits

    @app.exception_handler(BadRequest)
    async def _bad(request: Request, err: BadRequest) -> JSONResponse:
        return _error(err.status, err.message, fhir=request.url.path.startswith("/fhir/"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        path, method = request.url.path, request.method
        if err.status_code == 405:
            allowed = (err.headers or {}).get("Allow", "")
            msg = f"{method} is not allowed on {path[:80]}; use {allowed or 'another method'} (see /docs)."
        elif err.status_code == 404:
            msg = f"no route {path[:80]}; the routes are /health, /v1/predict and {ANALYZE} (see /docs)."
        else:
            msg = str(err.detail)[:200]
        return _error(err.status_code, msg, fhir=path.startswith("/fhir/"), headers=err.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        where = ", ".join(".".join(str(x) for x in e.get("loc", ())) for e in err.errors()[:3])  # never the input
        return _error(422, f"invalid request at {where or 'the body'}; see /docs for the expected shape.",
                      fhir=request.url.path.startswith("/fhir/"))

    @app.exception_handler(Exception)
    async def _bug(request: Request, err: Exception) -> JSONResponse:
        log.error("%s %s failed: %s (note text is not logged)", request.method, request.url.path, type(err).__name__)
        return _error(500, "the server failed on this request (a bug, logged without note text); please report it.",
                      fhir=request.url.path.startswith("/fhir/"))

    def guarded(route: Any) -> Any:
        """An unexpected failure -> a 500 JSON answer and a log line naming only the exception's type (Starlette
        would re-raise it to uvicorn, whose traceback would print the exception's message)."""
        @functools.wraps(route)
        async def wrapper(request: Request) -> Any:
            try:
                return await route(request)
            except BadRequest:
                raise
            except Exception as err:
                return await _bug(request, err)
        return wrapper

    async def score(notes: list[dict[str, Any]], opts: dict[str, Any]) -> list[dict[str, Any]]:
        b = batcher()
        with b.arriving():  # tokenised in a thread meanwhile; the worker may wait for this job to batch it
            prepared = await run_in_threadpool(predictor.prepare, [n["text"] for n in notes],
                                               ids=[n["id"] for n in notes], explain=opts["explain"])
            fut = b.submit(prepared, top_k=opts["top_k"], threshold=opts["threshold"], explain=opts["explain"])
        return await asyncio.wrap_future(fut)

    @app.get("/health", summary="Liveness and the loaded model (no token needed)")
    async def health() -> JSONResponse:
        b = state.get("b")
        if b is not None and not b.alive():
            return JSONResponse({**info, "status": "scoring worker stopped"}, status_code=503)
        return JSONResponse({**info, "notes_scored": b.scored if b else 0, "batches": b.batches if b else 0})

    @app.post("/v1/predict", summary="Score notes: predict's JSON records, or a FHIR R4 Bundle with ?format=fhir",
              openapi_extra={"requestBody": {"required": True,
                                             "content": {"application/json": {"schema": _PREDICT_SCHEMA}}},
                             "parameters": [{"name": "format", "in": "query", "required": False,
                                             "schema": {"type": "string", "enum": ["json", "fhir"],
                                                        "default": "json"}}]})
    @guarded
    async def predict(request: Request) -> JSONResponse:
        fmt = request.query_params.get("format", "json")
        if fmt not in ("json", "fhir"):
            raise BadRequest(422, f"format={fmt[:20]!r} is not known; use format=json (the default) or format=fhir.")
        notes, opts = parse_predict(parse_json(await read_body(request, limits.max_body_bytes)), limits)
        records = await score(notes, opts)
        if fmt == "fhir":
            return JSONResponse(bundle(records, systems=systems, subjects=[n["subject"] for n in notes]),
                                media_type=FHIR_JSON)
        return JSONResponse({"results": records})

    @app.post(ANALYZE, summary="Score a FHIR DocumentReference (base64 text/plain attachment) into a FHIR R4 Bundle",
              openapi_extra={"requestBody": {"required": True,
                                             "content": {FHIR_JSON: {"schema": {"type": "object"}},
                                                         "application/json": {"schema": {"type": "object"}}}},
                             "parameters": [{"name": n, "in": "query", "required": False, "schema": {"type": t}}
                                            for n, t in (("top_k", "integer"), ("explain", "integer"),
                                                         ("threshold", "number"))]})
    @guarded
    async def analyze(request: Request) -> JSONResponse:
        q = request.query_params
        unknown = sorted(set(q) - {"top_k", "explain", "threshold"})
        if unknown:
            raise BadRequest(422,
                             f"unknown query parameter {unknown[0][:40]!r}; the parameters are "
                             "top_k, explain and threshold.")
        opts = parse_options(q.get("top_k"), q.get("explain"), q.get("threshold"), limits, from_query=True)
        try:
            note = note_from_document_reference(parse_json(await read_body(request, limits.max_body_bytes)))
        except DataFormatError as err:
            raise BadRequest(422, str(err)) from None
        if len(note["text"]) > limits.max_text_chars:
            raise BadRequest(413,
                             f"the note has {len(note['text']):,} characters; the limit is {limits.max_text_chars:,} "
                                  "(--max-text-chars); shorten or split the note.")
        records = await score([note], opts)
        return JSONResponse(bundle(records, systems=systems, subjects=[note["subject"]], documents=[note["document"]]),
                            media_type=FHIR_JSON)

    app.add_middleware(_BearerAuth, token=token)
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
                "description": "N > 0 adds the N highest-attention spans and each predicted code's N best phrases."},
    "threshold": {"type": "number", "minimum": 0, "maximum": 1,
                  "description": "Override the checkpoint's tuned threshold."}}}


# ------------------------------------------------------------------ start-up checks and running
def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(path: Path) -> str:
    """The bearer token in PATH, refused unless PATH is a file only its owner may read."""
    try:
        st = os.stat(path)
    except OSError:
        raise ConfigError(f"--token-file {path}: not found; write a long random token into it (e.g. "
                          "`python -c 'import secrets; print(secrets.token_urlsafe(32))' > "
                          f"{path}; chmod 600 {path}`).") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"--token-file {path}: not a regular file; give the file holding the token.")
    if os.name == "posix" and st.st_mode & 0o077:
        raise ConfigError(f"--token-file {path}: mode {stat.S_IMODE(st.st_mode):03o} lets others read or change it; "
                          f"run `chmod 600 {path}`.")
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"--token-file {path}: cannot be read as UTF-8 text; write the token as one line.") from None
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


def run(checkpoint: Path, *, host: str = "127.0.0.1", port: int = 8000, token_file: Path | None = None,
        limits: Limits = Limits(), device: str = "auto", on_ready: Any = None) -> None:
    """Check the bind and token, load the checkpoint once, and serve until interrupted (uvicorn)."""
    import uvicorn

    token = check_bind(host, token_file)
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: expected 0-65535.")
    predictor = Predictor.from_checkpoint(checkpoint, device=device)
    app = create_app(predictor, token=token, limits=limits)
    if on_ready:
        on_ready(predictor, token is not None)
    # uvicorn's access log is one line per request (client, method, path, status): no bodies, headers or note text.
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=True, server_header=False,
                timeout_graceful_shutdown=10)
