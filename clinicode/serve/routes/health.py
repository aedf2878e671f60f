"""/health (liveness and the loaded model), /ready (200 once the model is loaded) and /metrics (Prometheus text)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from clinicode.serve.service import ServiceDep


async def health(svc: ServiceDep) -> JSONResponse:
    b = svc.batcher
    if b is not None and not b.alive() and not svc.draining:
        return JSONResponse({**svc.info, "status": "scoring worker stopped"}, status_code=503)
    status = ("shutting down" if svc.draining else "ok" if svc.predictor is not None
              else "failed to load" if svc.failed is not None else "loading")
    return JSONResponse({"status": status, **svc.info, "notes_scored": b.scored if b else 0,
                         "batches": b.batches if b else 0})


async def ready(svc: ServiceDep) -> JSONResponse:
    if svc.ready:
        return JSONResponse({"status": "ready", **svc.info})
    why = ("shutting down" if svc.draining else "failed to load" if svc.failed is not None
           else "loading" if svc.predictor is None else "scoring worker stopped")
    return JSONResponse({"status": why}, status_code=503, headers={"Retry-After": "2"})


async def metrics(svc: ServiceDep) -> PlainTextResponse:
    b = svc.batcher
    text = svc.metrics.text(scored=b.scored if b else 0, batches=b.batches if b else 0,
                            failures=b.failures if b else 0, pending=svc.pending, ready=svc.ready)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")


def add_routes(router: APIRouter) -> None:
    """GET (in the API description) and HEAD (not) of each route; no token needed for /health and /ready."""
    for path, route, summary in (
            ("/health", health, "Liveness and the loaded model (no token needed)"),
            ("/ready", ready, "Readiness: 200 once the model is loaded (no token)"),
            ("/metrics", metrics, "Prometheus metrics (text format 0.0.4)")):
        router.add_api_route(path, route, methods=["GET"], summary=summary)
        router.add_api_route(path, route, methods=["HEAD"], include_in_schema=False)
