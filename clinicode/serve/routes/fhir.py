"""POST /fhir/DocumentReference/$analyze: one FHIR DocumentReference (a base64 text/plain attachment) scored into a
FHIR R4 Bundle."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from clinicode.errors import DataFormatError
from clinicode.fhir import bundle, note_from_document_reference
from clinicode.serve.gate import _JSON_ROUTES, ANALYZE, FHIR_JSON, check_content_type
from clinicode.serve.handlers import guarded
from clinicode.serve.parsing import _OPTION_KEYS, ANALYZE_EXAMPLE, BadRequest, merge_options, parse_json, query_options
from clinicode.serve.service import ServiceDep


@guarded
async def analyze(request: Request, svc: ServiceDep) -> JSONResponse:
    limits = svc.limits
    opts = merge_options({}, query_options(request, _OPTION_KEYS), limits)
    check_content_type(request, _JSON_ROUTES[ANALYZE])
    svc.scorer()
    body = await svc.read(request)
    with svc.admitted():
        try:
            note = note_from_document_reference(parse_json(body, ANALYZE_EXAMPLE))
        except DataFormatError as err:
            raise BadRequest(422, str(err)) from None
        if len(note["text"]) > limits.max_text_chars:
            raise BadRequest(413, f"the note has {len(note['text']):,} characters; the limit is "
                                  f"{limits.max_text_chars:,} (--max-text-chars); shorten or split the note.")
        records = await svc.score([note], opts)
    return JSONResponse(bundle(records, systems=svc.systems, subjects=[note["subject"]],
                               documents=[note["document"]], source=svc.source,
                               request_id=request.scope.get("clinicode.request_id"), family=svc.family),
                        media_type=FHIR_JSON)


def add_routes(router: APIRouter) -> None:
    """$analyze, its body and query described for /docs by hand (the route reads its body itself)."""
    body = {"required": True, "content": {FHIR_JSON: {"schema": {"type": "object"}},
                                          "application/json": {"schema": {"type": "object"}}}}
    query = [{"name": n, "in": "query", "required": False, "schema": {"type": t}}
             for n, t in (("top_k", "string"), ("explain", "integer"), ("threshold", "number"))]
    router.add_api_route(ANALYZE, analyze, methods=["POST"],
                         summary="Score a FHIR DocumentReference (base64 text/plain attachment) into a FHIR R4 Bundle",
                         openapi_extra={"requestBody": body, "parameters": query})
