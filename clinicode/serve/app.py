"""`create_app`: the FastAPI app around one Predictor: its `Service` in `app.state`, the route groups of `routes/`,
the error handlers and the middlewares (`gate`), outermost first: the front checks, the bearer token, Accept."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI

from clinicode import __version__
from clinicode.predict import Predictor
from clinicode.serve.gate import Gate, _Accept, _BearerAuth, _Front
from clinicode.serve.handlers import add_error_handlers
from clinicode.serve.parsing import Limits
from clinicode.serve.routes import fhir, health, scoring
from clinicode.serve.service import Service


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
    svc = Service(limits, load=load, on_loaded=on_loaded, on_load_failure=on_load_failure)
    if predictor is not None:
        svc.load(predictor)
    app = FastAPI(title="clinicode", version=__version__, lifespan=_lifespan, redirect_slashes=False,
                  redoc_url=None,  # one API page (/docs); ReDoc would fetch its script from a CDN
                  description="ICD code suggestions for clinical notes from a clinicode checkpoint (by default LEAM, "
                              "a tf-idf logistic regression, a title match and coders' mentions, fused per code). "
                              "Suggestions are unconfirmed: a coder reviews them. See docs/serve.md.")
    app.state.service = svc
    app.state.limits = limits
    add_error_handlers(app)
    for group in (health, scoring, fhir):  # in this order in the API description
        group.add_routes(app.router)  # the app's own router: an included one costs ~0.1 ms a request (FastAPI 0.165)
    if token is not None:  # /docs then offers "Authorize": its requests carry the token the user types in
        _offer_bearer(app)
    app.add_middleware(_Accept)  # inside the token check: a 401 comes first
    app.add_middleware(_BearerAuth, token=token)
    app.add_middleware(_Front, service=svc, gate=Gate(host, limits.allow_hosts, limits.allow_origins))  # outermost
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    svc: Service = app.state.service
    svc.start()
    yield
    svc.stop()


def _offer_bearer(app: FastAPI) -> None:
    """APP's API description declares the bearer token, so /docs offers "Authorize"."""
    base_openapi = app.openapi

    def openapi_with_bearer() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base_openapi()
            schema.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi_with_bearer  # type: ignore[method-assign]
