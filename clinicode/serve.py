"""`clinicode serve`: an HTTP scoring service (FastAPI on uvicorn) with JSON and FHIR R4 output.

    GET  /health, /ready                    liveness (the model, counts) and readiness (200 once the model is loaded)
    GET  /metrics                           Prometheus text: requests by route and status, latency, notes scored
    POST /v1/predict[?format=fhir]          {"notes": [{"id", "text", "subject"?}], "top_k", "explain", "threshold"}
    POST /fhir/DocumentReference/$analyze   a DocumentReference (base64 text/plain attachment) -> a FHIR Bundle
    GET  /openapi.json, /docs               the API's description

The address is bound first, then the checkpoint loads in a thread. Requests are scored by one worker thread that
collects the notes of concurrent requests (up to `Limits.batch_notes` notes, waiting at most `Limits.batch_wait_ms`
for more) and scores them in one batch, so many clients sending one note each get close to batch throughput. Each
request's work is bounded by its limits (notes per request, characters per note, body bytes, read time), and at most
`Limits.max_pending` requests are admitted at once. Bad input gets a 4xx with a JSON body saying what was wrong and
how to fix it; note text is never logged and never echoed in a message. Host, Origin and Content-Type are checked
so web pages cannot reach the service. Security model, limits and operation: docs/serve.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import functools
import hmac
import ipaddress
import json
import logging
import os
import queue
import re
import signal
import socket
import stat
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from clinicode import __version__
from clinicode.checkpoint import resolve_checkpoint_dir
from clinicode.config import PREDICT, PredictConfig, ServeConfig, kind_of
from clinicode.errors import ClinicodeError, ConfigError, DataFormatError
from clinicode.fhir import bundle, check_subject, code_systems, note_from_document_reference, predictor_source
from clinicode.formats import SERVICE_FORMATS
from clinicode.predict import Predictor, Prepared
from clinicode.records import is_unicode

log = logging.getLogger(__name__)
access = logging.getLogger(__name__ + ".access")  # one line per request: client, method, path, status, time, id
FHIR_JSON = "application/fhir+json"
ANALYZE = "/fhir/DocumentReference/$analyze"


Limits = ServeConfig  # the per-request limits and batching bounds


class BadRequest(Exception):
    """A client error: HTTP status and a one-line message (what was wrong, what was expected, how to fix it)."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


# ------------------------------------------------------------------ micro-batching
@dataclass
class _Job:
    key: tuple[Any, ...]
    prepared: Prepared
    future: concurrent.futures.Future


class ShuttingDown(Exception):
    """A job the worker will not score: the server is stopping and its grace period is over."""


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
        self.failures = 0      # batches whose scoring failed (a bug)
        self._refusing = False  # set by `refuse_waiting`: jobs not yet scored are answered ShuttingDown
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
        if self._refusing:
            fut.set_exception(ShuttingDown())
        else:
            self.queue.put(_Job((top_k, threshold, explain), prepared, fut))
        return fut

    def refuse_waiting(self) -> None:
        """From now on, answer every job not yet being scored with ShuttingDown (the end of a graceful stop's grace
        period); the batch being scored finishes."""
        self._refusing = True
        while True:
            try:
                job = self.queue.get_nowait()
            except queue.Empty:
                return
            if job is None:
                self.queue.put(None)  # keep the stop signal for the worker
                return
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(ShuttingDown())

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
                if self._refusing:
                    j.future.set_exception(ShuttingDown())
                else:
                    groups.setdefault(j.key, []).append(j)
        for (top_k, threshold, explain), group in groups.items():
            try:
                merged = _merge([j.prepared for j in group])
                records = [p.to_dict() for p in self.predictor.finish(merged, top_k=top_k, threshold=threshold,
                                                                      explain=explain, attention=False)]
            except Exception as err:  # a bug, not bad input: every waiting request gets a 500, the worker lives on
                self.failures += 1
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
_OPTION_KEYS = ("top_k", "explain", "threshold")
_EXAMPLE = 'send {"notes": [{"id": "n1", "text": "..."}]} as application/json'
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")  # the JSON escape of a UTF-16 surrogate (paired ones are fine)


