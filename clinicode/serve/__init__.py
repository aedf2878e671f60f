"""`clinicode serve`: an HTTP scoring service (FastAPI on uvicorn) with JSON and FHIR R4 output; its routes, limits,
security model and operation are in docs/serve.md, its modules (one topic each: `service`, `routes/`, `gate`,
`handlers`, `parsing`, `batcher`, `metrics`, `protocol`, `app`, `server`) in docs/architecture.md."""

from clinicode.serve.app import create_app
from clinicode.serve.batcher import Batcher, ShuttingDown
from clinicode.serve.gate import ANALYZE, FHIR_JSON, ROUTES, Gate, acceptable, check_content_type, host_name
from clinicode.serve.metrics import Metrics
from clinicode.serve.parsing import (
    BadRequest,
    ClientGone,
    Limits,
    merge_options,
    parse_json,
    parse_options,
    parse_predict,
    query_options,
    read_body,
)
from clinicode.serve.server import bind_socket, check_bind, is_loopback, read_token, run, url_of
from clinicode.serve.service import Service

__all__ = [
    "ANALYZE", "FHIR_JSON", "ROUTES", "BadRequest", "Batcher", "ClientGone", "Gate", "Limits", "Metrics", "Service",
    "ShuttingDown", "acceptable", "bind_socket", "check_bind", "check_content_type", "create_app", "host_name",
    "is_loopback", "merge_options", "parse_json", "parse_options", "parse_predict", "query_options", "read_body",
    "read_token", "run", "url_of",
]
