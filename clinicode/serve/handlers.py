"""The app's error answers: a `BadRequest`, an HTTP error (404, 405), a validation error and an unexpected failure,
each as JSON (an OperationOutcome on /fhir/ routes); `guarded` wraps a route so its failures get them too."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from clinicode.serve.gate import ANALYZE, _error, _loggable
from clinicode.serve.parsing import BadRequest, ClientGone

log = logging.getLogger("clinicode.serve")


def is_fhir(request: Request) -> bool:
    return request.url.path.startswith("/fhir/")


async def bad_request(request: Request, err: BadRequest) -> JSONResponse:
    return _error(err.status, err.message, fhir=is_fhir(request), headers=err.headers)


async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
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


async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
    where = ", ".join(".".join(str(x) for x in e.get("loc", ())) for e in err.errors()[:3])  # never the input
    return _error(422, f"invalid request at {where or 'the body'}; see /docs for the expected shape.",
                  fhir=is_fhir(request))


async def bug(request: Request, err: Exception) -> JSONResponse:
    log.error("%s %s failed: %s (note text is not logged)", _loggable(request.method, 20),
              _loggable(request.url.path), type(err).__name__)
    return _error(500, "the server failed on this request (a bug, logged without note text); please report it.",
                  fhir=is_fhir(request))


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(BadRequest, bad_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(Exception, bug)


def guarded(route: Callable[..., Any]) -> Callable[..., Any]:
    """ROUTE whose unexpected failure is a 500 JSON answer and a log line naming only the exception's type (Starlette
    would re-raise it to uvicorn, whose traceback would print the exception's message); a client that hung up is
    logged as such, not as the server's error. ROUTE's dependencies (keyword arguments) pass through."""
    @functools.wraps(route)
    async def wrapper(request: Request, **dependencies: Any) -> Any:
        try:
            return await route(request, **dependencies)
        except BadRequest:
            raise
        except ClientGone:
            log.info("%s %s: the client closed the connection before sending its whole request",
                     _loggable(request.method, 20), _loggable(request.url.path))
            return JSONResponse({"error": {"status": 499, "message": "client closed the connection"}},
                                status_code=499)
        except Exception as err:
            return await bug(request, err)
    return wrapper