class ClientGone(Exception):
    """The client closed its connection before sending the whole request (not the server's error)."""


async def read_body(request: Request, limit: int, timeout: float = 30.0) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes (declared or streamed), and with 408 when
    it has not all arrived within `timeout` seconds of the request's start (a slow or stalled client)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body is {int(declared):,} bytes; the limit is {limit:,} (--max-body-mb); "
                              "send fewer or shorter notes per request.")
    loop = asyncio.get_running_loop()
    deadline = request.scope.get("clinicode.start", loop.time()) + timeout
    chunks, size = [], 0
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), max(deadline - loop.time(), 0.0))
        except StopAsyncIteration:
            break
        except asyncio.TimeoutError:
            raise BadRequest(408, f"the request body did not arrive within {timeout:g} s (--read-timeout); send the "
                                  "whole request at once.", headers={"Connection": "close"}) from None
        except ClientDisconnect:
            raise ClientGone() from None
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body is over the limit of {limit:,} bytes (--max-body-mb); send fewer or "
                                  "shorter notes per request.")
        chunks.append(chunk)
    return b"".join(chunks)


def _no_constant(name: str) -> Any:
    raise BadRequest(400, f"request body holds {name}, which is not JSON (RFC 8259 has no NaN or Infinity); send "
                          "numbers as finite decimals.")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # RFC 8259 leaves duplicate names undefined: Python keeps the last, others the first
        seen: set[str] = set()
        name = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise BadRequest(422, f"request body gives the field {name[:40]!r} twice in one object; give each field "
                              "once.")
    return obj


