"""POST /v1/predict: notes scored into predict's JSON records (the service's envelope), or into a writer offered to
serve (`?format=fhir`: a FHIR R4 Bundle)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from clinicode.config import PREDICT
from clinicode.formats import SERVICE_ENVELOPE, WRITERS, service_formats
from clinicode.serve.gate import _JSON_ROUTES, check_content_type
from clinicode.serve.handlers import guarded
from clinicode.serve.parsing import _OPTION_KEYS, BadRequest, parse_json, parse_predict, query_options
from clinicode.serve.service import Service, ServiceDep


@guarded
async def predict(request: Request, svc: ServiceDep) -> JSONResponse:
    query = query_options(request, ("format", *_OPTION_KEYS))
    fmt = query.get("format", SERVICE_ENVELOPE)
    if fmt not in service_formats():  # its envelope, or a writer offered to serve (`Writer.serve`)
        choices = " or ".join(f"format={n}" + (" (the default)" if n == SERVICE_ENVELOPE else "")
                              for n in service_formats())
        raise BadRequest(422, f"format={fmt[:20]!r} is not known; use {choices}.")
    check_content_type(request, _JSON_ROUTES["/v1/predict"])
    svc.scorer()
    body = await svc.read(request)
    with svc.admitted():
        notes, opts = parse_predict(parse_json(body), svc.limits, query)
        records = await svc.score(notes, opts)
    if fmt != SERVICE_ENVELOPE:
        return _document(fmt, records, notes, svc, request)
    return JSONResponse({"results": records, "model": svc.info})


def _document(fmt: str, records: list[dict[str, Any]], notes: list[dict[str, Any]], svc: Service,
              request: Request) -> Response:
    """RECORDS as one document of the writer FMT (a FHIR Bundle, ...), in the writer's media type."""
    w = WRITERS[fmt]
    context = {"systems": svc.systems, "source": svc.source, "family": svc.family,
               "request_id": request.scope.get("clinicode.request_id")}
    if w.subjects:
        context["subjects"] = [n["subject"] for n in notes]
    answer = w.document(records, context)
    media = w.document_type or w.media_type
    return Response(answer, media_type=media) if isinstance(answer, bytes) else JSONResponse(answer, media_type=media)


def add_routes(router: APIRouter) -> None:
    """/v1/predict, its body and query described for /docs by hand (the route reads its body itself, within its
    limits); the formats are the writers offered to serve when the app is made."""
    query = [{"name": n, "in": "query", "required": False, "schema": {"type": t},
              "description": "As the body's field of that name; given in both, they must agree."}
             for n, t in (("top_k", "string"), ("explain", "integer"), ("threshold", "number"))]
    fmt = {"name": "format", "in": "query", "required": False,
           "schema": {"type": "string", "enum": service_formats(), "default": SERVICE_ENVELOPE}}
    router.add_api_route("/v1/predict", predict, methods=["POST"],
                         summary="Score notes: predict's JSON records, or a FHIR R4 Bundle with ?format=fhir",
                         openapi_extra={"requestBody": {"required": True,
                                                        "content": {"application/json": {"schema": PREDICT_SCHEMA}}},
                                        "parameters": [fmt, *query]})


_NOTE_SCHEMA = {"type": "object", "required": ["text"], "additionalProperties": False, "properties": {
    "id": {"type": "string", "description": "Your id for the note (default: its position)."},
    "text": {"type": "string", "description": "The note's text."},
    "subject": {"description": "FHIR subject, e.g. \"Patient/123\" or a Reference object; "
                               "carried into the FHIR output.",
                "oneOf": [{"type": "string"}, {"type": "object"}]}}}
PREDICT_SCHEMA = {"type": "object", "required": ["notes"], "additionalProperties": False, "properties": {
    "notes": {"type": "array", "minItems": 1, "items": _NOTE_SCHEMA},
    "top_k": {"description": "Codes listed in `scores`: a positive integer or \"all\".", "default": PREDICT.top_k,
              "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "enum": ["all"]}]},
    "explain": {"type": "integer", "minimum": 0, "default": PREDICT.explain,
                "description": "N > 0: the N highest-attention spans, up to N evidence spans per predicted code."},
    "threshold": {"type": "number", "minimum": 0, "maximum": 1,
                  "description": "Override the checkpoint's tuned threshold."}}}
