"""What reaches the routes: the Host and Origin checks (`Gate`), the Content-Type and Accept checks, the bearer token,
and the outermost middleware (`_Front`: request id, refusals, the access log line, metrics, identity headers); and
the JSON error answer they all give."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import re
import uuid
from typing import TYPE_CHECKING, Any, Sequence
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from clinicode.formats import WRITERS
from clinicode.serve.parsing import BadRequest
from clinicode.serve.protocol import DUPLICATE_HOST, MISSING_HOST

if TYPE_CHECKING:
    from clinicode.serve.service import Service

log = logging.getLogger("clinicode.serve")
access = logging.getLogger("clinicode.serve.access")  # one line per request: client, method, path, status, time, id
FHIR_JSON = "application/fhir+json"
ANALYZE = "/fhir/DocumentReference/$analyze"

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

    def cors(self, origin: str | None) -> bool:
        """Whether ORIGIN is one `--allow-origin` names ("*": any), so its pages get CORS headers (a preflight's
        answer, Access-Control-Allow-Origin on every answer)."""
        return origin is not None and ("*" in self.origins or origin.strip().rstrip("/").lower() in self.origins)

    def origin_ok(self, origin: str | None, host: str | None) -> bool:
        if origin is None or "*" in self.origins:
            return True
        o = origin.strip().rstrip("/").lower()
        if o in self.origins:
            return True
        scheme, sep, authority = o.partition("://")
        return bool(sep) and scheme in ("http", "https") and host is not None and authority == host.strip().lower()


_CORS_HEADERS = "Authorization, Content-Type, Accept, X-Request-ID"
_CORS_EXPOSED = "X-Request-ID, X-Clinicode-Checkpoint, X-Clinicode-Model, X-Clinicode-Version, Retry-After"


def _absolute_form(scope: dict[str, Any]) -> dict[str, Any] | str | None:
    """SCOPE with an absolute-form request target (`POST http://host/v1/predict HTTP/1.1`, RFC 9112 section 3.2.2)
    read as its path, and its authority as the Host (which the target overrides); None for the usual origin-form; a
    message when the target is no http(s) URI with a host."""
    raw = scope.get("raw_path") or b""
    lowered = raw[:8].lower()
    if not (lowered.startswith(b"http://") or lowered.startswith(b"https://")):
        return None
    from urllib.parse import unquote

    rest = raw.split(b"://", 1)[1]
    authority, slash, tail = rest.partition(b"/")
    if not authority or b"@" in authority:
        return ("an absolute request target must name a host without user information, e.g. "
                "http://127.0.0.1:8000/v1/predict")
    raw_path = b"/" + tail
    headers = [(k, v) for k, v in scope.get("headers", []) if k != b"host"] + [(b"host", authority)]
    return {**scope, "raw_path": raw_path, "path": unquote(raw_path.decode("latin-1")), "headers": headers}


class _Front:
    """Outermost ASGI middleware: request id, Host and Origin checks, draining, the access log line, the metrics and
    the checkpoint's identity headers on every answer; an answer is always JSON, even when a request is cancelled."""

    def __init__(self, app: Any, service: Service, gate: Gate) -> None:
        self.app, self.svc, self.gate = app, service, gate

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        hosts = sum(1 for k, _ in scope.get("headers", []) if k == b"host")  # before an absolute target names one
        absolute = _absolute_form(scope)
        if isinstance(absolute, dict):
            scope = absolute
        loop = asyncio.get_running_loop()
        start = loop.time()
        scope["clinicode.start"] = start
        given = _header(scope, b"x-request-id")
        rid = given if given is not None and _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        scope["clinicode.request_id"] = rid
        path, method = scope.get("path", ""), scope.get("method", "")
        fhir = path.startswith("/fhir/")
        status = [0]
        host, origin = _header(scope, b"host"), _header(scope, b"origin")
        # a page of an --allow-origin origin may read every answer (errors too) and the headers naming the model
        cors = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"),
                (b"access-control-expose-headers", _CORS_EXPOSED.encode())] if self.gate.cors(origin) else []

        async def stamped(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode()),
                                      *self.svc.identity, *cors]
            await send(message)

        refusal = None
        if hosts > 1 or (hosts == 0 and scope.get("http_version") == "1.1"):
            # as h11 answers while parsing (protocol.py), so the answer does not depend on --http: a plain JSON 400
            refusal = _error(400, DUPLICATE_HOST if hosts else MISSING_HOST, headers={"Connection": "close"})
        elif isinstance(absolute, str):
            refusal = _error(400, absolute + ".", fhir=fhir, headers={"Connection": "close"})
        elif _header(scope, b"transfer-encoding") is not None and _header(scope, b"content-length") is not None:
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
        elif (method == "OPTIONS" and cors and path in _ANSWERS
              and _header(scope, b"access-control-request-method") is not None):
            # a browser's preflight for a page of an allowed origin: which methods and headers it may send
            methods = ", ".join(sorted(_ANSWERS[path][0]))
            refusal = Response(status_code=204, headers={"Access-Control-Allow-Methods": methods,
                                                         "Access-Control-Allow-Headers": _CORS_HEADERS,
                                                         "Access-Control-Max-Age": "600"})
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
        if path == "/v1/predict" and len(query.get("format", ())) > 1:
            return await self.app(scope, receive, send)  # a repeated option: the route's 422 says so, not a 406
        w = WRITERS.get(query.get("format", [""])[0]) if path == "/v1/predict" else None
        if w is not None and w.serve:  # a writer offered to serve answers in its own media type
            offered = (w.document_type or w.media_type, *offered)
        given = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"accept"]
        accept = ", ".join(given) if given else None
        if acceptable(accept, offered):
            return await self.app(scope, receive, send)
        types = offered[0] + (f" (and {', '.join(offered[1:])})" if offered[1:] else "")
        msg = (f"Accept {json.dumps((accept or '')[:60])} takes none of the types {path[:40]} answers: it answers "
               f"only {types}; send Accept: {offered[0]} (or */*), or leave Accept out.")
        await _error(406, msg, fhir=path.startswith("/fhir/"))(scope, receive, send)