def parse_json(body: bytes) -> Any:
    """The JSON value of BODY (UTF-8), or BadRequest: malformed JSON, NaN/Infinity, numbers over Python's 4,300-digit
    limit and nesting deeper than Python's recursion limit are 400s; a lone UTF-16 surrogate (legal JSON, but no
    Unicode text) and a field given twice in one object are 422s naming where or which."""
    if not body.strip():
        raise BadRequest(400, f"request body is empty; {_EXAMPLE}.")
    try:
        text = body.decode("utf-8-sig")  # JSON over HTTP is UTF-8 (RFC 8259); json.loads would guess UTF-16 from bytes
    except UnicodeDecodeError:
        raise BadRequest(400, f"request body is not UTF-8 text; {_EXAMPLE}.") from None
    try:
        obj = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as err:  # its message names a position, never the text
        raise BadRequest(400, f"request body is not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                              f"{_EXAMPLE}.") from None
    except ValueError:  # int() of a number over sys.get_int_max_str_digits() digits
        raise BadRequest(400, "request body holds a number too long to read (over 4,300 digits); send numbers of "
                              "ordinary size.") from None
    except RecursionError:
        raise BadRequest(400, "request body is nested too deeply to read; a request is an object of notes, "
                              f"nested a few levels at most: {_EXAMPLE}.") from None
    if _SURROGATE.search(text):
        where = _surrogate_at(obj)
        if where is not None:
            raise BadRequest(422, f"{where} holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its "
                                  "pair), which is no Unicode text; send the text as valid UTF-8.")
    return obj


def _surrogate_at(obj: Any) -> str | None:
    """The path ('notes[0].text') of the first string or key holding a lone surrogate, or None (any depth)."""
    todo: list[tuple[str, Any]] = [("request body", obj)]
    while todo:
        path, v = todo.pop()
        if isinstance(v, str):
            if not is_unicode(v):
                return path
        elif isinstance(v, list):
            todo += [(f"{path}[{i}]", x) for i, x in enumerate(v)]
        elif isinstance(v, dict):
            for k, x in v.items():
                if not is_unicode(k):
                    return f"a field name in {path}"
                todo.append((k if path == "request body" else f"{path}.{k}", x))
    return None


def query_options(request: Request, allowed: Sequence[str]) -> dict[str, str]:
    """The query's parameters, each given at most once and each one of ALLOWED (else 422)."""
    q = request.query_params
    for k in q:
        if k not in allowed:
            raise BadRequest(422, f"unknown query parameter {k[:40]!r}; the parameters are "
                                  f"{', '.join(allowed[:-1])} and {allowed[-1]}.")
        if len(q.getlist(k)) > 1:
            raise BadRequest(422, f"query parameter {k!r} is given {len(q.getlist(k))} times; give it once.")
    return dict(q)


def parse_options(top_k: Any, explain: Any, threshold: Any, limits: Limits, *,
                  from_query: bool = False) -> dict[str, Any]:
    """top_k (a positive integer or "all"), explain (0..max_explain) and threshold ([0, 1]) checked by
    `PredictConfig.from_user`, the rule `clinicode predict` uses; absent ones take `predict`'s defaults. Its ConfigError
    is the 422 answer."""
    try:
        cfg = PredictConfig.from_user(top_k=top_k, explain=explain, threshold=threshold,
                                      max_explain=limits.max_explain, source="query" if from_query else "json")
    except ConfigError as err:
        raise BadRequest(422, str(err)) from None
    return {"top_k": cfg.top_k, "explain": cfg.explain, "threshold": cfg.threshold}


def parse_predict(obj: Any, limits: Limits,
                  query: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(notes, options) of a /v1/predict body (options also from QUERY: `merge_options`), or BadRequest naming the first
    problem (never a note's text)."""
    if not isinstance(obj, dict):
        raise BadRequest(422, f"request body is {kind_of(obj)}; {_EXAMPLE}.")
    unknown = sorted(set(obj) - _BODY_KEYS)
    if unknown:
        raise BadRequest(422, f"unknown field {unknown[0][:40]!r}; the fields are notes, top_k, explain and threshold.")
    notes = obj.get("notes")
    if not isinstance(notes, list) or not notes:
        got = "missing" if "notes" not in obj else "empty" if notes == [] else kind_of(notes)
        raise BadRequest(422, f"'notes' is {got}; expected a non-empty list of notes: {_EXAMPLE}.")
    if len(notes) > limits.max_notes:
        raise BadRequest(413, f"{len(notes):,} notes in one request; the limit is {limits.max_notes:,} (--max-notes); "
                              "split them over several requests.")
    out = []
    for i, note in enumerate(notes):
        if not isinstance(note, dict):
            raise BadRequest(422, f"notes[{i}] is {kind_of(note)}; expected an object {{\"id\": ..., \"text\": ...}}.")
        unknown = sorted(set(note) - _NOTE_KEYS)
        if unknown:
            raise BadRequest(422,
                             f"notes[{i}] has an unknown field {unknown[0][:40]!r}; a note has id, text and subject.")
        if "text" not in note or note["text"] is None:
            raise BadRequest(422, f"notes[{i}] has no 'text'; give each note its text as a string.")
        if not isinstance(note["text"], str):
            raise BadRequest(422, f"notes[{i}].text is {kind_of(note['text'])}; expected the note's text as a string.")
        if len(note["text"]) > limits.max_text_chars:
            raise BadRequest(413, f"notes[{i}].text has {len(note['text']):,} characters; the limit is "
                                  f"{limits.max_text_chars:,} (--max-text-chars); shorten or split the note.")
        rid = note.get("id", str(i))
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            raise BadRequest(422, f"notes[{i}].id is {kind_of(rid)}; expected a string (or leave it out).")
        if isinstance(rid, str) and not rid.strip():  # FHIR strings are never empty or blank: the note-id
            # extension would make an invalid Bundle ('\u2028' is no FHIR string)
            raise BadRequest(422, f"notes[{i}].id is {'an empty' if rid == '' else 'a blank'} string; give an id "
                                  "with letters or digits (or leave it out).")
        subject = note.get("subject")
        if subject is not None and not isinstance(subject, (str, dict)):
            raise BadRequest(422,
                             f"notes[{i}].subject is {kind_of(subject)}; expected a reference such as \"Patient/123\" "
                                  "or a FHIR Reference object.")
        try:
            check_subject(subject, f"notes[{i}].subject")
        except DataFormatError as err:
            raise BadRequest(422, str(err)) from None
        out.append({"id": str(rid), "text": note["text"], "subject": subject})
    return out, merge_options(obj, query or {}, limits)


def merge_options(body: dict[str, Any], query: dict[str, str], limits: Limits) -> dict[str, Any]:
    """One rule for both routes: an option may come from the query or the body; given in both, the two must agree
    (else 422), so a client never gets other options than it asked for."""
    opts = parse_options(body.get("top_k"), body.get("explain"), body.get("threshold"), limits)
    if any(k in query for k in _OPTION_KEYS):
        from_query = parse_options(query.get("top_k"), query.get("explain"), query.get("threshold"), limits,
                                   from_query=True)
        for k in _OPTION_KEYS:
            if k in query and k in body and from_query[k] != opts[k]:
                raise BadRequest(422, f"{k} is given in the query ({query[k][:20]}) and in the body "
                                      f"({json.dumps(body[k])[:20]}) with different values; give it once.")
            if k in query:
                opts[k] = from_query[k]
    return opts


# ------------------------------------------------------------------ app
_JSON_ROUTES = {"/v1/predict": ("application/json",), ANALYZE: (FHIR_JSON, "application/json")}
_PUBLIC = {"/health", "/ready", "/docs", "/openapi.json", "/docs/oauth2-redirect"}  # no token: no note data in them
ROUTES = ("/health", "/ready", "/metrics", "/v1/predict", ANALYZE, "/docs", "/openapi.json")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,64}")
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def _error(status: int, message: str, *, fhir: bool = False, headers: dict[str, str] | None = None) -> JSONResponse:
    if fhir:
        code = {401: "login", 403: "forbidden", 404: "not-found", 405: "not-supported", 406: "not-supported",
                408: "timeout",
                413: "too-costly", 415: "not-supported", 421: "forbidden", 503: "transient"}.get(status, "invalid")
        body = {"resourceType": "OperationOutcome",
                "issue": [{"severity": "error", "code": code, "diagnostics": message}]}
        return JSONResponse(body, status_code=status, media_type=FHIR_JSON, headers=headers)
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status, headers=headers)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for k, v in scope.get("headers", []):
        if k == name:
            return v.decode("latin-1")
    return None


_METHODS = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}


def _loggable(value: str, limit: int = 80) -> str:
    """VALUE cut to LIMIT characters and escaped to printable ASCII (no quote, no line break): a path is percent-decoded
    before it reaches the app, so `%0D%0A` in a request would otherwise forge lines in the server's log."""
    return json.dumps(value[:limit], ensure_ascii=True)[1:-1]


def host_name(value: str) -> str:
    """The host of a Host header or an origin's authority, without port, brackets or a final dot, lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class Gate:
    """Which Host and Origin headers the service answers (docs/serve.md, "Security model").

    Host: loopback names, the bound address, any IP literal when bound to a wildcard address (0.0.0.0, ::), and the
    names of `allow_hosts` ("*": any). A DNS-rebinding page reaches the service under its own domain name, so its
    requests are refused. Origin (sent by browsers): the service's own origin and those of `allow_origins` ("*": any);
    any other web page is refused, so it can neither post notes nor read answers.
    """

    def __init__(self, bound: str, allow_hosts: Sequence[str] = (), allow_origins: Sequence[str] = ()) -> None:
        b = host_name(bound)
        self.wildcard = b in ("0.0.0.0", "::", "")
        self.hosts = _LOOPBACK_NAMES | {b} | {host_name(h) for h in allow_hosts}
        self.any_host = "*" in allow_hosts
        self.origins = {o.strip().rstrip("/").lower() for o in allow_origins}

    def host_ok(self, host: str | None) -> bool:
        if host is None or self.any_host:  # HTTP/1.0 clients may send none; browsers always send one
            return True
        name = host_name(host)
        return name in self.hosts or (self.wildcard and _is_ip(name))

    def origin_ok(self, origin: str | None, host: str | None) -> bool:
        if origin is None or "*" in self.origins:
            return True
        o = origin.strip().rstrip("/").lower()
        if o in self.origins:
            return True
        scheme, sep, authority = o.partition("://")
        return bool(sep) and scheme in ("http", "https") and host is not None and authority == host.strip().lower()


class Metrics:
    """Counters and a latency histogram, written in Prometheus' text format (version 0.0.4) by `text`."""

    BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = {}          # (route, method, status) -> count
        self.latency: dict[str, list[float]] = {}                    # route -> [count per bucket..., sum, count]

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            key = (route, method, status)
            self.requests[key] = self.requests.get(key, 0) + 1
            h = self.latency.setdefault(route, [0.0] * (len(self.BUCKETS) + 2))
            for i, le in enumerate(self.BUCKETS):
                if seconds <= le:
                    h[i] += 1
            h[-2] += seconds
            h[-1] += 1

    def text(self, *, scored: int, batches: int, failures: int, pending: int, ready: bool) -> str:
        with self._lock:
            requests = sorted(self.requests.items())
            latency = sorted((r, list(h)) for r, h in self.latency.items())
        out = ["# HELP clinicode_requests_total HTTP requests answered, by route, method and status.",
               "# TYPE clinicode_requests_total counter"]
        out += [f'clinicode_requests_total{{route="{r}",method="{m}",status="{s}"}} {n}'
                for (r, m, s), n in requests]
        out += ["# HELP clinicode_request_duration_seconds Time from a request's start to its answer, by route.",
                "# TYPE clinicode_request_duration_seconds histogram"]
        for r, h in latency:
            out += [f'clinicode_request_duration_seconds_bucket{{route="{r}",le="{le}"}} {int(h[i])}'
                    for i, le in enumerate(self.BUCKETS)]
            out += [f'clinicode_request_duration_seconds_bucket{{route="{r}",le="+Inf"}} {int(h[-1])}',
                    f'clinicode_request_duration_seconds_sum{{route="{r}"}} {h[-2]:.6f}',
                    f'clinicode_request_duration_seconds_count{{route="{r}"}} {int(h[-1])}']
        errors = sum(n for (_r, _m, s), n in requests if s >= 500)
        out += ["# HELP clinicode_notes_scored_total Notes scored by the model.",
                "# TYPE clinicode_notes_scored_total counter", f"clinicode_notes_scored_total {scored}",
                "# HELP clinicode_batches_total Forward batches run (notes of concurrent requests scored together).",
                "# TYPE clinicode_batches_total counter", f"clinicode_batches_total {batches}",
                "# HELP clinicode_errors_total Answers with a 5xx status (the server's fault or overload).",
                "# TYPE clinicode_errors_total counter", f"clinicode_errors_total {errors}",
                "# HELP clinicode_scoring_failures_total Batches whose scoring failed (a bug; answered with 500).",
                "# TYPE clinicode_scoring_failures_total counter", f"clinicode_scoring_failures_total {failures}",
                "# HELP clinicode_pending_requests Requests being read, tokenised or scored now.",
                "# TYPE clinicode_pending_requests gauge", f"clinicode_pending_requests {pending}",
                "# HELP clinicode_ready 1 when the model is loaded and the service takes requests.",
                "# TYPE clinicode_ready gauge", f"clinicode_ready {int(ready)}"]
        return "\n".join(out) + "\n"


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
        self.batcher: Batcher | None = None
        self.failed: BaseException | None = None
        self.draining = False
        self.pending = 0
        self.metrics = Metrics()
        self._lock = threading.Lock()
        # orders "start serving" (a load ending) and "start stopping" (`drain`); reentrant: a second signal may
        # arrive while the first one's handler holds it
        self._stage = threading.RLock()

    def load(self, predictor: Predictor) -> None:
        self.source = predictor_source(predictor)
        name, sha = self.source["name"], self.source["checkpoint_sha256"]
        self.systems = code_systems(predictor.codes, predictor.code_system)
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

    @contextlib.contextmanager
    def admitted(self) -> Iterator[None]:
        """Count a request for the bounded queue: at `max_pending` requests, the next gets 503 with Retry-After."""
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


class _Front:
    """Outermost ASGI middleware: request id, Host and Origin checks, draining, the access log line, the metrics and
    the checkpoint's identity headers on every answer; an answer is always JSON, even when a request is cancelled."""

    def __init__(self, app: Any, service: Service, gate: Gate) -> None:
        self.app, self.svc, self.gate = app, service, gate

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        start = loop.time()
        scope["clinicode.start"] = start
        given = _header(scope, b"x-request-id")
        rid = given if given is not None and _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        scope["clinicode.request_id"] = rid
        path, method = scope.get("path", ""), scope.get("method", "")
        fhir = path.startswith("/fhir/")
        status = [0]

        async def stamped(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode()),
                                      *self.svc.identity]
            await send(message)

        host, origin = _header(scope, b"host"), _header(scope, b"origin")
        refusal = None
        if _header(scope, b"transfer-encoding") is not None and _header(scope, b"content-length") is not None:
            # the body's length said two ways: a proxy in front may read it by the other (request smuggling), so
            # refused, and the connection closed (RFC 9112 section 6.1)
            refusal = _error(400, "the request has both Transfer-Encoding and Content-Length; send one of them.",
                             fhir=fhir, headers={"Connection": "close"})
        elif not self.gate.host_ok(host):
            refusal = _error(421, f"Host {(host or '')[:60]!r} is not a name this server answers to (a guard against "
                                  "DNS rebinding); use its address, or start it with --allow-host NAME.", fhir=fhir)
        elif not self.gate.origin_ok(origin, host):
            refusal = _error(403, f"cross-origin request from {(origin or '')[:60]!r} refused; a web page may call "
                                  "this service only if the server is started with --allow-origin ORIGIN.", fhir=fhir)
        elif self.svc.draining and path not in ("/health", "/ready", "/metrics"):
            refusal = _error(503, "the server is shutting down; retry against another instance or after its restart.",
                             fhir=fhir, headers={"Retry-After": "5", "Connection": "close"})
        try:
            if refusal is not None:
                await refusal(scope, receive, stamped)
            else:
                await self.app(scope, receive, stamped)
        except asyncio.CancelledError:  # the server's grace period ran out: still answer in JSON, never a text 500
            if not status[0]:
                await _error(503, "the server stopped before this request was answered; retry.", fhir=fhir,
                             headers={"Retry-After": "5", "Connection": "close"})(scope, receive, stamped)
        except Exception as err:  # Starlette re-raises after its 500; uvicorn would log a traceback
            log.error("%s %s failed: %s (note text is not logged)", _loggable(method, 20), _loggable(path),
                      type(err).__name__)
            if not status[0]:
                await _error(500, "the server failed on this request (a bug, logged without note text); please "
                                  "report it.", fhir=fhir)(scope, receive, stamped)
        finally:
            route = path if path in ROUTES else "other"
            elapsed = loop.time() - start
            # any token is an HTTP method: a label per client-chosen method would grow /metrics without bound
            self.svc.metrics.observe(route, method if method in _METHODS else "other", status[0], elapsed)
            client = scope.get("client") or ("-", 0)
            access.info('%s:%s "%s %s" %d %.1f ms request_id=%s', _loggable(str(client[0]), 64), client[1],
                        _loggable(method, 20), _loggable(path), status[0], elapsed * 1000, rid)


class _BearerAuth:
    """ASGI middleware: with a token, every route but /health, /ready and the API description needs
    `Authorization: Bearer <token>` (else 401)."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.token = token.encode("utf-8") if token else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.token is None or scope["type"] != "http" or scope.get("path") in _PUBLIC:
            return await self.app(scope, receive, send)
        given = b""
        sent = [value for name, value in scope.get("headers", []) if name == b"authorization"]
        if len(sent) == 1:  # two are ambiguous (a proxy may check the first, a server the last): refused
            scheme, _, cred = sent[0].partition(b" ")
            given = cred.strip() if scheme.lower() == b"bearer" else b""
        if hmac.compare_digest(given, self.token):
            return await self.app(scope, receive, send)
        msg = ("missing or wrong bearer token; send the header 'Authorization: Bearer <token>' with the token from the "
               "server's --token-file.")
        resp = _error(401, msg, fhir=scope.get("path", "").startswith("/fhir/"), headers={"WWW-Authenticate": "Bearer"})
        await resp(scope, receive, send)


def check_content_type(request: Request, accepted: Sequence[str]) -> None:
    """415 unless the body is declared as one of ACCEPTED (UTF-8): a web page can send `text/plain` or a form to any
    address without asking, but not JSON, so this keeps pages from posting notes to a loopback service."""
    given = request.headers.get("content-type", "")
    mime, _, params = given.partition(";")
    charset = next((v.strip().strip('"').lower() for k, _, v in (p.strip().partition("=") for p in params.split(";"))
                    if k.strip().lower() == "charset"), "utf-8")
    if mime.strip().lower() not in accepted or charset not in ("utf-8", "utf8"):
        shown = f"Content-Type {given[:60]!r}" if given else "no Content-Type"
        raise BadRequest(415, f"{shown} is not accepted here; send the body as {' or '.join(accepted)} "
                              f"(UTF-8), e.g. curl -H 'Content-Type: {accepted[0]}'.")
    encoding = request.headers.get("content-encoding", "identity")
    if encoding.strip().lower() not in ("identity", ""):  # never read a body as something it says it is not
        raise BadRequest(415, f"Content-Encoding {encoding[:30]!r} is not accepted here; send the body "
                              "uncompressed (without a Content-Encoding header).")


# What each route answers, for `Accept` (RFC 9110 section 12.5.1): (methods, media types, first the one it sends).
_ANSWERS: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "/health": (frozenset({"GET", "HEAD"}), ("application/json",)),
    "/ready": (frozenset({"GET", "HEAD"}), ("application/json",)),
    "/metrics": (frozenset({"GET", "HEAD"}), ("text/plain",)),
    "/v1/predict": (frozenset({"POST"}), ("application/json",)),
    ANALYZE: (frozenset({"POST"}), (FHIR_JSON, "application/json")),
    "/openapi.json": (frozenset({"GET", "HEAD"}), ("application/json",)),
    "/docs": (frozenset({"GET", "HEAD"}), ("text/html",)),
    "/docs/oauth2-redirect": (frozenset({"GET", "HEAD"}), ("text/html",)),
}


def acceptable(accept: str | None, offered: Sequence[str]) -> bool:
    """Whether an `Accept` header takes one of OFFERED: each is weighed by the most specific media range naming it
    (`type/subtype`, then `type/*`, then `*/*`) and taken with a q above 0. Parameters other than q are ignored
    (`application/fhir+json; fhirVersion=4.0` is application/fhir+json). No header, an empty one, or one with no
    readable range takes anything."""
    if accept is None:
        return True
    ranges: list[tuple[str, str, float]] = []
    for item in accept.split(","):
        mime, *params = item.split(";")
        mime = mime.strip().lower()
        typ, sep, sub = ("*", "/", "*") if mime == "*" else mime.partition("/")
        if not (sep and typ and sub):
            continue
        q: float | None = 1.0
        for p in params:
            k, _, v = p.strip().partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v.strip())
                except ValueError:
                    q = None
                if q is not None and not 0 <= q <= 1:  # nan too
                    q = None
        if q is not None:
            ranges.append((typ, sub, q))
    if not ranges:
        return True
    for o in offered:
        otyp, _, osub = o.partition("/")
        best: tuple[int, float] | None = None
        for typ, sub, q in ranges:
            rank = (2 if (typ, sub) == (otyp, osub) else 1 if (typ, sub) == (otyp, "*")
                    else 0 if (typ, sub) == ("*", "*") else -1)
            if rank >= 0 and (best is None or rank > best[0]):
                best = (rank, q)
        if best is not None and best[1] > 0:
            return True
    return False


class _Accept:
    """ASGI middleware: a request whose `Accept` takes none of the media types its route answers gets 406, in JSON
    (an OperationOutcome on /fhir/ routes) naming the types the route answers. `/v1/predict?format=fhir` answers
    application/fhir+json as well."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        route = _ANSWERS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if route is None or scope.get("method") not in route[0]:
            return await self.app(scope, receive, send)
        path, offered = scope["path"], route[1]
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if path == "/v1/predict" and query.get("format") == ["fhir"]:
            offered = (FHIR_JSON, *offered)
        given = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"accept"]
        accept = ", ".join(given) if given else None
        if acceptable(accept, offered):
            return await self.app(scope, receive, send)
        types = offered[0] + (f" (and {', '.join(offered[1:])})" if offered[1:] else "")
        msg = (f"Accept {json.dumps((accept or '')[:60])} takes none of the types {path[:40]} answers: it answers "
               f"only {types}; send Accept: {offered[0]} (or */*), or leave Accept out.")
        await _error(406, msg, fhir=path.startswith("/fhir/"))(scope, receive, send)


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
                                             "schema": {"type": "string", "enum": list(SERVICE_FORMATS),
                                                        "default": "json"}}]
                                           + [{"name": n, "in": "query", "required": False, "schema": {"type": t},
                                               "description": "As the body's field of that name; given in both, "
                                                              "they must agree."}
                                              for n, t in (("top_k", "string"), ("explain", "integer"),
                                                           ("threshold", "number"))]})
    @guarded
    async def predict(request: Request) -> JSONResponse:
        query = query_options(request, ("format", *_OPTION_KEYS))
        fmt = query.get("format", "json")
        if fmt not in SERVICE_FORMATS:
            raise BadRequest(422, f"format={fmt[:20]!r} is not known; use format=json (the default) or format=fhir.")
        check_content_type(request, _JSON_ROUTES["/v1/predict"])
        scorer()
        with svc.admitted():
            body = await read_body(request, limits.max_body_bytes, limits.read_timeout)
            notes, opts = parse_predict(parse_json(body), limits, query)
            records = await score(notes, opts)
        if fmt == "fhir":
            return JSONResponse(bundle(records, systems=svc.systems, subjects=[n["subject"] for n in notes],
                                       source=svc.source, request_id=request.scope.get("clinicode.request_id")),
                                media_type=FHIR_JSON)
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
        with svc.admitted():
            body = await read_body(request, limits.max_body_bytes, limits.read_timeout)
            try:
                note = note_from_document_reference(parse_json(body))
            except DataFormatError as err:
                raise BadRequest(422, str(err)) from None
            if len(note["text"]) > limits.max_text_chars:
                raise BadRequest(413,
                                 f"the note has {len(note['text']):,} characters; the limit is "
                                 f"{limits.max_text_chars:,} (--max-text-chars); shorten or split the note.")
            records = await score([note], opts)
        return JSONResponse(bundle(records, systems=svc.systems, subjects=[note["subject"]],
                                   documents=[note["document"]], source=svc.source,
                                   request_id=request.scope.get("clinicode.request_id")),
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


# ------------------------------------------------------------------ start-up checks and running
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


def _log_config() -> dict[str, Any]:
    from uvicorn.config import LOGGING_CONFIG

    cfg = json.loads(json.dumps(LOGGING_CONFIG))
    cfg["loggers"]["clinicode"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return cfg


def run(checkpoint: Path, *, host: str = "127.0.0.1", port: int = 8000, token_file: Path | None = None,
        limits: Limits = Limits(), device: str = "auto", on_ready: Any = None) -> None:
    """Check the token and the checkpoint folder, bind HOST:PORT, then serve (uvicorn) while the checkpoint loads in a
    thread (/ready answers 503 until it has); SIGTERM or SIGINT stop it gracefully (`Service.drain`).

    Raises:
        ClinicodeError: a bad token file, checkpoint or address, a busy port, or a checkpoint that failed to load
            (the server then stops).
    """
    import uvicorn

    token = check_bind(host, token_file)
    resolve_checkpoint_dir(checkpoint)  # a wrong folder is named at once, before anything listens
    sock = bind_socket(host, port)
    url = url_of(sock)
    failure: list[BaseException] = []

    def load() -> Predictor:
        return Predictor.from_checkpoint(checkpoint, device=device)

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
                            ws="none", http=_protocol(limits.read_timeout, limits.write_timeout),
                            timeout_keep_alive=int(max(1, limits.idle_timeout)),
                            timeout_graceful_shutdown=int(limits.grace) + 30)
    server = _Server(config, app.state.service)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
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
